"""Prompt gets and resource reads (SPEC 20.3) in a real Chromium: the History page, a call's
page, the Pending page and a confirmation's page show `Get prompt <name>` / `Read <uri> from
<server>`, pass axe-core with no serious or critical violation at 1280 and 390 px (nothing
scrolls sideways on a phone, a long URI included) and the Tab key reaches each control. The
calls are rows written before the console starts. Screenshots go to artifacts/reads/.

Run on its own: `pytest -m e2e tests/e2e/test_reads_browser.py`."""

import uuid

import pytest
from playwright.sync_api import Page, expect

from tests.e2e import a11y
from tests.e2e.browser import console_with_user, shoot_into, sign_in
from tests.live import ROOT, our_server

pytestmark = pytest.mark.e2e

SHOTS = ROOT / "artifacts" / "reads"
USER, PASSWORD = "operator", "e2e-password-1"
URI = "file:///srv/docs/" + "very-long-folder-name/" * 12 + "readme.md"
IDS = {
    name: uuid.UUID(int=i + 1) for i, name in enumerate(("prompt", "resource", "ask_prompt", "ask_resource"))
}
CONFIRM = {"ask_prompt": uuid.UUID(int=101), "ask_resource": uuid.UUID(int=102)}

ROWS = f"""
import datetime
from django.utils import timezone
from mcpcore.models import ToolCall
now = timezone.now()
prompt = dict(kind="prompt", tool_name="mcp__echo__review", tool="review", server_name="echo",
              arguments={{"style": "terse", "topic": "the release notes"}})
resource = dict(kind="resource", tool_name={URI!r}[:700], tool="", server_name="echo",
                arguments={{"uri": {URI!r}}})
ended = dict(status="done", decision="default", started_at=now, ended_at=now, session_id="s-1")
ToolCall.objects.create(id={str(IDS["prompt"])!r}, result="user: review the release notes", **prompt, **ended)
ToolCall.objects.create(id={str(IDS["resource"])!r}, result="# Readme", **resource, **ended)
pending = dict(status="pending", session_id="s-2", expires_at=now + datetime.timedelta(hours=1))
ToolCall.objects.create(id={str(IDS["ask_prompt"])!r}, confirm_id={str(CONFIRM["ask_prompt"])!r},
                        rule="ask prompt:mcp__echo__*", **prompt, **pending)
ToolCall.objects.create(id={str(IDS["ask_resource"])!r}, confirm_id={str(CONFIRM["ask_resource"])!r},
                        rule="ask resource:*(uri:*)", **resource, **pending)
"""


@pytest.fixture(scope="module")
def console(module_console):
    c = console_with_user(module_console, {"echo": our_server("echo.py")}, USER, PASSWORD)
    c.manage("shell", "-c", ROWS)
    module_console.start(c)
    return c


def test_it_shows_prompt_and_resource_calls_in_the_history_and_the_inbox(page: Page, console):
    page.goto("/")
    sign_in(page, USER, PASSWORD)
    pages = [
        ("/history/?kind=resource", f"Read {URI} from echo", "history-resource"),
        ("/history/?kind=prompt", "Get prompt mcp__echo__review", "history-prompt"),
        (f"/history/{IDS['resource']}/", f"Read {URI} from echo", "call-resource"),
        (f"/history/{IDS['prompt']}/", "Get prompt mcp__echo__review", "call-prompt"),
        ("/pending/", f"Read {URI} from echo", "pending"),
        (f"/pending/{CONFIRM['ask_resource']}/", f"Read {URI} from echo", "pending-resource"),
        (f"/pending/{CONFIRM['ask_prompt']}/", "Get prompt mcp__echo__review", "pending-prompt"),
    ]
    problems = []
    for path, text, shot in pages:
        page.goto(path)
        expect(page.get_by_text(text, exact=True).first).to_be_visible()
        problems += a11y.check(page, f"{shot} {path}")
        shoot_into(page, SHOTS, shot)
    assert not problems, "\n".join(problems)
    page.goto("/pending/")
    card = page.locator(f"#pending-{CONFIRM['ask_prompt']}")
    expect(card.get_by_role("button", name="Approve", exact=True)).to_be_visible()
    expect(card.get_by_role("button", name="Approve for session")).to_have_count(0)
    expect(card.get_by_role("button", name="Approve and remember")).to_have_count(0)
