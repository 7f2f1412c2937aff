"""SPEC 17.3 / issue 21 point 3: approvals that end by themselves. `Approve for 1 hour` in the
inbox and `remember_for` in a reply let later calls of the same tool by the same token (any
session) run at once until the grant ends; another token's calls still wait; revoking the
grant, or the token, makes them wait again. Grants are console rows, never `allow_tool` lines.

The calls go through the real call path (`calls.create`, the gate) on a real database, the
replies through `/v1` and the pages (Django test client); `/mcp` and `/mcp/<server>` reach the
same `calls.create` (see mcpserver.tools), so a grant holds there as well.
"""

import datetime
import json
import re

import pytest
from django.test import Client
from django.utils import timezone

from mcpcore import calls
from mcpcore.choices import CallKind
from mcpcore.models import ApiToken, PermissionGrant, Server, Tool, ToolCall

pytestmark = pytest.mark.django_db
TOOL = "mcp__srv__tool"


@pytest.fixture
def tool(db) -> Tool:
    server = Server.objects.create(name="srv", state="connected", transport="stdio")
    return Tool.objects.create(server=server, tool_name="tool", registered_name=TOOL)


@pytest.fixture
def agents(db) -> dict[str, tuple[ApiToken, str]]:
    return {name: ApiToken.issue(name) for name in ("laptop", "ci")} | {
        "approver": ApiToken.issue("phone", role="approver")
    }


@pytest.fixture
def signed_in(db, django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_user("op"))
    return client


def call(token: ApiToken, session: str = "s-1", name: str = TOOL) -> ToolCall:
    return calls.create(token, "", name, {}, session, "confirm")


def reply(secret: str, c: ToolCall, body: dict):
    return Client().post(
        f"/v1/session/{c.session_id}/confirm/{c.confirm_id}",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )


def test_it_lets_the_next_call_of_that_token_run_at_once_and_another_tokens_wait(
    tool, agents, agenvoy_home, signed_in
):
    laptop, ci = agents["laptop"][0], agents["ci"][0]
    first = call(laptop)
    assert first.status == "pending"
    r = signed_in.post(f"/pending/{first.confirm_id}/reply/", {"session_id": "s-1", "action": "hour"})
    assert r.status_code == 302
    first.refresh_from_db()
    assert (first.status, first.decision, first.decided_by) == ("running", "grant", "op")
    grant = PermissionGrant.objects.get()
    assert (grant.token, grant.kind, grant.tool_name, grant.granted_by) == (
        laptop,
        "tool_confirm",
        TOOL,
        "op",
    )
    assert abs((grant.expires_at - timezone.now()).total_seconds() - 3600) < 5
    # Any session of that token: at once; another token, or another tool: a person again.
    assert (call(laptop, "s-2").status, call(laptop, "s-2").decision) == ("running", "grant")
    assert call(ci).status == "pending"
    Tool.objects.create(server=tool.server, tool_name="other", registered_name="mcp__srv__other")
    assert call(laptop, name="mcp__srv__other").status == "pending"
    assert (agenvoy_home / "allow_tool").exists() is False or TOOL not in (
        agenvoy_home / "allow_tool"
    ).read_text()
    # Revoked on the Tokens page: the next call waits again.
    html = signed_in.get("/tokens/").content.decode()
    row = re.search(
        rf'<form class="grant" method="post" action="/tokens/grants/{grant.pk}/revoke/".*?</form>', html, re.S
    )
    assert (
        row
        and f"<code>{TOOL}</code>" in row.group(0)
        and re.search(r">(\d+:)?[0-5]?\d:[0-5]\d</time> left", row.group(0))
    )
    assert "Revoke" in row.group(0)
    signed_in.post(f"/tokens/grants/{grant.pk}/revoke/")
    assert call(laptop, "s-3").status == "pending"


def test_it_ends_by_itself(tool, agents, agenvoy_home):
    laptop = agents["laptop"][0]
    c = call(laptop)
    assert reply(agents["approver"][1], c, {"approve": True, "remember_for": 60}).status_code == 200
    assert call(laptop).decision == "grant"
    PermissionGrant.objects.update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    assert call(laptop).status == "pending"


@pytest.mark.parametrize(
    "body, message",
    [
        ({"approve": True, "remember_for": 59}, "remember_for must be between 60 and 604800 seconds"),
        ({"approve": True, "remember_for": 604801}, "remember_for must be between 60 and 604800 seconds"),
        ({"approve": True, "remember_for": "3600"}, "remember_for must be between 60 and 604800 seconds"),
        ({"approve": True, "remember_for": True}, "remember_for must be between 60 and 604800 seconds"),
        ({"approve": False, "remember_for": 3600}, "remember_for needs approve"),
        ({"remember_for": 3600}, "remember_for needs approve"),
        ({"approve": True, "abort": True, "remember_for": 3600}, "remember_for needs approve"),
    ],
)
def test_it_refuses_a_remember_for_it_cannot_use(tool, agents, agenvoy_home, body, message):
    c = call(agents["laptop"][0])
    r = reply(agents["approver"][1], c, body)
    assert (r.status_code, r.json()) == (400, {"error": message})
    c.refresh_from_db()
    assert c.status == "pending" and not PermissionGrant.objects.exists()


