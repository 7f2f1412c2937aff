"""The first five minutes, in a real Chromium against a real `manage.py serve` (issue 24): a
fresh data folder with no server and no token, sign in, add the example server (PyPI
`mcp-server-time`, from the console's own environment) with one click, connect an agent, see its
untrusted call wait on the Pending page, approve it, see the call end. Then the keyboard alone
approves, and every page of mcpcore/web/urls.py, empty and filled, passes axe-core with no serious
or critical violation at 1280 and 390 px, and takes the Tab key to each of its controls.

Run on its own: `pytest -m e2e tests/e2e/test_first_run_browser.py`. The per-page results are
printed at the end of the run; screenshots go to artifacts/first-run/.
"""

import json
import re
import sqlite3

import pytest
from playwright.sync_api import Page, expect

import mcpcore.web.urls
from tests.e2e import a11y
from tests.e2e.browser import answer, call_in_background, console_with_user, shoot_into, sign_in
from tests.live import ROOT, wait_until

pytestmark = pytest.mark.e2e

SHOTS = ROOT / "artifacts" / "first-run"
USER, PASSWORD = "operator", "e2e-password-1"
NOW = "mcp__time__get_current_time"
CONVERT = "mcp__time__convert_time"

# What each URL name of mcpcore/web/urls.py was checked as: the pages by the state they were seen
# in (PAGES_SEEN, filled in as the tests go), the actions by the page their answer lands on.
ACTIONS = {
    "server-example": "servers (redirect)",
    "server-reconnect-all": "servers (redirect)",
    "server-reconnect": "server-detail (redirect)",
    "server-enable": "server-detail (redirect)",
    "server-disable": "server-detail (redirect)",
    "server-remove": "servers (redirect)",
    "server-trust": "server-detail (htmx fragment inside it)",
    "tool-try": "call-result fragment inside server-detail",
    "pending-reply": "pending (htmx fragment inside it)",
    "allowance-revoke": "pending (htmx fragment inside it)",
    "token-revoke": "tokens (htmx fragment inside it)",
    "grant-revoke": "tokens (htmx fragment inside it)",
    "notification-test": "notifications (redirect)",
    "notification-remove": "notifications (redirect)",
    "view-remove": "views (redirect)",
    "server-authorize": "the authorization server (htmx HX-Redirect); tests/e2e/test_oauth_browser.py",
    "server-forget": "server-detail (htmx HX-Redirect); tests/e2e/test_oauth_browser.py",
    "oauth-callback": "server-detail (redirect), or its failure page: tests/e2e/test_oauth_browser.py",
    "pending-feed": "JSON for the page's script, not a page",
    "account": "its own module, with the sign-in pages: tests/e2e/test_signin_browser.py",
    "session-sign-out": "account (redirect): tests/e2e/test_signin_browser.py",
    "app-allow": "the Allow an app page, in its own module with the OAuth flow: tests/e2e/test_apps_browser.py",
    "app-revoke": "tokens (after the revoke): tests/e2e/test_apps_browser.py",
    "pending-answer": "pending (htmx fragment inside it): tests/e2e/test_questions_browser.py",
    "pending-extend": "pending (htmx fragment inside it): tests/e2e/test_approval_changes_browser.py",
    "pending-edit": "pending-detail (its form): tests/e2e/test_approval_changes_browser.py",
    "pending-decide": "pending (htmx fragment inside it): tests/e2e/test_approval_changes_browser.py",
    "people": "its own module, with its forms: tests/e2e/test_people_browser.py",
    "person-add": "people (a link shown once): tests/e2e/test_people_browser.py",
    "person-edit": "people (redirect): tests/e2e/test_people_browser.py",
    "person-active": "people (redirect): tests/e2e/test_people_browser.py",
    "group-add": "people (redirect): tests/e2e/test_people_browser.py",
    "group-edit": "people (redirect): tests/e2e/test_people_browser.py",
    "group-remove": "people (redirect): tests/e2e/test_people_browser.py",
}
PAGES_SEEN: dict[str, list[str]] = {}
PROBLEMS: list[str] = []


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, None, USER, PASSWORD)
    # As after `make run`: nobody has made a token yet (tests/live.py makes two for its helpers).
    db = sqlite3.connect(c.data / "db.sqlite3")
    with db:
        db.execute("delete from mcpcore_apitoken")
    db.close()
    module_console.start(c)
    return c


