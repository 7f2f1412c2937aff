"""The first hour as a newcomer lives it (issue 47), in a real Chromium against a real `manage.py
serve` with the echo server: a token made with the Tokens page's defaults keeps the gate, each
approve button says its scope in visible words, a confirmation's own page follows its call to
its result, the phone cards label each cell with its column, and the new token's Copy buttons
copy. Every page seen passes axe-core at 1280 and 390 px and the Tab walk.

Run on its own: `pytest -m e2e tests/e2e/test_first_hour_browser.py`. Screenshots go to
artifacts/first-hour/ (not committed).
"""

import httpx2
import pytest
from playwright.sync_api import Page, expect

from tests.e2e import a11y
from tests.e2e.browser import PHONE, answer, call_in_background, console_with_user, shoot_into, sign_in
from tests.live import ROOT, our_server

pytestmark = pytest.mark.e2e

SHOTS = ROOT / "artifacts" / "first-hour"
USER, PASSWORD = "newcomer", "e2e-password-47"
SESSION = "session-" + "0123456789abcdef" * 2  # as long as the ids agents send


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, {"echo": our_server("echo.py")}, USER, PASSWORD)
    module_console.start(c)
    c.wait_connected("echo")
    return c


@pytest.fixture(scope="module")
def made(console):
    """The token made on the Tokens page with its defaults (test 1), as a box."""
    return {}


def check(page: Page, label: str) -> None:
    problems = a11y.check(page, label)
    assert problems == [], "\n".join(problems)


def test_it_signs_in_after_a_wrong_password_without_typing_the_username_again(page, console):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto("/login/")
    # Where a newcomer's password is: printed once by `make run`.
    expect(page.locator("main")).to_contain_text("make run")
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Sign in", exact=True).click(timeout=90_000)
    expect(page.get_by_role("alert")).to_contain_text("didn't match")
    expect(page.get_by_label("Username")).to_have_value(USER)
    expect(page.get_by_label("Password")).to_be_focused()
    check(page, "login (a wrong password)")
    shoot_into(page, SHOTS, "sign-in-wrong-password")
    icon = page.request.get("/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"].startswith("image/"), icon.status
    sign_in(page, USER, PASSWORD)


def test_it_makes_a_token_that_keeps_the_gate_with_the_tokens_pages_defaults(page, console, made):
    page.goto("/tokens/")
    form = page.locator("#new-token-form")
    auto = form.get_by_label("May use auto mode")
    expect(auto).not_to_be_checked()
    # What the box allows, said where it is ticked.
    expect(form.locator("label.check")).to_contain_text("skip approval")
    form.get_by_label("Name").fill("laptop")
    form.get_by_role("button", name="Create token").click()
    expect(page.get_by_role("heading", name="Token “laptop” created")).to_be_visible()
    made["token"] = page.locator("#new-token").inner_text().strip()
    with httpx2.Client(base_url=console.url, headers={"Authorization": f"Bearer {made['token']}"}) as http:
        r = http.post(
            "/v1/mcp/call", json={"name": "mcp__echo__echo", "arguments": {"text": "hi"}, "mode": "auto"}
        )
    assert r.status_code == 403 and r.json() == {"error": "this token may not use auto mode"}, r.text


def test_it_copies_the_new_token_and_each_snippet(page, made):
    panel = page.locator("section.new-token")
    copies = panel.locator("button[data-copy]")
    expect(copies.first).to_have_accessible_name("Copy the token")
    shown = panel.locator("pre")
    expect(copies).to_have_count(shown.count())
    for i in range(shown.count()):
        copies.nth(i).click()
        expect(copies.nth(i)).to_contain_text("Copied")
        assert page.evaluate("navigator.clipboard.readText()") == shown.nth(i).inner_text()
    # The hooks block once, and the steps to connect an agent not again below a token made.
    expect(page.get_by_text('"PermissionRequest"')).to_have_count(1)
    expect(page.locator("#connect-agent")).to_have_count(0)
    check(page, "tokens (a new token)")
    shoot_into(page, SHOTS, "tokens-new")


def test_it_says_each_approve_buttons_scope_in_visible_words(page, console, made):
    box = call_in_background(console, "mcp__echo__echo", {"text": "first"}, made["token"], session_id=SESSION)
    page.goto("/pending/")
    card = page.locator("article.pending", has_text="first")
    expect(card).to_be_visible()
    for size in (PHONE, None):
        if size:
            page.set_viewport_size(size)
        for button, words in (
            ("Approve", "This call only."),
            ("Approve and remember", "until you untrust it"),
            ("Approve for session", f"in session {SESSION[:12]}"),
            ("Approve for 1 hour", "for the next hour"),
        ):
            said = card.locator(".scope", has_text=words)
            expect(said).to_be_visible()
            expect(card.get_by_role("button", name=button, exact=True)).to_have_accessible_description(
                said.inner_text()
            )
    page.set_viewport_size({"width": 1280, "height": 900})
    # The session id shown short; its link still filters by the whole id.
    assert SESSION not in card.inner_text()
    check(page, "pending (one call)")
    shoot_into(page, SHOTS, "pending")
    card.get_by_role("button", name="Approve for session", exact=True).click()
    assert answer(box)["body"]["status"] == "done"


