"""SPEC 13.4 / 13.5, issue 12 points 4 and 5: permission prompts (`approval_prompt`) on the
database, in the inbox and history, their answers, session allowances, remembered grants on the
Tokens page, and the client configuration a new token comes with.

The MCP endpoint itself is tested elsewhere; here the interface it calls (`calls.
create_permission_prompt`, `calls.permission_answer`, `calls.reply`) runs on a real database
and the pages through the Django test client.
"""

import datetime
import html as htmllib
import json
import re
import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from mcpcore import calls
from mcpcore.models import ApiToken, PermissionGrant, SessionAllowance, ToolCall
from mcpcore.web import live

pytestmark = pytest.mark.django_db

BASH = {"command": "rm -rf build", "description": "Clean the build folder"}


@pytest.fixture
def agent(db) -> ApiToken:
    return ApiToken.issue("claude")[0]


@pytest.fixture
def other(db) -> ApiToken:
    return ApiToken.issue("cursor")[0]


@pytest.fixture
def signed_in(client, db) -> Client:
    client.force_login(User.objects.create_user("op"))
    return client


def prompt(token: ApiToken, tool_name="Bash", tool_input=None, session="mcp:s1") -> ToolCall:
    return calls.create_permission_prompt(token, tool_name, tool_input or dict(BASH), session, "toolu_1")


def answer(call: ToolCall, **body) -> ToolCall:
    return calls.reply(call.session_id, str(call.confirm_id), body, "op")


# --- creating a prompt --------------------------------------------------------------------------


def test_it_records_a_pending_prompt_of_the_agents_own_tool(agent, settings):
    settings.AGENVOY_CONFIRM_TIMEOUT = 120
    call = prompt(agent)
    row = ToolCall.objects.get(id=call.id)
    assert (row.kind, row.status, row.tool_name, row.arguments) == (
        "permission_prompt",
        "pending",
        "Bash",
        BASH,
    )
    assert (row.server_name, row.token, row.requested_by, row.session_id) == ("", agent, "claude", "mcp:s1")
    assert row.confirm_id is not None
    assert abs((row.expires_at - row.created_at).total_seconds() - 120) < 1
    assert row.to_pending()["kind"] == "permission_prompt"


@pytest.mark.parametrize(
    "tool_name,tool_input,message",
    [
        ("", {}, "tool_name must be a non-empty string"),
        ("  ", {}, "tool_name must be a non-empty string"),
        (7, {}, "tool_name must be a non-empty string"),
        (None, {}, "tool_name must be a non-empty string"),
        ("Bash", ["ls"], "input must be a JSON object"),
        ("Bash", None, "input must be a JSON object"),
        ("Bash", "ls", "input must be a JSON object"),
        ("Bash", {"x": float("nan")}, "input must be JSON that can be sent as UTF-8"),
    ],
)
def test_it_refuses_a_prompt_it_cannot_use(agent, tool_name, tool_input, message):
    with pytest.raises(calls.CallError) as err:
        calls.create_permission_prompt(agent, tool_name, tool_input, "mcp:s1")
    assert err.value.status == 400 and err.value.message.startswith(message)
    assert not ToolCall.objects.exists()


def test_it_never_lets_allow_tool_allow_a_prompt(agent, agenvoy_home):
    (agenvoy_home / "allow_tool").write_text("Bash\n*\nmcp__*\n")
    assert prompt(agent).status == "pending"


# --- answers ------------------------------------------------------------------------------------


def test_it_answers_allow_with_the_input_unchanged_and_runs_nothing(agent):
    tool_input = {"file_path": "/tmp/ä.txt", "edits": [{"old": "a", "new": "b"}], "n": 1.5}
    call = answer(prompt(agent, "Edit", tool_input), approve=True)
    assert (call.status, call.decision, call.decided_by) == ("done", "approve", "op")
    assert call.started_at is None and call.ended_at is not None
    assert calls.permission_answer(call) == {"behavior": "allow", "updatedInput": tool_input}
    assert json.loads(call.result) == calls.permission_answer(call)


def test_it_never_hands_a_prompt_to_a_worker(agent):
    # Even a prompt row left `running` (no path writes one) is not picked up as a call to run.
    ToolCall.objects.filter(id=prompt(agent).id).update(status="running")
    assert calls.unstarted_for([""]) == []