@pytest.fixture(scope="module")
def agent(console):
    """The agent's token, made in the browser on the way (test 1), as a box."""
    return {}


def seen(page: Page, name: str, state: str) -> None:
    """Check the page as it is (axe-core at both widths, the Tab walk) under its URL name."""
    here = page.evaluate("location.pathname")
    PAGES_SEEN.setdefault(name, []).append(state)
    PROBLEMS.extend(a11y.check(page, f"{name} ({state}) {here}"))


def shoot(page: Page, name: str) -> None:
    shoot_into(page, SHOTS, name)


def nav(page: Page, name: str):
    return page.get_by_role("navigation", name="Main").get_by_role("link", name=name)


def submit(page: Page, button: str, fields: dict[str, str]) -> None:
    """Fill each labelled field, then press the button."""
    for label, value in fields.items():
        page.get_by_label(label).fill(value)
    page.get_by_role("button", name=button).click()


def pending_link(page: Page):
    return page.get_by_role("navigation", name="Main").locator('a[href="/pending/"]')


# --- the scenarios, in order --------------------------------------------------------------------


def test_it_walks_the_first_run_path_from_a_fresh_data_folder(page, console, agent):
    page.goto("/")
    expect(page).to_have_url(f"{console.url}/login/?next=/")
    seen(page, "login", "signed out")
    shoot(page, "1-sign-in")
    sign_in(page, USER, PASSWORD)

    # The Pending link is named by its text: nothing waits, so no count.
    expect(pending_link(page)).to_have_accessible_name("Pending")
    first = page.locator("#first-run")
    expect(first.get_by_role("heading", name="Start with an example")).to_be_visible()
    expect(page.locator("#connect-agent").get_by_role("listitem")).to_have_count(3)
    seen(page, "servers", "empty")
    shoot(page, "2-servers-empty")
    page.goto("/pending/")
    expect(page.get_by_text("Nothing is waiting for you.")).to_be_visible()
    seen(page, "pending", "empty")
    page.goto("/history/")
    seen(page, "history", "empty")
    page.goto("/tokens/")
    expect(page.get_by_text("No tokens yet.")).to_be_visible()
    seen(page, "tokens", "none")
    page.goto("/")

    first.get_by_role("button", name="Add an example server").click()
    expect(page.get_by_text("Added the example server time.")).to_be_visible()
    row = page.locator("#server-time")
    expect(row).to_have_attribute("data-state", "connected", timeout=60_000)
    expect(row.locator("td.tools")).to_have_text("2")
    guide = page.locator("#first-run")
    expect(guide.get_by_role("heading", name="Try the example")).to_be_visible()
    expect(guide.get_by_role("listitem")).to_have_count(5)
    # The last step says how the servers' prompts and resources appear in Claude Code.
    expect(guide.get_by_role("listitem").last).to_contain_text("/mcp__agenvoy__<server>__<prompt>")
    expect(page.get_by_role("button", name="Add an example server")).to_have_count(0)
    seen(page, "servers", "the example server")
    shoot(page, "3-servers-example")

    # Connect an agent: step 1 makes the token, step 2's snippets come with it.
    panel = page.locator("#connect-agent")
    panel.get_by_label("Token name").fill("my-agent")
    panel.get_by_role("button", name="Create token").click()
    expect(page.get_by_role("heading", name="Token “my-agent” created")).to_be_visible()
    token = page.locator("#new-token").inner_text().strip()
    assert token.startswith("agv_")
    expect(page.locator("#config-claude")).to_contain_text("claude mcp add --transport http agenvoy")
    expect(page.locator("#config-mcp-servers")).to_contain_text(f"Bearer {token}")
    agent["token"] = token
    seen(page, "token-create", "a new token and its snippets")
    shoot(page, "4-token-made")

    # The server page: nothing trusted, so the agent's call waits for a person.
    page.goto("/")
    expect(page.locator("#connect-agent")).to_have_count(0)  # a token exists now
    page.locator("#first-run").get_by_role("link", name="time", exact=True).click()
    expect(page.get_by_role("heading", name="time", exact=True)).to_be_visible()
    expect(page.locator("article.tool h3")).to_have_text(["get_current_time", "convert_time"])
    seen(page, "server-detail", "the example, nothing trusted")
    shoot(page, "5-server-time")

    box = call_in_background(console, NOW, {"timezone": "UTC"}, token, session_id="first-run")
    nav(page, "Pending").click()
    item = page.locator("article.pending", has=page.get_by_text(NOW))
    expect(item).to_be_visible()
    expect(pending_link(page)).to_have_accessible_name("Pending 1")
    seen(page, "pending", "one call waiting")
    shoot(page, "6-pending")
    item.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_text(f"Approved: {NOW}.")).to_be_visible()
    done = answer(box)
    assert done["status"] == 200 and done["body"]["status"] == "done", done
    assert json.loads(done["body"]["result"])["timezone"] == "UTC", done
    expect(item).to_have_count(0)
    expect(pending_link(page)).to_have_accessible_name("Pending")

    nav(page, "History").click()
    call_row = page.locator("table.calls tbody tr").first
    expect(call_row).to_contain_text("get_current_time")
    expect(call_row).to_contain_text("done")
    seen(page, "history", "one call")
    shoot(page, "7-history")
    call_row.get_by_role("link", name="get_current_time").click()
    expect(page.locator(".call-result")).to_contain_text("UTC")
    seen(page, "call-detail", "a call that ended")
    shoot(page, "8-call")


