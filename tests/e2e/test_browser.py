"""The browser console in a real Chromium against a real `manage.py serve` and the real
server-everything (issue 5). Run on its own: `pytest -m e2e` (Playwright's sync API must not
share a process with asyncio tests).

The tests run in order and share one console and one signed-in page, as an operator would:
sign in, add a server, trust tools, approve and deny live calls, watch a server die.
Screenshots of the main pages at 1280 and 390 px go to artifacts/screenshots/.
"""

import contextlib
import os
import re
import signal
import sqlite3

import httpx2
import psutil
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.browser import TIMEOUT, answer, call_in_background, console_with_user, nav, shoot, sign_in
from tests.live import EVERYTHING, Console, wait_until

pytestmark = pytest.mark.e2e

USER, PASSWORD = "operator", "e2e-password-1"


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, {}, USER, PASSWORD, {"AGENVOY_PING_SECONDS": "1"})
    module_console.start(c)
    return c


def mark_no_reload(page: Page) -> None:
    """A flag in the page's JavaScript state: still set later means the page never reloaded."""
    page.evaluate("window.__noReload = true")


def assert_no_reload(page: Page) -> None:
    assert page.evaluate("window.__noReload === true"), "the page reloaded"


def wait_live(page: Page) -> None:
    """The live socket is open (so what arrives next comes by push, not by polling)."""
    page.wait_for_function("() => window.agvLive === true")


def allow_lines(console: Console) -> list[str]:
    path = console.home / "allow_tool"
    return path.read_text().splitlines() if path.exists() else []


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


# --- the scenarios, in order --------------------------------------------------------------------


def test_it_signs_in(page, console):
    page.goto("/")
    expect(page).to_have_url(f"{console.url}/login/?next=/")
    shoot(page, "login")
    sign_in(page, USER, PASSWORD)
    for link in ("Servers", "Pending", "History", "Tokens"):
        expect(nav(page, link)).to_be_visible()


def test_it_adds_a_server_and_its_tools_appear(page, console):
    page.get_by_role("link", name="Add server").click()
    page.get_by_label("Name").fill("every")
    page.get_by_label("Transport").select_option("stdio")
    page.get_by_label("Command").fill("node")
    page.get_by_label("Args").fill(f"{EVERYTHING}\nstdio")
    shoot(page, "server-add")
    page.get_by_role("button", name="Add server").click()
    expect(page.get_by_text("Added every")).to_be_visible()
    mark_no_reload(page)
    row = page.locator("#server-every")
    expect(row).to_have_attribute("data-state", "connected", timeout=60_000)
    wait_until(lambda: int(row.get_attribute("data-tools") or 0) > 0, 30, what="tools listed")
    assert_no_reload(page)
    expect(row.locator("td").nth(3)).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d$"))  # protocol
    shoot(page, "servers")
    row.get_by_role("link", name="every").click()
    expect(page.get_by_role("heading", name="echo", exact=True)).to_be_visible()
    expect(page.get_by_role("heading", name="get-tiny-image", exact=True)).to_be_visible()
    expect(page.get_by_text("mcp__every__get-sum", exact=True)).to_be_visible()


def test_it_writes_exactly_the_two_ticked_tools(page, console):
    editor = page.locator("#trust-editor")
    editor.get_by_label("echo", exact=True).check()
    editor.get_by_label("get-sum", exact=True).check()
    editor.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved: 2 tools of every run without asking.")).to_be_visible()
    assert allow_lines(console) == ["mcp__every__echo", "mcp__every__get-sum"]
    expect(page.locator("#trust-editor").get_by_label("echo", exact=True)).to_be_checked()


def test_it_writes_the_star_line_for_all_tools(page, console):
    editor = page.locator("#trust-editor")
    editor.get_by_label("All tools").check()
    editor.get_by_role("button", name="Save").click()
    expect(page.get_by_text("every tool of every runs without asking")).to_be_visible()
    assert allow_lines(console) == ["mcp__every__*"]


def test_it_tries_a_tool_and_shows_the_result(page, console):
    # With every tool trusted the try-it call runs at once; its picture is shown as a picture.
    tool = page.locator("article.tool", has=page.get_by_role("heading", name="get-tiny-image", exact=True))
    tool.get_by_text("Try it").click()
    tool.get_by_role("button", name="Run").click()
    image = tool.locator(".try-result img")
    expect(image).to_be_visible()
    assert image.get_attribute("src").startswith("data:image/png;base64,")
    shoot(page, "server-detail")
    # Untick everything again so that the next calls wait for a person.
    editor = page.locator("#trust-editor")
    editor.get_by_label("All tools").uncheck()
    editor.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved: every tool of every waits for a person.")).to_be_visible()
    assert allow_lines(console) == []


def test_it_shows_a_new_pending_call_live_and_approving_answers_the_waiting_call(page, console):
    nav(page, "Pending").click()
    wait_live(page)
    mark_no_reload(page)
    box = call_in_background(console, "mcp__every__echo", {"message": "from the browser test"})
    item = page.locator("article.pending", has_text="from the browser test")
    expect(item).to_be_visible()
    expect(page.locator("#pending-badge")).to_have_text("1")
    assert_no_reload(page)
    shoot(page, "pending")
    item.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_text("Approved: mcp__every__echo.")).to_be_visible()
    done = answer(box)
    assert done["status"] == 200, done
    assert done["body"]["status"] == "done" and "from the browser test" in done["body"]["result"]
    expect(item).to_have_count(0)
    expect(page.locator("#pending-badge")).to_have_text("")


