"""Issue 31 in a real Chromium against a real `manage.py serve`: the server page lists a server's
prompts and resources (SPEC 20.1); an `ask` rule on a resource holds a read made by a real MCP
client (the SDK's `Client` on `/mcp`) in the inbox, where the Pending page says `Read <uri> from
<server>`; a person approves it there and the client gets the contents (SPEC 20.3). axe-core at
1280 and 390 px on each page it opens. Run on its own:
`pytest -m e2e tests/e2e/test_rest_of_mcp_browser.py`."""

import concurrent.futures

import anyio
import pytest
from playwright.sync_api import Page, expect

from tests.e2e import a11y
from tests.e2e.browser import console_with_user, nav, shoot, sign_in
from tests.live import our_server, wait_until
from tests.mcpclients import mcp_client

pytestmark = pytest.mark.e2e

USER, PASSWORD = "reader", "e2e-password-31"
URI = "test://a/kib"
RULE = f"ask resource:a(uri:{URI})"


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, {"a": our_server("ui.py", "--name", "a")}, USER, PASSWORD)
    (c.home / "allow_tool").write_text("mcp__a__*\n")
    (c.home / "rules").write_text(RULE + "\n")
    module_console.start(c)
    c.wait_connected("a")
    # Its prompts and resources are listed just after its tools (SPEC 20.1's counts).
    wait_until(lambda: c.status()["a"].get("prompts") == 2, 30, what="a's prompts listed")
    return c


@pytest.fixture(scope="module")
def page(page):
    """tests/e2e/conftest.py's page, signed in."""
    page.goto("/")
    sign_in(page, USER, PASSWORD)
    return page


def read_on_mcp(console, uri: str):
    """A read of `uri` by the SDK's client on `/mcp` (2026-07-28), as an MCP host makes it."""

    async def main():
        with anyio.fail_after(120):
            async with mcp_client(console, "/mcp", "auto") as client:
                return await client.read_resource(uri)

    return anyio.run(main)


def test_it_lists_a_servers_prompts_and_resources_on_its_page(page: Page, console):
    page.goto("/servers/a/")
    # The markup is the page's own business: the headings SPEC 20.1 names, and what is under them.
    expect(page.get_by_role("heading", name="Prompts")).to_be_visible()
    expect(page.get_by_role("heading", name="Resources")).to_be_visible()
    main = page.get_by_role("main")
    for text in ("greet", "Greeting", "Greet someone.", "who", "hello"):
        expect(main).to_contain_text(text)
    for text in (URI, "kib", "text/plain", "test://a/counter", "test://a/items/{item}"):
        expect(main).to_contain_text(text)
    shoot(page, "rest-server-page")
    assert a11y.check(page, "server-detail (prompts and resources)") == []


def test_it_holds_a_clients_read_until_a_person_approves_it_on_the_pending_page(page: Page, console):
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        read = pool.submit(read_on_mcp, console, URI)
        items = wait_until(
            lambda: [p for p in console.get("/v1/pending").json()["pending"] if p["kind"] == "resource"],
            30,
            what="the read in the inbox",
        )
        assert not read.done()
        nav(page, "Pending").click()
        card = page.locator(f"#pending-{items[0]['id']}")
        expect(card).to_contain_text(f"Read {URI} from a")
        expect(card).to_have_attribute("data-kind", "resource")
        shoot(page, "rest-pending-read")
        assert a11y.check(page, "pending (a resource read)") == []
        card.get_by_role("button", name="Approve", exact=True).click()
        expect(card).to_have_count(0)
        got = read.result(timeout=60)
    assert [(c.uri, c.mime_type, c.text) for c in got.contents] == [(URI, "text/plain", "k" * 1024)]
    row = console.get(f"/v1/mcp/calls/{items[0]['call_id']}").json()
    assert (row["kind"], row["uri"], row["status"], row["decision"]) == ("resource", URI, "done", "approve")