@pytest.mark.parametrize(
    "reason,message", [("", "Skipped by user"), ("not on main", "Skipped by user. Reason: not on main")]
)
def test_it_answers_deny_with_the_reason(agent, reason, message):
    call = answer(prompt(agent), approve=False, reason=reason)
    assert (call.status, call.decision, call.result) == ("skipped", "deny", message)
    assert calls.permission_answer(call) == {"behavior": "deny", "message": message}


def test_it_answers_abort_with_interrupt(agent):
    call = answer(prompt(agent), abort=True)
    assert (call.status, call.result) == ("aborted", "user stopped")
    assert calls.permission_answer(call) == {"behavior": "deny", "message": "user stopped", "interrupt": True}


def test_it_answers_deny_when_the_prompt_expires(agent):
    call = prompt(agent)
    ToolCall.objects.filter(id=call.id).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    assert calls.expire_due() == [str(call.id)]
    call.refresh_from_db()
    assert call.status == "expired"
    assert calls.permission_answer(call) == {
        "behavior": "deny",
        "message": "Skipped by user. Reason: confirmation expired",
    }
    with pytest.raises(calls.ReplyError) as err:
        answer(call, approve=True)
    assert err.value.status == 410


def test_it_answers_deny_when_the_prompt_is_cancelled(agent):
    call, tell_owner = calls.cancel(prompt(agent).id)
    assert not tell_owner and call.status == "cancelled"
    assert calls.permission_answer(call) == {"behavior": "deny", "message": "cancelled"}


# --- approve for session, approve and remember --------------------------------------------------


def test_it_allows_later_prompts_of_that_token_and_session_only(agent, other):
    call = answer(prompt(agent), approve=True, allow_turn=True)
    assert (call.status, call.decision) == ("done", "session")
    allowance = SessionAllowance.objects.get()
    assert (allowance.session_id, allowance.token, allowance.granted_by) == ("mcp:s1", agent, "op")

    again = prompt(agent, "Write", {"file_path": "a"})
    assert (again.status, again.decision, again.confirm_id) == ("done", "session", None)
    assert calls.permission_answer(again) == {"behavior": "allow", "updatedInput": {"file_path": "a"}}
    assert prompt(agent, session="mcp:s2").status == "pending"
    assert prompt(other, session="mcp:s1").status == "pending"

    SessionAllowance.objects.update(revoked_at=timezone.now())
    assert prompt(agent).status == "pending"


def test_it_remembers_the_tool_name_for_that_token_and_never_in_allow_tool(
    agent, other, agenvoy_home, signed_in
):
    call = answer(prompt(agent), approve=True, remember=True)
    assert (call.status, call.decision) == ("done", "remember")
    grant = PermissionGrant.objects.get()
    assert (grant.token, grant.tool_name, grant.granted_by, grant.revoked_at) == (agent, "Bash", "op", None)
    assert not (agenvoy_home / "allow_tool").exists()

    later = prompt(agent, tool_input={"command": "ls"}, session="mcp:elsewhere")
    assert (later.status, later.decision) == ("done", "remember")
    assert calls.permission_answer(later) == {"behavior": "allow", "updatedInput": {"command": "ls"}}
    edit = prompt(agent, "Edit")
    assert edit.status == "pending"  # the exact tool name only
    assert prompt(other).status == "pending"

    # Two prompts of one tool remembered while both waited: still one grant.
    edit_again = prompt(agent, "Edit")
    answer(edit, approve=True, remember=True)
    answer(edit_again, approve=True, remember=True)
    assert PermissionGrant.objects.filter(token=agent, tool_name="Edit").count() == 1

    r = signed_in.post(f"/tokens/grants/{grant.pk}/revoke/", follow=True)
    assert "claude must ask again for Bash." in r.content.decode()
    grant.refresh_from_db()
    assert grant.revoked_at is not None
    assert prompt(agent).status == "pending"


# --- the inbox, /v1/pending and history -----------------------------------------------------------


