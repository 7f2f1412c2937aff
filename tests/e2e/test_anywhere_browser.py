"""Approve from anywhere (issue 14) in a real Chromium against a real `manage.py serve`: the
Notifications page, a browser notification for a new confirmation while the page is in the
background, every page at phone width, and going back after an htmx swap. Run on its own:
`pytest -m e2e tests/e2e/test_anywhere_browser.py`.

Screenshots of every page at 390 and 1280 px go to artifacts/anywhere/ (not committed).
"""

import json

import pytest
from playwright.sync_api import Page, expect

from tests.e2e.browser import (
    DESKTOP,
    PHONE,
    TIMEOUT,
    console_with_user,
    nav,
    new_context,
    shoot_into,
    sign_in,
)
from tests.live import ROOT, Console, our_server, wait_until
from tests.webhooks import Receiver, verify

pytestmark = pytest.mark.e2e

SHOTS = ROOT / "artifacts" / "anywhere"
USER, PASSWORD = "oncall", "e2e-password-2"

# Replaces the Notification constructor with one that records what it was asked to show (the
# permission stays the browser context's); and lets a test put the page "in the background".
RECORD_NOTIFICATIONS = """
(() => {
  const Real = window.Notification;
  if (!Real) return;
  window.__notes = [];
  function Recording(title, options) {
    const note = { title, options: options || {}, onclick: null, closed: false, close() { this.closed = true; } };
    window.__notes.push(note);
    return note;
  }
  Object.defineProperty(Recording, "permission", { get: () => Real.permission });
  Recording.requestPermission = (...args) => Real.requestPermission(...args);
  window.Notification = Recording;
  window.__hidden = false;
  Object.defineProperty(Document.prototype, "hidden", { configurable: true, get: () => window.__hidden });
  Object.defineProperty(Document.prototype, "visibilityState", {
    configurable: true, get: () => (window.__hidden ? "hidden" : "visible"),
  });
})();
"""


@pytest.fixture(scope="module")
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(
        module_console,
        {"echo": our_server("echo.py")},
        USER,
        PASSWORD,
        {"AGENVOY_PUBLIC_URL": "https://approve.example"},
    )
    module_console.start(c)
    c.wait_connected("echo")
    return c


@pytest.fixture(scope="module")
def page(console, browser):
    context = new_context(browser, viewport=DESKTOP, base_url=console.url)
    context.grant_permissions(["notifications"], origin=console.url)
    context.add_init_script(RECORD_NOTIFICATIONS)
    p = context.new_page()
    yield p
    context.close()


def shoot(page: Page, name: str) -> None:
    shoot_into(page, SHOTS, name)


def pending_call(console: Console, text: str) -> dict:
    r = console.call("mcp__echo__echo", {"text": text}, wait=0)
    assert r.status_code == 202, r.text
    return r.json()