def test_it_lets_no_agent_token_grant_through_a_reply(tool, agents, agenvoy_home):
    c = call(agents["laptop"][0])
    r = reply(agents["ci"][1], c, {"approve": True, "remember_for": 3600})
    assert (r.status_code, r.json()) == (403, {"error": "this token may not reply to confirmations"})
    r = reply(agents["laptop"][1], c, {"approve": True, "remember_for": 3600})
    assert (r.status_code, r.json()) == (403, {"error": "a token may not reply to its own call"})
    assert not PermissionGrant.objects.exists()


def test_it_extends_a_grant_in_force_instead_of_adding_another(tool, agents):
    laptop = agents["laptop"][0]
    short = calls.grant(laptop, CallKind.TOOL_CONFIRM, TOOL, "op", 60)
    longer = calls.grant(laptop, CallKind.TOOL_CONFIRM, TOOL, "lead", 7200)
    assert longer.pk == short.pk and PermissionGrant.objects.count() == 1
    assert calls.grant(laptop, CallKind.TOOL_CONFIRM, TOOL, "op", 60).expires_at == longer.expires_at


def test_it_grants_a_permission_prompt_by_tool_name_for_a_while(agents):
    laptop = agents["laptop"][0]
    prompt = calls.create_permission_prompt(laptop, "Bash", {"command": "make"}, "mcp:s1")
    calls.reply("mcp:s1", str(prompt.confirm_id), {"approve": True, "remember_for": 600}, "op")
    later = calls.create_permission_prompt(laptop, "Bash", {"command": "make test"}, "cc:other-session")
    assert (later.status, later.decision) == ("done", "grant")
    assert calls.permission_answer(later) == {"behavior": "allow", "updatedInput": {"command": "make test"}}
    assert calls.create_permission_prompt(agents["ci"][0], "Bash", {}, "mcp:s1").status == "pending"
    # A grant of a permission prompt's tool name never lets a tool call of that name through.
    assert not calls.granted(laptop, CallKind.TOOL_CONFIRM, "Bash")


def test_it_ends_a_tokens_grants_when_the_token_is_revoked(tool, agents, signed_in):
    laptop = agents["laptop"][0]
    calls.grant(laptop, CallKind.TOOL_CONFIRM, TOOL, "op", 3600)
    calls.remember_permission(laptop, "Bash", "op")
    signed_in.post(f"/tokens/{laptop.pk}/revoke/")
    assert not PermissionGrant.in_force().filter(token=laptop).exists()
    assert "<code>Bash</code>" not in signed_in.get("/tokens/").content.decode().split("claude-hooks")[0]


def test_it_shows_approve_for_1_hour_on_the_inbox_and_the_confirmation_page(tool, agents, signed_in):
    c = call(agents["laptop"][0])
    for path in ("/pending/", f"/pending/{c.confirm_id}/"):
        html = signed_in.get(path).content.decode()
        assert re.search(
            r'<button type="submit" name="action" value="hour"[^>]*>Approve for 1 hour</button>', html
        )


def test_it_counts_an_approval_for_a_while_as_approved(agents, django_capture_on_commit_callbacks):
    """`Approve for 1 hour` is a person's approval (SPEC 18.3's `approved`), not a denial."""
    from mcpcore import metrics

    def counted(outcome: str) -> float:
        return metrics.confirmations.labels(outcome)._value.get()

    before = counted("approved"), counted("denied")
    prompt = calls.create_permission_prompt(agents["laptop"][0], "Bash", {}, "mcp:s1")
    with django_capture_on_commit_callbacks(execute=True):
        calls.reply("mcp:s1", str(prompt.confirm_id), {"approve": True, "remember_for": 600}, "op")
    assert (counted("approved"), counted("denied")) == (before[0] + 1, before[1])


def test_it_keeps_a_permission_prompt_named_like_a_form_under_the_plain_rules(agents, agenvoy_home):
    """An agent names its own tools: `prompt:x` is a plain name for the rules, so `deny *`
    still holds it (a form's rules decide only the console's own prompt gets)."""
    (agenvoy_home / "rules").write_text("deny *\n")
    prompt = calls.create_permission_prompt(agents["laptop"][0], "prompt:mcp__x__y", {}, "mcp:s1")
    assert (prompt.status, prompt.result) == ("skipped", "Denied by rule: deny *")
