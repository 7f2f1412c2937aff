"""Issue 21 in a real Chromium against a real `manage.py serve`: a Claude Code `PermissionRequest`
for `Bash` (its documented payload, tests/fixtures/claude_code/) held on the Pending page,
approved there by a person, and answered `allow`; `Approve for 1 hour` from the confirmation's
own page, the grant listed on the Tokens page with its time left and revoked there; the hooks
settings block on the Tokens page; the one-tap page a link preview would see. Run on its own:
`pytest -m e2e tests/e2e/test_approvals_browser.py`.

Screenshots at 390 and 1280 px go to artifacts/approvals/ (not committed).
"""

import concurrent.futures
import copy
import json
import re

import pytest
from playwright.sync_api import expect

from tests.claude_code import PERMISSION_REQUEST, check_shape, pending_of
from tests.e2e.browser import PHONE, console_with_user, new_context, shoot_into, sign_in
from tests.live import ROOT, our_server

pytestmark = pytest.mark.e2e

SHOTS = ROOT / "artifacts" / "approvals"
USER, PASSWORD = "lead", "e2e-password-21"
HOOK = "/v1/hooks/claude-code"


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, {"echo": our_server("echo.py")}, USER, PASSWORD)
    c.env["AGENVOY_PUBLIC_URL"] = c.url  # the settings block and links name this console
    # An ntfy target nobody listens on (its pushes fail and are retried): its links still work.
    c.manage(
        "shell",
        "-c",
        "from mcpcore.calls import notify; notify.add_target('ntfy', 'http://127.0.0.1:9/phone')",
    )
    module_console.start(c)
    c.wait_connected("echo")
    return c


@pytest.fixture(scope="module")
def agent(console):
    client = console.client_for("agent", "claude-laptop")
    yield client
    client.close()


def nav(page, name: str):
    return page.get_by_role("navigation", name="Main").get_by_role("link", name=name)


def hook(pool, agent, session: str, command: str, wait: float = 120) -> concurrent.futures.Future:
    body = copy.deepcopy(PERMISSION_REQUEST)
    body["session_id"] = session
    body["tool_input"]["command"] = command
    return pool.submit(agent.post, HOOK, json=body, params={"wait": wait})


def test_it_signs_in(page):
    page.goto("/login/")
    sign_in(page, USER, PASSWORD)


def test_it_holds_a_bash_permission_request_on_the_pending_page_and_answers_allow_when_approved(
    page, console, agent, pool
):
    nav(page, "Pending").click()
    held = hook(pool, agent, "browser-1", "rm -rf node_modules")
    card = page.locator("article.pending", has_text="rm -rf node_modules")
    expect(card).to_be_visible()
    expect(card.locator("h2")).to_have_text("Bash")
    expect(card.get_by_text("permission prompt")).to_be_visible()
    expect(card.locator("code.cwd")).to_have_text("/Users/...")
    expect(card.get_by_role("button", name="Approve for 1 hour")).to_be_visible()
    shoot_into(page, SHOTS, "pending-hook")
    assert not held.done()
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_text("Approved: Bash.")).to_be_visible()
    r = held.result(30)
    assert r.status_code == 200
    assert r.json() == {
        "hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}
    }
    check_shape("PermissionRequest", r.json())
    expect(card).to_have_count(0)


def test_it_denies_with_a_reason_from_the_pending_page(page, agent, pool):
    held = hook(pool, agent, "browser-2", "git push --force")
    card = page.locator("article.pending", has_text="git push --force")
    expect(card).to_be_visible()
    card.get_by_label("Reason").fill("not on main")
    card.get_by_role("button", name="Deny").click()
    decision = held.result(30).json()["hookSpecificOutput"]["decision"]
    assert decision == {"behavior": "deny", "message": "Skipped by user. Reason: not on main"}


def test_it_approves_for_an_hour_lists_the_grant_with_time_left_and_revoking_it_asks_again(
    page, console, agent, pool
):
    held = hook(pool, agent, "browser-3", "make test")
    item = pending_of(console, "browser-3", 20)
    page.goto(f"/pending/{item['id']}/")
    page.get_by_role("button", name="Approve for 1 hour").click()
    expect(page.get_by_text("Approved for 1 hour: Bash.")).to_be_visible()
    assert held.result(30).json()["hookSpecificOutput"]["decision"] == {"behavior": "allow"}
    # The next prompt of Bash by that token, in another session: at once.
    at_once = hook(pool, agent, "browser-4", "make lint", wait=600).result(30)
    assert at_once.json()["hookSpecificOutput"]["decision"] == {"behavior": "allow"}

    nav(page, "Tokens").click()
    row = page.locator("tr", has_text="claude-laptop")
    grant = row.locator("form.grant", has_text="Bash")
    expect(grant.locator(".grant-left time")).to_have_text(re.compile(r"^(59|60):\d\d$"))
    expect(page.locator("#hooks-settings")).to_contain_text('"type": "http"')
    settings_block = json.loads(page.locator("#hooks-settings").inner_text())
    entry = settings_block["hooks"]["PermissionRequest"][0]["hooks"][0]
    assert entry["url"] == f"{console.url}/v1/hooks/claude-code"
    assert entry["headers"] == {"Authorization": "Bearer $AGENVOY_TOKEN"}
    assert entry["allowedEnvVars"] == ["AGENVOY_TOKEN"] and entry["timeout"] > 55
    shoot_into(page, SHOTS, "tokens-grants")
    grant.get_by_role("button", name="Revoke").click()
    expect(page.get_by_text("claude-laptop must ask again for Bash.")).to_be_visible()
    # Asked again: nobody answers within a second, so Claude Code would ask at the terminal.
    assert hook(pool, agent, "browser-5", "make lint", wait=1).result(30).json() == {}


def test_it_shows_a_one_tap_link_as_a_page_with_one_button_that_decides(page, console, agent, pool):
    from mcpcore import onetap

    held = hook(pool, agent, "browser-6", "terraform apply")
    item = pending_of(console, "browser-6", 20)
    link = onetap.url(console.url, console.env["DJANGO_SECRET_KEY"], item["id"], onetap.DENY, 1)
    phone = new_context(page.context.browser, viewport=PHONE)  # no session: what a phone opens
    tap = phone.new_page()
    tap.goto(link)
    expect(tap.locator("#one-tap")).to_contain_text("terraform apply")
    expect(tap.get_by_role("button")).to_have_count(1)
    shoot_into(tap, SHOTS, "one-tap")
    assert not held.done()
    tap.get_by_role("button", name="Deny").click()
    expect(tap.locator("body")).to_have_text("denied")
    assert held.result(30).json()["hookSpecificOutput"]["decision"]["behavior"] == "deny"
    tap.goto(link)
    expect(tap.locator("body")).to_have_text("this link is no longer valid")
    phone.close()