def scroll_width(page: Page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


# --- the scenarios, in order --------------------------------------------------------------------


def test_it_signs_in(page, console):
    page.goto("/login/")
    sign_in(page, USER, PASSWORD)
    expect(nav(page, "Notifications")).to_be_visible()
    expect(page.get_by_role("button", name="Notify me")).to_be_visible()


def test_it_adds_a_webhook_shows_its_secret_once_and_sends_a_test(page, console, receiver):
    nav(page, "Notifications").click()
    expect(page.get_by_role("heading", name="Notifications")).to_be_visible()
    shoot(page, "notifications-empty")
    page.get_by_label("Kind").select_option("webhook")
    page.get_by_label("URL").fill(receiver.url)
    page.get_by_role("button", name="Add target").click()
    secret = page.locator("#new-secret").inner_text().strip()
    assert secret.startswith("whsec_")
    shoot(page, "notifications-secret")
    target = page.locator("section.target", has_text=receiver.url)
    target.get_by_role("button", name="Send a test").click()
    expect(page.get_by_text("Test queued")).to_be_visible()
    assert secret not in page.content()
    row = page.locator("section.target", has_text=receiver.url).locator("tr[data-status]").first
    expect(row).to_have_attribute("data-status", "sent", timeout=TIMEOUT)
    expect(row).to_contain_text("200")
    got = wait_until(lambda: [r for r in receiver.requests if json.loads(r["body"])["type"] == "test"], 10)[0]
    assert verify(secret, got["headers"], got["body"])


def test_it_adds_and_removes_an_ntfy_target(page, console):
    page.get_by_label("Kind").select_option("ntfy")
    page.get_by_label("URL").fill("https://ntfy.example/agenvoy-oncall")
    page.get_by_role("button", name="Add target").click()
    expect(page.locator("section.target", has_text="ntfy.example")).to_be_visible()
    expect(page.locator("#new-secret")).to_have_count(0)
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("section.target", has_text="ntfy.example").get_by_role("button", name="Remove").click()
    expect(page.get_by_text("Removed ntfy target https://ntfy.example/agenvoy-oncall")).to_be_visible()
    expect(page.locator("section.target", has_text="ntfy.example")).to_have_count(0)


def test_it_raises_a_browser_notification_for_a_new_confirmation_in_the_background(page, console, receiver):
    nav(page, "Servers").click()
    page.get_by_role("button", name="Notify me").click()
    expect(page.get_by_role("button", name="Notifications on")).to_be_visible()
    page.wait_for_function("() => window.agvNotifySeen !== null && window.agvLive === true")
    # In front: a new confirmation is seen on the page, no notification.
    seen = pending_call(console, "while in front")
    page.wait_for_function(f"() => !!window.agvNotifySeen[{json.dumps(seen['confirm_id'])}]")
    assert page.evaluate("window.__notes.length") == 0
    # In the background: a system notification, and clicking it opens the confirmation.
    page.evaluate("window.__hidden = true")
    body = pending_call(console, "while away")
    page.wait_for_function("() => window.__notes.length === 1", timeout=TIMEOUT)
    note = page.evaluate("({title: window.__notes[0].title, options: window.__notes[0].options})")
    assert note["title"] == "Approval needed: echo"
    assert note["options"]["body"] == "echo on echo is waiting for approval"
    assert note["options"]["tag"] == f"agv-{body['confirm_id']}"
    page.evaluate("window.__hidden = false; window.__notes[0].onclick()")
    page.wait_for_url(f"**/pending/{body['confirm_id']}/")
    expect(page.get_by_role("heading", name="echo on echo")).to_be_visible()
    expect(page.locator("article.pending")).to_contain_text("while away")
    shoot(page, "pending-detail")
    # The webhook heard of it too, linking the same page at the public address.
    hook = wait_until(
        lambda: [
            json.loads(r["body"])
            for r in receiver.requests
            if json.loads(r["body"])["type"] == "confirmation.pending"
            and json.loads(r["body"])["data"]["id"] == body["confirm_id"]
        ],
        15,
    )[0]
    assert hook["data"]["url"] == f"https://approve.example/pending/{body['confirm_id']}/"
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_text(f"Approved by {USER} at")).to_be_visible()
    answer = console.get(f"/v1/mcp/calls/{body['call_id']}", wait=10).json()
    assert answer["status"] == "done" and answer["decided_by"] == USER
    shoot(page, "pending-detail-ended")


def test_it_updates_a_confirmation_page_when_someone_else_decides(page, console):
    body = pending_call(console, "decided elsewhere")
    page.goto(f"/pending/{body['confirm_id']}/")
    page.wait_for_function("() => window.agvLive === true")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    r = console.reply(body["session_id"], body["confirm_id"], {"approve": False, "reason": "by the API"})
    assert r.status_code == 200
    # The ending says who decided and why; the page now shows the agent's result too.
    expect(page.locator("p.ending")).to_contain_text("Reason: by the API")
    expect(page.locator("pre.result")).to_have_text("Skipped by user. Reason: by the API")
    expect(page.get_by_role("button", name="Approve", exact=True)).to_have_count(0)


def _main_pages(console: Console) -> dict[str, str]:
    done = console.call(
        "mcp__echo__echo",
        {"text": "a long argument " * 20 + "https://example.com/a/very/long/path/without/any/breaks/at/all"},
        mode="auto",
    ).json()
    assert done["status"] == "done"
    waiting = pending_call(console, "for the phone " * 8)
    return {
        "servers": "/",
        "server-detail": "/servers/echo/",
        "server-add": "/add-server/",
        "server-import": "/import-servers/",
        "pending": "/pending/",
        "pending-one": f"/pending/{waiting['confirm_id']}/",
        "history": "/history/",
        "call-detail": f"/history/{done['call_id']}/",
        "tokens": "/tokens/",
        "notifications": "/notifications/",
    }