def test_it_follows_its_call_to_the_result_on_the_confirmations_own_page(page, console, made):
    box = call_in_background(
        console, "mcp__echo__sleep", {"seconds": 1.5}, made["token"], session_id="s-follow"
    )
    page.goto("/pending/")
    page.locator("article.pending", has_text="sleep").get_by_role("link", name="sleep").click()
    expect(page.get_by_role("heading", name="sleep on echo")).to_be_visible()
    loads = []
    page.on("load", lambda _: loads.append(1))
    page.get_by_role("button", name="Approve", exact=True).click()
    page.wait_for_load_state()  # the form's own answer: the same page, approved
    loads.clear()
    detail = page.locator("#pending-detail")
    expect(detail.locator(".status")).to_have_text("done", timeout=20_000)
    expect(detail.locator("pre.result")).to_have_text("slept")
    expect(page.locator("main")).not_to_contain_text("{#")  # no template comment shown as text
    assert loads == []  # followed without a reload
    assert answer(box)["body"]["status"] == "done"
    check(page, "pending-detail (done)")
    shoot_into(page, SHOTS, "confirmation-done")


# Each card table a phone shows, on the page it is on.
CARD_TABLES = {
    "/": "table.servers",
    "/history/": "table.calls",
    "/pending/": "table.allowances",
    "/audit/": "table.audit",
    "/tokens/": "#token-list table",
    "/account/": "table.sessions",
}

# Per row, per cell: its column's heading ("" for one read by screen readers only) and the label
# the phone card shows above it.
_LABELS = """sel => {
  const table = document.querySelector(sel);
  const heads = [...table.querySelectorAll("thead th")].map(th => th.querySelector(".sr-only") ? "" : th.innerText.trim());
  return [...table.querySelectorAll("tbody tr")].filter(tr => !tr.querySelector("td.empty")).map(tr =>
    [...tr.children].map((td, i) => {
      const c = getComputedStyle(td, "::before").content;
      return [heads[i], c === "none" || c === "normal" ? "" : JSON.parse(c)];
    }));
}"""


def test_it_labels_each_cell_of_the_phone_cards_with_its_column(page, console, made):
    for path, table in CARD_TABLES.items():
        page.goto(path)
        page.set_viewport_size(PHONE)  # a11y.check leaves the page at desktop width
        rows = page.evaluate(_LABELS, table)
        assert rows, f"{path}: no rows in {table}"
        for row in rows:
            # The first cell is the card's title; every other cell under a heading says it.
            wanted = [(head, head) for head, _ in row[1:]]
            assert [(head, label) for head, label in row[1:]] == wanted, f"{path}: (column, label) {row}"
            assert row[0][1] in ("", row[0][0]), f"{path}: (column, label) {row}"
        check(page, f"{path} (phone cards)")
        shoot_into(page, SHOTS, "cards" + path.replace("/", "-").rstrip("-"))


# Lines a text is laid out on, per element: a name broken mid-word takes two.
_LINES = """sel => [...document.querySelectorAll(sel)].map(e => {
  const text = [...e.childNodes].filter(n => n.nodeType === 3 && n.data.trim()).pop();
  const r = document.createRange();
  r.selectNodeContents(text);
  return [e.innerText, new Set([...r.getClientRects()].map(x => Math.round(x.top))).size];
})"""


def test_it_speaks_a_persons_words_on_the_pages(page, console, made):
    box = call_in_background(console, "mcp__echo__add", {"a": 1, "b": 2}, made["token"], session_id="s-deny")
    page.goto("/pending/")
    card = page.locator("article.pending", has_text="add")
    card.get_by_label("Reason").fill("not now")
    card.get_by_role("button", name="Deny").click()
    said = page.locator("#messages .message", has_text="Denied: mcp__echo__add.")
    expect(said).to_be_visible()
    expect(said).not_to_have_class("message success")  # no green flash for a denial
    assert answer(box)["body"]["status"] == "skipped"  # /v1 keeps SPEC 5's word
    page.goto("/history/")
    expect(page.locator("tr", has_text="add").locator(".status")).to_have_text("denied")
    page.goto("/")
    expect(page.get_by_role("columnheader", name="MCP version")).to_be_visible()
    page.goto("/servers/echo/")
    trust = page.locator("#trust-editor")
    expect(trust).not_to_contain_text("allow_tool")
    expect(page.locator("dt", has_text="MCP version")).to_be_visible()
    broken = [t for t, n in page.evaluate(_LINES, ".tool-head .registered, .tool-checks label") if n != 1]
    assert broken == [], f"names broken over lines at 1280 px: {broken}"
    check(page, "server-detail (echo)")
    shoot_into(page, SHOTS, "server-echo")


def test_it_helps_fill_the_views_and_rules_forms_with_the_consoles_own_tools(page, console):
    page.goto("/views/")
    editor = page.locator("#view-editor")
    expect(editor.get_by_label("Name")).to_have_attribute("type", "text")
    names = editor.locator(".tool-names code")
    expect(names.first).to_be_visible()
    assert "mcp__echo__echo" in names.all_inner_texts()
    check(page, "views (empty)")
    shoot_into(page, SHOTS, "views")
    page.goto("/rules/")
    box = page.locator("#rules-editor")
    # The box first; examples made of this console's tools, not of servers it doesn't have.
    examples = box.locator("#rules-examples")
    expect(examples).to_contain_text("mcp__echo__")
    expect(examples).not_to_contain_text("mcp__fs__")
    assert box.locator("textarea").bounding_box()["y"] < examples.bounding_box()["y"]
    check(page, "rules (empty)")
    shoot_into(page, SHOTS, "rules")