def test_it_approves_from_the_pending_page_with_the_keyboard_alone(page, console, agent):
    box = call_in_background(console, CONVERT, convert_args(), agent["token"], session_id="kb-1")
    page.goto("/pending/")
    item = page.locator("article.pending", has=page.get_by_text(CONVERT))
    expect(item).to_be_visible()
    approve = item.get_by_role("button", name="Approve", exact=True)
    tab_to(page, approve)
    assert outline_of(page) != "none", "the focused Approve button shows no focus ring"
    page.keyboard.press("Enter")
    expect(page.get_by_text(f"Approved: {CONVERT}.")).to_be_visible()
    done = answer(box)
    assert done["body"]["status"] == "done", done

    # Space on "Approve for session" (and the session allowance it makes is shown).
    box = call_in_background(console, CONVERT, convert_args(), agent["token"], session_id="kb-2")
    page.goto("/pending/")
    item = page.locator("article.pending", has=page.get_by_text(CONVERT))
    expect(item).to_be_visible()
    tab_to(page, item.get_by_role("button", name="Approve for session"))
    page.keyboard.press("Space")
    expect(page.get_by_text("Approved for session kb-2")).to_be_visible()
    assert answer(box)["body"]["status"] == "done"
    expect(page.locator("table.allowances")).to_contain_text("kb-2")

    # A denial with a reason typed in, then Enter from the Reason field.
    box = call_in_background(console, CONVERT, convert_args(), agent["token"], session_id="kb-3")
    page.goto("/pending/")
    item = page.locator("article.pending", has=page.get_by_text(CONVERT))
    expect(item).to_be_visible()
    tab_to(page, item.get_by_label("Reason"))
    page.keyboard.type("not now")
    page.keyboard.press("Enter")
    done = answer(box)
    assert done["body"]["status"] == "skipped" and "not now" in done["body"]["result"], done


def test_it_keeps_every_reason_field_when_a_push_replaces_the_list_during_its_refresh(page, console, agent):
    # The list's own refresh is held in flight while a live push (a new call) comes. The push
    # used to replace the list at once, so the refresh's answer landed on the old, detached
    # list, and htmx's swap there took the page's kept fields (hx-preserve) out of the page: a
    # cold CI run found a Reason label with no field. The push now waits for the refresh
    # (static/mcpcore/console.js), and every item keeps its field.
    # Two different calls: identical ones of one token are one row (SPEC 24.6).
    first = call_in_background(console, CONVERT, convert_args(), agent["token"], session_id="push-1")
    page.goto("/pending/")
    expect(page.locator("article.pending", has=page.get_by_text("push-1"))).to_be_visible()
    held: list = []

    def hold_refresh(route) -> None:
        if route.request.headers.get("hx-request"):
            held.append(route)
        else:
            route.continue_()

    # The live socket is open (pushes come) and the list has no request in flight.
    wait_until(lambda: page.evaluate("() => window.agvLive === true"), 10, what="the live socket open")
    expect(page.locator("#pending-list.htmx-request")).to_have_count(0)
    page.route("**/pending/", hold_refresh)
    with page.expect_request(lambda r: r.url.endswith("/pending/") and bool(r.headers.get("hx-request"))):
        page.evaluate("() => { htmx.trigger(document.body, 'agv-resync'); }")
    expect(page.locator("#pending-list.htmx-request")).to_have_count(1)
    second = call_in_background(console, CONVERT, convert_args("13:00"), agent["token"], session_id="push-2")
    expect(page.locator("#pending-badge")).to_have_text("2")  # the push came (the badge beside the list)
    assert len(held) == 1, "the list's refresh was not held"
    with page.expect_response(lambda r: r.request == held[0].request):
        held[0].continue_()
    page.unroute("**/pending/")
    for box, session in ((first, "push-1"), (second, "push-2")):
        item = page.locator("article.pending", has=page.get_by_text(session))
        expect(item.get_by_label("Reason")).to_be_visible()
        item.get_by_label("Reason").fill("cleaning up")
        item.get_by_role("button", name="Deny").click()
        assert answer(box)["body"]["status"] == "skipped"