def test_it_fits_every_page_in_390_px_with_44_px_inbox_buttons(page, console, browser):
    pages = _main_pages(console)
    for name, url in pages.items():
        page.set_viewport_size(PHONE)
        page.goto(url)
        page.wait_for_load_state("networkidle")
        assert scroll_width(page) <= 390, (name, scroll_width(page))
        if name.startswith("pending"):
            buttons = page.locator("article.pending .reply button")
            assert buttons.count() >= 4, name
            for i in range(buttons.count()):
                box = buttons.nth(i).bounding_box()
                assert box["height"] >= 44, (name, buttons.nth(i).inner_text(), box)
                assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (name, box)
        shoot(page, name)
        page.set_viewport_size(DESKTOP)
        assert scroll_width(page) <= 1280, (name, scroll_width(page))
    # Signed out: the sign-in page.
    context = new_context(browser, viewport=PHONE, base_url=console.url)
    other = context.new_page()
    other.goto("/login/")
    assert scroll_width(other) <= 390
    shoot(other, "login")
    context.close()


def test_it_stacks_the_servers_table_into_rows_on_a_phone(page, console):
    page.set_viewport_size(PHONE)
    page.goto("/")
    page.wait_for_function("() => window.agvLive === true")
    page.wait_for_load_state("networkidle")
    row = page.locator("#server-echo")
    expect(row).to_be_visible()
    box = row.bounding_box()
    assert box["width"] <= 390
    assert row.locator("td.name").bounding_box()["y"] < row.locator("td.row-actions").bounding_box()["y"]
    expect(row.get_by_role("button", name="Reconnect")).to_be_in_viewport()
    actions = row.locator("td.row-actions button")
    tops = [actions.nth(i).bounding_box()["y"] for i in range(actions.count())]
    assert max(tops) - min(tops) < 2  # the row's buttons side by side
    page.set_viewport_size(DESKTOP)
    page.goto("/")
    page.wait_for_load_state("networkidle")
    cells = [page.locator("#server-echo td").nth(i).bounding_box()["y"] for i in range(7)]
    assert max(cells) - min(cells) < 2  # one row at 1280 px, as before


def test_it_shows_the_whole_page_when_going_back_after_an_htmx_swap(page, console):
    page.goto("/history/")
    # No cached copies: going back must ask the server (HX-History-Restore-Request).
    page.evaluate("htmx.config.historyCacheSize = 0; sessionStorage.removeItem('htmx-history-cache')")
    restores = []
    page.on(
        "request",
        lambda r: restores.append(r.url) if r.headers.get("hx-history-restore-request") == "true" else None,
    )
    page.get_by_label("Status").select_option("done")
    page.wait_for_url("**/history/?*status=done*")
    expect(page.locator("#call-table")).to_be_visible()
    page.get_by_label("Status").select_option("pending")
    page.wait_for_url("**/history/?*status=pending*")
    page.go_back()
    page.wait_for_url("**/history/?*status=done*")
    page.wait_for_function(
        "() => document.querySelectorAll('#call-table').length === 1 && !!document.querySelector('nav')"
    )
    expect(nav(page, "History")).to_be_visible()
    expect(page.get_by_role("heading", name="History")).to_be_visible()
    expect(page.get_by_label("Status")).to_be_visible()
    assert page.locator("header.topbar").count() == 1 and page.locator("main").count() == 1
    assert restores, "going back did not ask the server for the page"


def test_it_shows_the_empty_servers_page_on_a_phone_with_its_links_in_reach(page, console):
    # Last: the server goes. The first sighting was this page cut off at 390 px.
    page.set_viewport_size(DESKTOP)
    page.goto("/servers/echo/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Remove server").click()
    expect(page.get_by_text("Removed echo.")).to_be_visible()
    page.set_viewport_size(PHONE)
    page.goto("/")
    expect(page.get_by_text("No servers yet.")).to_be_visible()
    assert scroll_width(page) <= 390
    for name in ("Add one", "import an mcpServers file"):
        link = page.get_by_role("link", name=name)
        expect(link).to_be_in_viewport(ratio=1)
    shoot(page, "servers-empty")