def test_it_denies_with_a_reason_and_the_reason_is_in_history(page, console):
    wait_live(page)
    box = call_in_background(console, "mcp__every__get-sum", {"a": 2, "b": 3})
    item = page.locator("article.pending", has_text="get-sum")
    expect(item).to_be_visible()
    item.get_by_label("Reason").fill("not on a Friday")
    item.get_by_role("button", name="Deny").click()
    expect(page.get_by_text("Denied: mcp__every__get-sum.")).to_be_visible()
    done = answer(box)
    assert done["body"]["status"] == "skipped"
    assert done["body"]["result"] == "Skipped by user. Reason: not on a Friday"
    nav(page, "History").click()
    row = page.locator("table.calls tbody tr", has_text="get-sum").first
    expect(row).to_contain_text("not on a Friday")
    expect(row).to_contain_text("deny")
    expect(row).to_contain_text(f"by {USER}")
    shoot(page, "history")


def test_it_shows_a_picture_in_the_call_detail(page, console):
    r = console.call("mcp__every__get-tiny-image", {}, mode="auto")
    assert r.json()["status"] == "done"
    page.goto(f"/history/{r.json()['call_id']}/")
    expect(page.locator(".call-result img")).to_be_visible()
    shoot(page, "call-detail")


def test_it_creates_a_token_shown_once_and_revokes_it(page, console):
    nav(page, "Tokens").click()
    page.get_by_label("Name").fill("ci-agent")
    page.get_by_role("button", name="Create token").click()
    token = page.locator("#new-token").inner_text().strip()
    assert token.startswith("agv_")
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx2.get(f"{console.url}/v1/mcp/status", headers=auth).status_code == 200
    shoot(page, "tokens")
    page.goto("/tokens/")
    assert token not in page.content()
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("tr", has_text="ci-agent").get_by_role("button", name="Revoke").click()
    expect(page.locator("tr", has_text="ci-agent")).to_contain_text("revoked")
    assert httpx2.get(f"{console.url}/v1/mcp/status", headers=auth).status_code == 401


def test_it_drops_a_revoked_tokens_pending_calls_from_an_open_pending_page(page, console):
    token = console._insert_token("leaving-agent", "agent")
    with contextlib.closing(sqlite3.connect(console.data / "db.sqlite3")) as db, db:  # commit, close
        db.execute(
            "insert into mcpcore_sessionallowance (session_id, token_id, granted_by, created_at)"
            " select 'leaving-session', id, 'op', datetime('now') from mcpcore_apitoken where name = ?",
            ("leaving-agent",),
        )
    inbox = page.context.new_page()
    try:
        inbox.goto("/pending/")
        allowance = inbox.locator("#allowances tr", has_text="leaving-session")
        expect(allowance).to_have_count(1)
        wait_live(inbox)
        mark_no_reload(inbox)
        boxes = [
            call_in_background(console, "mcp__every__echo", {"message": f"leaving-{i}"}, token)
            for i in range(3)
        ]
        items = inbox.locator("article.pending", has_text="leaving-")
        expect(items).to_have_count(3)
        page.goto("/tokens/")
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator("tr", has_text="leaving-agent").get_by_role("button", name="Revoke").click()
        expect(page.locator("tr", has_text="leaving-agent")).to_contain_text("revoked")
        # Gone from the open inbox by push, without a reload, and its session allowance too.
        expect(items).to_have_count(0)
        expect(allowance).to_have_count(0)
        assert_no_reload(inbox)
        for box in boxes:
            done = answer(box)
            assert (done["body"]["status"], done["body"]["result"]) == ("cancelled", "token revoked"), done
        r = httpx2.post(
            f"{console.url}/v1/mcp/call",
            json={"name": "mcp__every__echo", "arguments": {"message": "x"}},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 401
    finally:
        inbox.close()


def test_it_reconnects_a_server_from_its_row(page, console):
    nav(page, "Servers").click()
    mark_no_reload(page)
    page.locator("#server-every").get_by_role("button", name="Reconnect").click()
    expect(page.get_by_text("Reconnect: every: connected")).to_be_visible(timeout=60_000)
    expect(page.locator("#server-every")).to_have_attribute("data-state", "connected")
    assert_no_reload(page)


def test_it_shows_a_dead_server_on_the_open_page_without_a_reload(page, console):
    nav(page, "Servers").click()
    row = page.locator("#server-every")
    expect(row).to_have_attribute("data-state", "connected")
    wait_live(page)
    mark_no_reload(page)
    # Every state the row shows from now on, however briefly.
    page.evaluate("""() => {
        window.__states = [];
        const seen = () => {
            const row = document.querySelector('#server-every');
            if (row) window.__states.push(row.dataset.state);
        };
        new MutationObserver(seen).observe(document.body, {subtree: true, childList: true, attributes: true});
    }""")
    pids = [
        p.pid
        for p in psutil.Process(console.proc.pid).children(recursive=True)
        if "server-everything" in " ".join(_cmdline(p))
    ]
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    page.wait_for_function("() => window.__states.some(s => s !== 'connected')", timeout=TIMEOUT)
    assert_no_reload(page)
    # The session is renewed, and that shows too.
    expect(row).to_have_attribute("data-state", "connected", timeout=TIMEOUT)
    assert_no_reload(page)


def test_it_falls_back_to_polling_when_the_socket_is_unavailable(page, console):
    # Every live socket from now on is refused: the pending list must still update, by polling.
    page.route_web_socket(re.compile(r"/ws/live/"), lambda ws: ws.close())
    nav(page, "Pending").click()
    mark_no_reload(page)
    box = call_in_background(console, "mcp__every__echo", {"message": "found by polling"})
    item = page.locator("article.pending", has_text="found by polling")
    expect(item).to_be_visible()
    assert page.evaluate("window.agvLive") is False
    assert_no_reload(page)
    item.get_by_role("button", name="Approve", exact=True).click()
    assert answer(box)["body"]["status"] == "done"