def convert_args(time: str = "12:00") -> dict:
    return {"source_timezone": "UTC", "time": time, "target_timezone": "Europe/Paris"}


def tab_to(page: Page, target, limit: int = 80) -> None:
    """Press Tab until `target` has the focus (no clicks), from the top of the page."""
    handle = target.element_handle()
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(el) => document.activeElement === el", handle):
            return
    raise AssertionError(f"Tab never reached {target}")


def outline_of(page: Page) -> str:
    return page.evaluate("getComputedStyle(document.activeElement).outlineStyle")


def test_it_passes_axe_and_the_tab_walk_on_every_other_page(page, console, agent):
    # Pending, with an item (and a session allowance), and an item's own page, pending and ended.
    box = call_in_background(console, NOW, {"timezone": "Asia/Tokyo"}, agent["token"], session_id="walk")
    page.goto("/pending/")
    item = page.locator("article.pending", has=page.get_by_text(NOW))
    expect(item).to_be_visible()
    seen(page, "pending", "a call waiting and a session allowance")
    item.get_by_role("link", name="get_current_time").click()
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    seen(page, "pending-detail", "waiting")
    shoot(page, "9-pending-detail")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("p.ending")).to_contain_text("Approved by operator")
    assert answer(box)["body"]["status"] == "done"
    seen(page, "pending-detail", "ended")

    # The server page with a tool trusted and a try-it form open; the forms.
    page.goto("/servers/time/")
    trust = page.locator("#trust-editor")
    trust.get_by_label("get_current_time").check()
    trust.get_by_role("button", name="Save").click()
    expect(trust.get_by_role("status")).to_contain_text("Saved")
    seen(page, "server-detail", "a tool trusted")
    page.goto("/servers/time/try-form/?tool=convert_time")
    expect(page.locator("details.try[open]")).to_have_count(1)
    seen(page, "tool-try-form", "the try-it form open (without JavaScript's fetch)")
    page.goto("/servers/time/edit/")
    seen(page, "server-edit", "the example")
    page.goto("/add-server/")
    seen(page, "server-add", "blank")
    page.get_by_label("Name").fill("two__parts")
    page.get_by_label("Command").fill("npx")
    page.get_by_role("button", name=re.compile("^(Add|Save)")).first.click()
    expect(page.locator(".error").first).to_be_visible()
    seen(page, "server-add", "refused: errors shown")
    page.goto("/import-servers/")
    seen(page, "server-import", "blank")
    broken = '{"mcpServers": {"broken": {"command": "/nonexistent/agenvoy-no-such-server"}}}'
    page.locator("textarea").first.fill(broken)
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("table.import-preview")).to_contain_text("broken")
    seen(page, "server-import", "a preview")
    page.get_by_role("button", name="Import 1 server").click()
    expect(page.get_by_text("Imported 1 server.")).to_be_visible()

    # Tokens, rules, views, notifications: empty and filled.
    page.goto("/tokens/")
    seen(page, "tokens", "one token")
    page.goto("/rules/")
    seen(page, "rules", "none")
    page.get_by_label("Rules").fill("deny mcp__time__convert_time(target_timezone:Mars/*)\nnot a rule")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#rules-error")).to_be_visible()
    seen(page, "rules", "refused: a bad line")
    page.get_by_label("Rules").fill("deny mcp__time__convert_time(target_timezone:Mars/*)")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#rules-table")).to_be_visible()
    seen(page, "rules", "one rule")
    page.goto("/views/")
    seen(page, "views", "none")
    submit(page, "Save view", {"Name": "bad__name", "Include": "mcp__time__*"})
    expect(page.locator("#view-error")).to_contain_text("invalid view name")
    seen(page, "views", "refused: a bad name")
    view = {"Name": "clock", "Description": "Only the clock.", "Include": "mcp__time__*"}
    submit(page, "Save view", {**view, "Exclude": "mcp__time__convert_time"})
    expect(page.locator("#view-clock-tools")).to_contain_text("mcp__time__get_current_time")
    expect(page.locator("#view-clock-tools")).not_to_contain_text("convert_time")
    seen(page, "views", "one view and its tools")
    page.get_by_role("link", name="Edit view clock").click()
    expect(page.get_by_label("Include")).to_have_value("mcp__time__*")
    seen(page, "views", "editing a view")
    page.goto("/tokens/")
    page.get_by_label("Name").fill("clock-agent")
    page.get_by_label("Views").select_option("clock")
    page.get_by_role("button", name="Create token").first.click()
    expect(page.locator("#config-claude")).to_contain_text("/mcp/v/clock")
    seen(page, "tokens", "a token limited to a view, its snippets")
    page.goto("/notifications/")
    seen(page, "notifications", "none")
    page.get_by_label("URL").fill("https://ntfy.invalid/agenvoy-first-run")
    page.get_by_label("Kind").select_option("ntfy")
    page.get_by_role("button", name="Add target").click()
    expect(page.get_by_role("heading", name="Added ntfy target")).to_be_visible()
    seen(page, "notifications", "a target just added")

    # The audit trail of everything above, then filtered to one action.
    page.goto("/audit/")
    expect(page.locator("#audit-table")).to_contain_text("notify.add")
    seen(page, "audit", "the changes of this run")
    page.get_by_label("Action").select_option("view.add")
    expect(page.locator("#audit-table tbody tr")).to_have_count(1)
    expect(page.locator("#audit-table")).to_contain_text("clock")
    seen(page, "audit", "filtered by action")

    # History filtered, and a call's page once more (a call that waited, then ran).
    page.goto("/history/?server=time")
    seen(page, "history", "filtered")

    # The Servers page at the end: the example and a server that can't start.
    page.goto("/")
    expect(page.locator("#server-broken")).to_have_attribute("data-state", "error")
    seen(page, "servers", "two servers, one in error")
    shoot(page, "10-servers-more")

    names = {p.name for p in mcpcore.web.urls.urlpatterns}
    missing = names - set(PAGES_SEEN) - set(ACTIONS)
    assert not missing, f"pages of mcpcore/web/urls.py nobody checked: {sorted(missing)}"
    assert not set(ACTIONS) - names, "ACTIONS names a page that no longer exists"
    assert not PROBLEMS, "\n".join(PROBLEMS)