def test_it_lists_prompts_in_v1_pending_with_their_kind(api, api_token, every_tool_call):
    token = ApiToken.objects.get(token_hash=ApiToken.hash(api_token))
    call = prompt(token)
    rows = {p["id"]: p for p in api.get("/v1/pending").json()["pending"]}
    assert rows[str(call.confirm_id)] == {
        "id": str(call.confirm_id),
        "kind": "permission_prompt",
        "session_id": "mcp:s1",
        "tool_name": "Bash",
        "tool_args": BASH,
        "created_at": rows[str(call.confirm_id)]["created_at"],
        "expires_at": rows[str(call.confirm_id)]["expires_at"],
        "call_id": str(call.id),
        "changed": False,
        "repeated": 0,
        "for": None,  # who decides it (SPEC 24.1): every approver
        "approvals": [],
    }
    assert rows[str(every_tool_call.confirm_id)]["kind"] == "tool_confirm"


@pytest.fixture
def every_tool_call(db) -> ToolCall:
    now = timezone.now()
    return ToolCall.objects.create(
        session_id="sess-1",
        tool_name="mcp__every__echo",
        server_name="every",
        tool="echo",
        arguments={"message": "hi"},
        confirm_id=uuid.uuid4(),
        expires_at=now + datetime.timedelta(minutes=5),
        created_at=now,
    )


def _article(html: str, call: ToolCall) -> str:
    return re.search(
        rf'<article class="card pending[^"]*" id="pending-{call.confirm_id}".*?</article>', html, re.S
    ).group(0)


def test_it_shows_a_prompt_on_the_pending_page_with_its_tool_arguments_and_label(
    signed_in, agent, every_tool_call
):
    call = prompt(agent)
    html = signed_in.get("/pending/").content.decode()
    item = _article(html, call)
    assert re.search(r'<h2 class="break"><a href="/pending/[0-9a-f-]+/">Bash</a></h2>', item)
    assert "permission prompt</span>" in item
    assert 'data-kind="permission_prompt"' in item and "<code>Bash</code>" in item
    assert "&quot;command&quot;: &quot;rm -rf build&quot;" in item and "claude" in item
    for button in ("Approve", "Approve and remember", "Approve for session", "Deny"):
        assert f">{button}</button>" in item
    assert "allow_tool" not in item  # remembering a prompt does not touch allow_tool
    tool_item = _article(html, every_tool_call)
    assert "permission prompt" not in tool_item and '<span class="pill">every</span>' in tool_item
    assert re.search(r'id="pending-badge"[^>]*>2</span>', html)


def test_it_pushes_prompts_to_an_open_pending_page(agent):
    call = prompt(agent)
    html = live._render_pending("pending", "admin")
    assert f'id="pending-{call.confirm_id}"' in html and "permission prompt</span>" in html


@pytest.mark.parametrize("action", ["approve", "remember", "session", "deny"])
def test_it_applies_a_page_reply_without_running_anything(signed_in, agent, agenvoy_home, action):
    status = "skipped" if action == "deny" else "done"  # a prompt never runs: approved is done
    call = prompt(agent)
    r = signed_in.post(
        f"/pending/{call.confirm_id}/reply/",
        {"session_id": "mcp:s1", "action": action, "reason": "nope"},
        headers={"HX-Request": "true"},
    )
    assert (
        r.status_code == 200
        and f"pending-{call.confirm_id}" not in r.content.decode().split('id="messages"')[0]
    )
    call.refresh_from_db()
    assert (call.status, call.decision, call.decided_by, call.started_at) == (status, action, "op", None)
    assert PermissionGrant.objects.filter(token=agent, tool_name="Bash").exists() == (action == "remember")
    assert SessionAllowance.objects.filter(token=agent, session_id="mcp:s1").exists() == (action == "session")
    assert not (agenvoy_home / "allow_tool").exists()
    expected = {"behavior": "deny", "message": "Skipped by user. Reason: nope"} if action == "deny" else None
    assert calls.permission_answer(call) == (expected or {"behavior": "allow", "updatedInput": BASH})


def test_it_shows_prompts_in_history(signed_in, agent):
    call = answer(prompt(agent), approve=True)
    html = signed_in.get("/history/").content.decode()
    row = re.search(rf'<tr id="call-{call.id}">.*?</tr>', html, re.S).group(0)
    assert ">Bash</a>" in row and "permission prompt" in row and "approve" in row
    detail = signed_in.get(f"/history/{call.id}/").content.decode()
    assert "permission prompt" in detail and "&quot;behavior&quot;: &quot;allow&quot;" in detail


