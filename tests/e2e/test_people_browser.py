"""The People page in a real Chromium (SPEC 23.1, 23.3): a person added with a one-time link,
their password set from it, their role and groups changed, a group added, the person
deactivated; the viewer's own navigation and the 403 page. Every page on the way under axe-core
and the Tab walk, at 1280 and 390 px, with its headers.

Run on its own: `pytest -m e2e tests/e2e/test_people_browser.py`."""

import re

import pytest
from playwright.sync_api import Page, expect

from tests.e2e import a11y
from tests.e2e.browser import DESKTOP, console_with_user, nav, new_context, sign_in

pytestmark = pytest.mark.e2e

ADMIN, PASSWORD = "people-admin", "e2e-password-23"
NEW_PASSWORD = "a-long-passphrase-2301"
PROBLEMS: list[str] = []


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, None, ADMIN, PASSWORD)
    module_console.start(c)
    return c


def check(page: Page, label: str) -> None:
    PROBLEMS.extend(a11y.check(page, label))


def test_an_admin_adds_a_person_who_sets_a_password_and_is_then_changed_and_deactivated(
    page, console, browser
):
    page.goto("/login/")
    sign_in(page, ADMIN, PASSWORD)
    nav(page, "People").click()
    expect(page.get_by_role("heading", name="People", exact=True)).to_be_visible()
    check(page, "people")

    form = page.locator("#person-add")
    form.get_by_label("Username").fill("ann")
    form.get_by_label("Email").fill("ann@example.invalid")
    form.get_by_label("Role").select_option("approver")
    form.get_by_label("Groups").fill("ops")
    form.get_by_role("button", name="Add person").click()
    link = page.locator("#set-password-link").inner_text().strip()
    assert re.match(r"http://127\.0\.0\.1:\d+/set-password/\w+/[\w-]+/$", link), link
    check(page, "people, a link shown")

    them = new_context(browser, viewport=DESKTOP, base_url=console.url)
    theirs = them.new_page()
    theirs.goto(link)
    expect(theirs.get_by_role("heading", name="Set your password")).to_be_visible()
    check(theirs, "set-password")
    theirs.get_by_label("New password").fill(NEW_PASSWORD)
    theirs.get_by_label("The same again").fill(NEW_PASSWORD)
    theirs.get_by_role("button", name="Set password").click()
    expect(theirs.get_by_role("heading", name="Sign in")).to_be_visible()
    theirs.goto(link)
    expect(theirs.locator("#link-gone")).to_be_visible()  # used once
    check(theirs, "set-password, spent")

    page.get_by_label("Role of ann").select_option("viewer")
    page.get_by_role("button", name="Save ann").click()
    expect(page.get_by_text("Saved ann.")).to_be_visible()
    groups = page.locator("#group-add")
    groups.get_by_label("Name").fill("oncall")
    groups.get_by_label("Members").fill("ann")
    groups.get_by_role("button", name="Add group").click()
    expect(page.locator("#group-oncall")).to_be_visible()
    check(page, "people, with groups")
    oncall = page.locator("#group-oncall")
    oncall.get_by_label("Escalate to").select_option("ops")
    oncall.get_by_label("after").fill("10")
    oncall.get_by_role("button", name="Save group oncall").click()
    expect(page.get_by_text("Saved group oncall.")).to_be_visible()
    expect(page.locator("#group-oncall").get_by_label("Escalate to")).to_have_value("ops")
    page.get_by_role("button", name="Remove group ops").click()
    expect(page.get_by_text("group ops is escalated to from another group")).to_be_visible()
    check(page, "people, a group refused removal")
    page.get_by_role("button", name="Remove group oncall").click()
    expect(page.get_by_text("Removed group oncall.")).to_be_visible()
    expect(page.locator("#group-oncall")).to_have_count(0)

    theirs.goto("/login/")
    sign_in(theirs, "ann", NEW_PASSWORD)
    links = theirs.get_by_role("navigation", name="Main").get_by_role("link").all_inner_texts()
    assert [t.split()[0] for t in links] == ["Servers", "Pending", "History", "Rules", "Views", "Account"]
    theirs.goto("/people/")
    expect(theirs.locator("#forbidden")).to_have_text("Your role (viewer) may not manage people.")
    check(theirs, "forbidden")

    page.get_by_role("button", name="Deactivate ann").click()
    expect(page.get_by_text("Deactivated ann.")).to_be_visible()
    theirs.goto("/pending/")
    expect(theirs.get_by_role("heading", name="Sign in")).to_be_visible()
    them.close()
    assert not PROBLEMS, "\n".join(PROBLEMS)
