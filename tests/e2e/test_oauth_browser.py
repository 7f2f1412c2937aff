"""Issue 20's browser scenario in a real Chromium: a server added by URL that asks for OAuth shows
`Needs authorization`; `Authorize` goes to the OAuth lab's consent page (tests/servers/oauthlab/) and,
on `Approve`, back to the console through the real redirects; the server connects and lists its
tools, and a call approved through the gate reaches the tool with the console's token. `Deny`
brings the person back to `authorization failed: access_denied`.

Run on its own: `pytest -m e2e tests/e2e/test_oauth_browser.py`. The tests run in order on one
console, one lab and one signed-in page."""

import json
import re

import pytest
from playwright.sync_api import expect

from tests.e2e import a11y
from tests.e2e.browser import answer, call_in_background, console_with_user, nav, shoot, sign_in
from tests.live import wait_until
from tests.servers.oauthlab.app import fingerprint
from tests.servers.oauthlab.run import Lab

pytestmark = pytest.mark.e2e

USER, PASSWORD = "oauth-operator", "e2e-password-20"


@pytest.fixture(scope="module")
def console(module_console, lab):
    c = console_with_user(module_console, {}, USER, PASSWORD)
    c.env["AGENVOY_PUBLIC_URL"] = c.url  # the redirect URI the lab sends Chromium back to
    module_console.start(c)
    return c


def registered_client(lab: Lab) -> str:
    """The client id the console registered at the lab (dynamic registration, 16.2)."""
    ids = [e["client_id"] for e in lab.events() if e["kind"] == "registrations"]
    assert len(ids) == 1, ids
    return ids[0]


def test_it_shows_a_server_added_by_url_as_needing_authorization(page, console, lab):
    page.goto("/")
    sign_in(page, USER, PASSWORD)
    page.get_by_role("link", name="Add server").click()
    page.get_by_label("Name").fill("lab")
    page.get_by_label("Transport").select_option("streamable-http")
    page.get_by_label("URL").fill(lab.mcp_url)
    page.get_by_role("button", name="Add server").click()
    expect(page.get_by_text("Added lab")).to_be_visible()
    row = page.locator("#server-lab")
    expect(row).to_have_attribute("data-state", "needs_authorization", timeout=60_000)
    expect(row.get_by_text("Needs authorization")).to_be_visible()
    expect(row.get_by_role("button", name="Authorize")).to_be_visible()
    assert lab.stats()["authorizations"] == 0  # nothing happens at the lab until a person says so
    shoot(page, "oauth-needs-authorization")
    assert a11y.check(page, "servers (needs authorization)") == []
    page.goto("/servers/lab/")
    assert a11y.check(page, "server-detail (needs authorization)") == []
    page.goto("/")  # the next test watches the Servers list


def test_it_authorizes_from_the_row_the_live_socket_updated(page, console, lab):
    # The row goes from connecting to needs_authorization by push, as a person sees it happen
    # when a server is added: a reconnect makes the socket send the row again.
    page.wait_for_function("() => window.agvLive === true")
    page.evaluate("document.querySelector('#server-lab').__first = true")
    assert console.post("/v1/mcp/reconnect", {"name": "lab"}).status_code == 200
    page.wait_for_function(
        "() => (() => { const row = document.querySelector('#server-lab');"
        " return row && !row.__first && row.dataset.state === 'needs_authorization'; })()"
    )
    page.locator("#server-lab").get_by_role("button", name="Authorize").click()
    expect(page).to_have_url(re.compile(re.escape(lab.url) + r"/consent\?request="), timeout=5_000)


def test_it_authorizes_through_the_consent_page_and_connects(page, console, lab):
    page.goto("/")  # a fresh render of the Servers page this time
    page.locator("#server-lab").get_by_role("button", name="Authorize").click()
    expect(page).to_have_url(re.compile(re.escape(lab.url) + r"/consent\?request="))
    expect(page.get_by_role("heading", name=re.compile("^Authorize "))).to_be_visible()
    shoot(page, "oauth-consent")
    page.get_by_role("button", name="Approve").click()
    expect(page).to_have_url(f"{console.url}/servers/lab/")
    console.wait_connected("lab")
    page.reload()  # the tool list arrives with the connection; the page offers a reload for it
    expect(page.get_by_role("heading", name="whoami", exact=True)).to_be_visible()
    expect(page.get_by_role("heading", name="echo", exact=True)).to_be_visible()
    expect(page.get_by_text(re.compile(f"Authorized by {USER}"))).to_be_visible()
    expect(page.get_by_role("button", name="Forget authorization")).to_be_visible()
    shoot(page, "oauth-authorized")
    assert a11y.check(page, "server-detail (authorized)") == []
    sent = lab.authorize_requests()[-1]
    assert sent["redirect_uri"] == f"{console.url}/oauth/callback"
    assert sent["resource"] == lab.mcp_url and sent["code_challenge_method"] == "S256"
    stats = lab.stats()
    assert stats["consents_approved"] == 1 and stats["code_exchanges"] == 1


def test_it_runs_an_approved_call_with_the_consoles_token(page, console, lab):
    nav(page, "Pending").click()
    box = call_in_background(console, "mcp__lab__whoami", {})
    item = page.locator("article.pending", has_text="whoami")
    expect(item).to_be_visible()
    item.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_text("Approved: mcp__lab__whoami.")).to_be_visible()
    done = answer(box)
    assert done["status"] == 200 and done["body"]["status"] == "done", done
    me = json.loads(done["body"]["result"])
    assert me["client_id"] == registered_client(lab) and me["subject"] == "lab-user"
    assert me["token_fingerprint"] in {fingerprint(t) for t in lab.tokens()["access"]}
    # The agent's own token never went upstream: the lab saw only tokens it issued.
    assert lab.stats()["tool_calls"] == 1


def test_it_shows_access_denied_when_the_person_denies(page, console, lab):
    page.goto("/servers/lab/")
    page.get_by_role("button", name="Forget authorization").click()
    expect(page.get_by_text("Forgot the authorization of lab.")).to_be_visible()
    wait_until(lambda: console.status()["lab"]["state"] == "needs_authorization", 30, what="lab forgotten")
    page.reload()
    page.locator("#server-oauth").get_by_role("button", name="Authorize").click()
    expect(page).to_have_url(re.compile(re.escape(lab.url) + r"/consent\?request="))
    page.get_by_role("button", name="Deny").click()
    expect(page).to_have_url(f"{console.url}/servers/lab/")
    expect(page.get_by_text("authorization failed: access_denied").first).to_be_visible()
    shoot(page, "oauth-denied")
    assert a11y.check(page, "server-detail (authorization failed)") == []
    st = console.status()["lab"]
    assert st["state"] == "needs_authorization" and st["oauth"]["authorized"] is False
    assert lab.stats()["refusals"]["access_denied"] == 1 and lab.stats()["code_exchanges"] == 1


def test_it_answers_an_unknown_state_with_an_accessible_page(page, console):
    r = page.goto("/oauth/callback?state=nope&code=abc")
    assert r is not None and r.status == 400
    expect(page.get_by_text("authorization failed: unknown or expired state")).to_be_visible()
    assert a11y.check(page, "oauth-callback (unknown state)") == []
