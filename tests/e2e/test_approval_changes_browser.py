"""SPEC 24.4-24.6 in a real Chromium against a real `manage.py serve` with the echo test server:
`Extend` in the inbox and its 24-hour cap, `Edit and approve` on a confirmation's page (the
schema's refusal, a deny rule's, then the changed call run and told to its agent, and History
showing both argument sets), `Approve selected` / `Deny selected`, and 50 identical calls as one
`×50` row decided in one click; the pages under axe-core at 1280 and 390 px and the Tab walk.
Run on its own: `pytest -m e2e tests/e2e/test_approval_changes_browser.py`.

Screenshots at 390 and 1280 px go to artifacts/approval-changes/ (not committed).
"""

import datetime
import json

import pytest
from playwright.sync_api import expect

from tests.e2e import a11y
from tests.e2e.browser import DESKTOP, console_with_user, shoot_into, sign_in
from tests.live import ROOT, our_server, wait_until

pytestmark = pytest.mark.e2e

SHOTS = ROOT / "artifacts" / "approval-changes"
USER, PASSWORD = "lead", "e2e-password-43"

AGE = """
import datetime
from django.utils import timezone
from mcpcore.models import ToolCall
ToolCall.objects.filter(confirm_id=%r).update(created_at=timezone.now() - datetime.timedelta(hours=23, minutes=58))
"""


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, {"echo": our_server("echo.py")}, USER, PASSWORD)
    module_console.start(c)
    c.wait_connected("echo")
    return c


@pytest.fixture(scope="module")
def agent(console):
    client = console.client_for("agent", "laptop")
    yield client
    client.close()


def pending_call(agent, text: str, session: str = "e2e-43") -> dict:
    r = agent.post(
        "/v1/mcp/call",
        json={"name": "mcp__echo__echo", "arguments": {"text": text}, "session_id": session, "wait": 0},
    )
    assert r.status_code == 202, r.text
    return r.json()


def expiry_of(console, confirm_id: str) -> datetime.datetime:
    item = next(p for p in console.get("/v1/pending").json()["pending"] if p["id"] == confirm_id)
    return datetime.datetime.fromisoformat(item["expires_at"])


def test_it_signs_in(page):
    page.goto("/login/")
    sign_in(page, USER, PASSWORD)


def test_it_extends_a_confirmation_from_the_inbox_and_refuses_past_24_hours(page, console, agent):
    call = pending_call(agent, "extend me")
    before = expiry_of(console, call["confirm_id"])
    page.set_viewport_size(DESKTOP)
    page.goto("/pending/")
    card = page.locator(f"#pending-{call['confirm_id']}")
    expect(card.get_by_text("(at most 24 hours after it was asked)")).to_be_visible()
    assert a11y.check(page, "pending (Extend, Approve selected) /pending/") == []
    shoot_into(page, SHOTS, "pending")
    card.get_by_role("button", name="Extend").click()
    expect(page.get_by_text("Extended: mcp__echo__echo until")).to_be_visible()
    assert expiry_of(console, call["confirm_id"]) > before
    # Made almost a day ago: one more extension would pass 24 hours.
    console.manage("shell", "-c", AGE % call["confirm_id"])
    page.goto(f"/pending/{call['confirm_id']}/")
    page.get_by_role("button", name="Extend").click()
    expect(page.get_by_text("Not extended: cannot extend past 24 hours.")).to_be_visible()
    console.reply(call["session_id"], call["confirm_id"], {"approve": False})


def test_it_edits_and_approves_on_the_confirmations_page_and_history_shows_both(page, console, agent):
    (console.home / "rules").write_text("deny mcp__echo__echo(text:rm *)\n")
    call = pending_call(agent, "as asked")
    page.goto(f"/pending/{call['confirm_id']}/")
    box = page.get_by_label("Arguments")
    expect(box).to_have_value(json.dumps({"text": "as asked"}, indent=2))
    page.get_by_text("The tool's input schema", exact=True).click()
    expect(page.locator("details.schema pre")).to_contain_text('"text"')
    assert a11y.check(page, "pending-detail (Edit and approve) /pending/<id>/") == []
    shoot_into(page, SHOTS, "edit")
    # The schema refuses a number; the form says so and keeps what was typed.
    box.fill('{"text": 5}')
    page.get_by_role("button", name="Edit and approve").click()
    expect(page.get_by_role("alert")).to_have_text(
        "arguments do not match the tool's schema: text: 5 is not of type 'string'"
    )
    expect(page.get_by_label("Arguments")).to_have_value('{"text": 5}')
    assert a11y.check(page, "pending-detail (Edit and approve, refused) /pending/<id>/") == []
    # A deny rule matches the change: refused too.
    page.get_by_label("Arguments").fill('{"text": "rm -rf /"}')
    page.get_by_role("button", name="Edit and approve").click()
    expect(page.get_by_role("alert")).to_have_text("Denied by rule: deny mcp__echo__echo(text:rm *)")
    page.get_by_label("Arguments").fill('{"text": "as changed"}')
    page.get_by_role("button", name="Edit and approve").click()
    expect(page.get_by_text("Approved with changed arguments: mcp__echo__echo.")).to_be_visible()
    done = agent.get(f"/v1/mcp/calls/{call['call_id']}", params={"wait": 20}).json()
    assert done["status"] == "done"
    assert done["result"] == f'Approved with changed arguments by {USER}: {{"text":"as changed"}}\nas changed'
    page.goto(f"/history/{call['call_id']}/")
    expect(page.get_by_role("heading", name="Arguments as run")).to_be_visible()
    expect(page.get_by_role("heading", name="Arguments as asked")).to_be_visible()
    expect(page.get_by_text('"as asked"')).to_be_visible()
    page.goto("/history/")
    row = page.locator(f"#call-{call['call_id']}")
    expect(row.get_by_text(f"Changed by {USER}")).to_be_visible()
    (console.home / "rules").write_text("")


def test_it_denies_the_selected_confirmations_with_one_reason(page, console, agent):
    first, second = pending_call(agent, "one"), pending_call(agent, "two")
    page.goto("/pending/")
    for call in (first, second):
        page.locator(f"#pending-{call['confirm_id']}").get_by_label("Select").check()
    page.get_by_label("Reason", exact=True).first.fill("not today")
    page.get_by_role("button", name="Deny selected").click()
    expect(page.get_by_text("Denied 2 of 2.")).to_be_visible()
    for call in (first, second):
        ended = agent.get(f"/v1/mcp/calls/{call['call_id']}").json()
        assert (ended["status"], ended["result"]) == ("skipped", "Skipped by user. Reason: not today")


def test_it_shows_50_identical_calls_as_one_row_and_approves_them_in_one_click(page, console, agent):
    made = [pending_call(agent, "same", session=f"batch-{i}") for i in range(50)]
    page.goto("/pending/")
    row = page.locator(f"#pending-{made[0]['confirm_id']}")
    expect(row.locator(".pill.count")).to_have_text("×50")
    expect(page.locator("article.pending")).to_have_count(1)
    assert a11y.check(page, "pending (a ×50 row) /pending/") == []
    shoot_into(page, SHOTS, "pending-x50")
    row.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved 50 of 50.")).to_be_visible()
    expect(page.get_by_text("Nothing is waiting for you.")).to_be_visible()

    def all_done():
        ended = [agent.get(f"/v1/mcp/calls/{c['call_id']}").json() for c in made]
        return all(e["status"] == "done" and e["result"] == "same" for e in ended)

    wait_until(all_done, 30, 0.2, what="the 50 calls run")