# --- the Tokens page ----------------------------------------------------------------------------


def test_it_shows_a_new_token_with_ready_to_paste_client_configuration(signed_in, settings):
    settings.AGENVOY_PUBLIC_URL = "https://console.example:8443"
    page = signed_in.post("/tokens/create/", {"name": "laptop"}).content.decode()
    token = re.search(r'<pre class="token" id="new-token">(agv_[^<]+)</pre>', page).group(1)
    text = htmllib.unescape(page)
    url = "https://console.example:8443"
    assert (
        f'claude mcp add --transport http agenvoy {url}/mcp --header "Authorization: Bearer {token}"' in text
    )
    assert (
        f"claude mcp add --transport http agenvoy-permission {url}/mcp/_permission "
        f'--header "Authorization: Bearer {token}"' in text
    )
    assert 'claude -p --permission-prompt-tool mcp__agenvoy-permission__approval_prompt "..."' in text
    block = htmllib.unescape(re.search(r'<pre id="config-mcp-servers">(.*?)</pre>', page, re.S).group(1))
    server = {"type": "http", "url": f"{url}/mcp", "headers": {"Authorization": f"Bearer {token}"}}
    assert json.loads(block) == {"mcpServers": {"agenvoy": server}}
    vscode = htmllib.unescape(re.search(r'<pre id="config-vscode">(.*?)</pre>', page, re.S).group(1))
    assert json.loads(vscode) == {"servers": {"agenvoy": server}}
    again = signed_in.get("/tokens/").content.decode()
    assert token not in again and "client-config" not in again


def test_it_lists_remembered_tool_names_per_token_and_revokes_one_over_htmx(signed_in, agent, other):
    bash = calls.remember_permission(agent, "Bash", "op")
    calls.remember_permission(agent, "WebFetch", "op")
    gone = calls.remember_permission(other, "Edit", "op")
    calls.permission_grant_revoke(gone.pk)
    html = signed_in.get("/tokens/").content.decode()
    row = re.search(rf'<tr id="token-{agent.pk}".*?</tr>', html, re.S).group(0)
    assert "<code>Bash</code>" in row and "<code>WebFetch</code>" in row
    assert (
        f'action="/tokens/grants/{bash.pk}/revoke/"' in row
        and f'hx-post="/tokens/grants/{bash.pk}/revoke/"' in row
    )
    assert "Edit" not in re.search(rf'<tr id="token-{other.pk}".*?</tr>', html, re.S).group(0)

    r = signed_in.post(f"/tokens/grants/{bash.pk}/revoke/", headers={"HX-Request": "true"})
    body = r.content.decode()
    assert body.lstrip().startswith('<div id="token-list"')
    listed = body.split('id="messages"')[0]
    assert "<code>Bash</code>" not in listed and "<code>WebFetch</code>" in listed
    assert "claude must ask again for Bash." in body
    assert not calls.granted(agent, "permission_prompt", "Bash") and calls.granted(
        agent, "permission_prompt", "WebFetch"
    )


def test_it_refuses_a_permission_grant_revoke_without_csrf_or_by_get(agent, signed_in):
    grant = calls.remember_permission(agent, "Bash", "op")
    c = Client(enforce_csrf_checks=True)
    c.force_login(User.objects.get(username="op"))
    assert c.post(f"/tokens/grants/{grant.pk}/revoke/").status_code == 403
    assert c.get(f"/tokens/grants/{grant.pk}/revoke/").status_code == 405
    assert Client().post(f"/tokens/grants/{grant.pk}/revoke/").status_code == 302  # to sign in
    assert signed_in.post("/tokens/grants/99999/revoke/").status_code == 404
    grant.refresh_from_db()
    assert grant.revoked_at is None


def test_it_limits_pending_prompts_per_token_like_tool_calls(agent, other, settings):
    settings.AGENVOY_MAX_PENDING = 2
    prompt(agent)
    prompt(agent)
    with pytest.raises(calls.CallError) as refused:
        prompt(agent)
    assert (refused.value.status, refused.value.message) == (
        429,
        "too many pending confirmations for this token",
    )
    assert prompt(other).status == "pending"