def test_it_found_no_serious_problem_on_the_first_run_pages():
    """The first two tests' pages are checked here too, so a problem there fails the suite even
    when the walk above stopped early."""
    assert PAGES_SEEN, "no page was checked"
    assert not PROBLEMS, "\n".join(PROBLEMS)


BROKEN = """<!doctype html><html lang="en"><head><title>broken on purpose</title>
<style>:focus { outline: none; }</style></head><body><main><h1>Broken on purpose</h1>
<img src="data:,"><button></button><a href="#top">a link</a><button tabindex="-1">skipped</button>
<div style="width: 900px">too wide for a phone</div></main></body></html>"""


def test_it_fails_a_page_that_breaks_the_checks(page):
    """The checks above can fail: a page with an image without text, a button without a name,
    a control Tab skips, no focus ring and a phone-wide overflow is caught on each count. (A
    page of its own: content written into a console page would be under the console's CSP.)"""
    page = page.context.new_page()
    page.set_content(BROKEN)
    found = a11y.axe(page, "self-check (a page broken on purpose)")
    assert any("critical image-alt" in p for p in found), found
    assert any("critical button-name" in p for p in found), found
    assert any("scrolls sideways" in p for p in found), found
    walk = a11y.tab_walk(page, "self-check (a page broken on purpose)")
    assert any("Tab never reaches 'button skipped'" in p for p in walk), walk
    assert any("no visible focus on 'a a link'" in p for p in walk), walk


def test_it_kept_the_console_log_free_of_tracebacks(console):
    assert console.proc.poll() is None
    assert not console.tracebacks(), "\n\n".join(console.tracebacks())[:4000]
