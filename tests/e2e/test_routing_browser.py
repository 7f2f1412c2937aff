"""Approvals routed to a group, and two people for one call (SPEC 24.1, 24.2), in a real
Chromium: a person outside the group sees `For ops` and no buttons; two members, each in their
own browser context, approve in turn (`1 of 2 approvals: <who>` between), and the agent's call
then runs. The Pending page, a confirmation's page and the Notifications page (24.7's groups)
under axe-core and the Tab walk at 1280 and 390 px.

Run on its own: `pytest -m e2e tests/e2e/test_routing_browser.py`."""

import pytest
from playwright.sync_api import expect

from tests.e2e import a11y
from tests.e2e.browser import DESKTOP, answer, call_in_background, console_with_user, new_context, sign_in
from tests.live import our_server, wait_until

pytestmark = pytest.mark.e2e

ADMIN, PASSWORD = "route-admin", "e2e-password-24"
PROBLEMS: list[str] = []


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, {"echo": our_server("echo.py")}, ADMIN, PASSWORD)
    for user in ("ann", "cat", "bob"):
        c.manage(
            "shell",
            "-c",
            f"from django.contrib.auth.models import User; User.objects.create_user({user!r}, password={PASSWORD!r})",
        )
    for user, group in (("ann", "ops"), ("cat", "ops"), ("bob", "dev")):
        c.manage("set_role", user, "approver", "--groups", group)
    (c.home / "rules").write_text("ask[ops:2] mcp__echo__echo\n")
    module_console.start(c)
    c.wait_connected("echo")
    return c


def person(browser, console, user: str):
    context = new_context(browser, viewport=DESKTOP, base_url=console.url)
    page = context.new_page()
    page.goto("/login/")
    sign_in(page, user, PASSWORD)
    return context, page


def test_a_call_for_ops_is_decided_by_two_of_its_members_and_not_by_another(page, console, browser):
    held = call_in_background(console, "mcp__echo__echo", {"text": "routed"})
    item = wait_until(
        lambda: (console.get("/v1/pending").json()["pending"] or [None])[0], 30, what="the item"
    )
    assert (item["for"], item["approvals"]) == ("ops", [])
    card = f"#pending-{item['id']}"

    bob_context, bob = person(browser, console, "bob")
    bob.goto("/pending/")
    expect(bob.locator(card)).to_contain_text("For ops")
    expect(bob.locator(card).get_by_role("button", name="Approve")).to_have_count(0)
    PROBLEMS.extend(a11y.check(bob, "pending, another group's item"))

    ann_context, ann = person(browser, console, "ann")
    ann.goto(f"/pending/{item['id']}/")
    expect(ann.locator(card)).to_contain_text("0 of 2 approvals")
    expect(ann.get_by_role("button", name="Approve and remember")).to_have_count(0)
    PROBLEMS.extend(a11y.check(ann, "pending detail, two approvals needed"))
    ann.locator(card).get_by_role("button", name="Approve", exact=True).click()
    expect(ann.locator(card)).to_contain_text("1 of 2 approvals: ann")

    cat_context, cat = person(browser, console, "cat")
    cat.goto("/pending/")
    expect(cat.locator(card)).to_contain_text("1 of 2 approvals: ann")
    PROBLEMS.extend(a11y.check(cat, "pending, one approval of two"))
    cat.locator(card).get_by_role("button", name="Approve", exact=True).click()
    expect(cat.locator(card)).to_have_count(0)
    done = answer(held)
    assert done["status"] == 200 and done["body"]["result"] == "routed", done
    record = console.get(f"/v1/mcp/calls/{item['call_id']}").json()
    assert record["decided_by"] == "ann, cat"
    for context in (bob_context, ann_context, cat_context):
        context.close()

    page.goto("/login/")
    sign_in(page, ADMIN, PASSWORD)
    page.goto("/notifications/")
    page.get_by_label("URL").fill("https://ops.example.invalid/hook")
    page.get_by_label("ops").check()
    page.get_by_role("button", name="Add target").click()
    expect(page.locator(".target-for").first).to_have_text("For ops")
    PROBLEMS.extend(a11y.check(page, "notifications, a target for a group"))
    assert not PROBLEMS, "\n".join(PROBLEMS)
