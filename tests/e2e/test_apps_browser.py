"""Issue 33's browser scenario in a real Chromium: an app (the MCP SDK's own client side,
`OAuthClientProvider`, registering dynamically) signs in to a live console. Chromium follows
its authorization URL: the console's sign-in, then the `Allow an app` page (axe-core and the
keyboard walk pass on it), `Allow`; the app lists the tools, and its call waits in the inbox
under `<client name> (app of <person>)` until the person approves it on the Pending page. The
Tokens page lists it under Connected apps.

Run on its own: `pytest -m e2e tests/e2e/test_apps_browser.py`."""

import queue
import threading
from urllib.parse import parse_qs, urlsplit

import anyio
import pytest
from playwright.sync_api import expect

from tests.e2e import a11y
from tests.e2e.browser import console_with_user, shoot
from tests.live import our_server
from tests.oauthapps import LOOPBACK_REDIRECT, MemoryStorage, app_client, provider_for

pytestmark = pytest.mark.e2e

USER, PASSWORD = "app-owner", "e2e-password-33"
APP = "Phone assistant"


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, {"echo": our_server("echo.py")}, USER, PASSWORD)
    c.env["AGENVOY_PUBLIC_URL"] = c.url
    module_console.start(c)
    c.wait_connected("echo")
    return c


class App:
    """The SDK client in a thread of its own (Playwright's objects stay on the test's thread):
    its authorization URL comes out of `urls`, the redirect back goes into `returns`."""

    def __init__(self, url: str) -> None:
        self.urls: queue.Queue = queue.Queue()
        self.returns: queue.Queue = queue.Queue()
        self.listed = threading.Event()
        self.result: dict = {}
        self.storage = MemoryStorage()
        self.provider = provider_for(url, self.storage, self._answer, name=APP)
        self.thread = threading.Thread(target=lambda: anyio.run(self._main, url), daemon=True)

    def _answer(self, authorization_url: str) -> str:
        self.urls.put(authorization_url)
        return self.returns.get(timeout=120)

    async def _main(self, url: str) -> None:
        try:
            async with app_client(url, self.provider) as client:
                self.result["tools"] = {t.name for t in (await client.list_tools()).tools}
                self.listed.set()
                answer = await client.call_tool("echo__echo", {"text": "hello from the phone"})
                self.result["text"] = answer.content[0].text
        except BaseException as exc:  # told to the test, which fails with it
            self.result["error"] = repr(exc)
            self.listed.set()


def test_it_lets_a_person_allow_an_app_and_approve_its_call(page, console):
    app = App(console.url + "/mcp")
    app.thread.start()
    authorization_url = app.urls.get(timeout=60)
    back: dict = {}

    def at_the_app(route):
        back["url"] = route.request.url
        route.fulfill(
            status=200, content_type="text/html", body="<!doctype html><title>App</title><p>Done</p>"
        )

    page.route(LOOPBACK_REDIRECT.rsplit("/", 1)[0] + "/**", at_the_app)
    page.goto(authorization_url)
    # Not signed in: the console's own sign-in first, then back to the app's request.
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click(timeout=90_000)
    expect(page.get_by_role("heading", name="Allow an app")).to_be_visible(timeout=90_000)
    expect(page.locator("#app-name")).to_have_text(APP)
    expect(page.locator("#app-resource")).to_have_text(console.url + "/mcp")
    expect(page.locator("#app-return-host")).to_contain_text("127.0.0.1")
    assert "Agent" in page.locator("#app-allow").inner_text()
    shoot(page, "apps-allow")
    assert a11y.check(page, "app-allow") == []
    page.get_by_role("button", name="Allow", exact=True).click()
    page.wait_for_url(LOOPBACK_REDIRECT + "**")
    query = parse_qs(urlsplit(back["url"]).query)
    assert query["iss"] == [console.url] and "code" in query and "state" in query
    app.returns.put(back["url"])

    assert app.listed.wait(60), "the app did not list its tools"
    assert "error" not in app.result, app.result
    assert "echo__echo" in app.result["tools"]

    page.goto("/pending/")
    card = page.locator("article.pending").filter(has_text="echo__echo")
    expect(card).to_be_visible(timeout=30_000)
    expect(card).to_contain_text(f"{APP} (app of {USER})")
    card.get_by_role("button", name="Approve", exact=True).click()
    app.thread.join(60)
    assert app.result.get("text") == "hello from the phone", app.result

    page.goto("/tokens/")
    apps = page.locator("#connected-apps")
    expect(apps).to_contain_text(APP)
    expect(apps).to_contain_text(USER)
    assert a11y.check(page, "tokens (connected apps)") == []
    apps.get_by_role("button", name="Revoke").click()
    expect(page.locator("#connected-apps")).to_contain_text("No connected apps.")
    assert a11y.check(page, "tokens (an app revoked)") == []
