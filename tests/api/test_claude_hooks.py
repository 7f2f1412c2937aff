"""SPEC 17.1 / issue 21 point 1: Claude Code's HTTP hooks through the inbox.

The requests are Claude Code's own payloads, kept as fixtures under tests/fixtures/claude_code/
(taken from Claude Code's hooks reference: see the README there), posted to a real `manage.py
serve` the way Claude Code's HTTP hook posts them, and the answers are checked against the answer
fields that reference documents (`output_fields.json`). The checks of bad input, limits and
rules that answer at once run on the Django test client.
"""

import concurrent.futures
import json
import uuid

import pytest
from django.test import Client

from mcpcore import calls
from mcpcore.choices import CallKind
from mcpcore.models import ApiToken, PermissionGrant, ToolCall
from tests.claude_code import PERMISSION_REQUEST, PRE_TOOL_USE, check_shape, payload, pending_of
from tests.live import our_server

HOOK = "/v1/hooks/claude-code"
DENY_RM = "deny Bash(command:rm -rf /*)"
RULES = f"{DENY_RM}\nallow Read\nask WebFetch\n"


# --- against a real console ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def c(module_console):
    console = module_console({"echo": our_server("echo.py")}, start=False)
    (console.home / "rules").write_text(RULES)
    return module_console.start(console)


@pytest.fixture(scope="module")
def agent(c):
    client = c.client_for("agent", "claude-laptop")
    yield client
    client.close()


def hold(pool, client, body: dict, wait: float | None = None) -> concurrent.futures.Future:
    params = {"wait": wait} if wait is not None else None
    return pool.submit(client.post, HOOK, json=body, params=params)


@pytest.mark.live
def test_it_holds_a_permission_request_in_the_inbox_and_answers_allow_once_approved(c, agent, pool):
    body = payload(PERMISSION_REQUEST)
    answer = hold(pool, agent, body)
    item = pending_of(c, body["session_id"])
    assert (item["kind"], item["tool_name"], item["tool_args"], item["cwd"]) == (
        "permission_prompt",
        "Bash",
        {"command": "rm -rf node_modules", "description": "Remove node_modules directory"},
        "/Users/...",
    )
    assert not answer.done()  # held while nobody decided
    assert c.reply(item["session_id"], item["id"], {"approve": True}).status_code == 200
    r = answer.result(30)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {
        "hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}
    }
    check_shape("PermissionRequest", r.json())
    record = c.get(f"/v1/mcp/calls/{item['call_id']}").json()
    assert (record["via"], record["status"], record["decided_by"]) == ("hook", "done", "token:tests-approver")


@pytest.mark.live
@pytest.mark.parametrize(
    "reply, decision",
    [
        ({"approve": False}, {"behavior": "deny", "message": "Skipped by user"}),
        (
            {"approve": False, "reason": "not on a shared machine"},
            {"behavior": "deny", "message": "Skipped by user. Reason: not on a shared machine"},
        ),
        ({"abort": True}, {"behavior": "deny", "message": "user stopped", "interrupt": True}),
    ],
    ids=["deny", "deny with a reason", "abort"],
)
def test_it_answers_a_permission_request_deny_and_abort(c, agent, pool, reply, decision):
    body = payload(PERMISSION_REQUEST)
    answer = hold(pool, agent, body)
    item = pending_of(c, body["session_id"])
    assert c.reply(item["session_id"], item["id"], reply).status_code == 200
    r = answer.result(30)
    assert r.json() == {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}
    check_shape("PermissionRequest", r.json())


@pytest.mark.live
def test_it_answers_an_empty_object_when_nobody_decides_in_time_and_cancels_the_prompt(c, agent):
    body = payload(PERMISSION_REQUEST)
    r = agent.post(HOOK, json=body, params={"wait": 1})
    assert r.status_code == 200 and r.json() == {}
    calls_of = c.get("/v1/mcp/calls/" + _last_call(c, body["session_id"])).json()
    assert calls_of["status"] == "cancelled"
    assert not [
        p for p in c.get("/v1/pending").json()["pending"] if p["session_id"] == f"cc:{body['session_id']}"
    ]


def _last_call(c, session: str) -> str:
    import sqlite3

    with sqlite3.connect(c.data / "db.sqlite3") as db:
        row = db.execute(
            "select id from mcpcore_toolcall where session_id = ? order by created_at desc limit 1",
            (f"cc:{session}",),
        ).fetchone()
    return str(uuid.UUID(row[0]))


@pytest.mark.live
def test_it_answers_a_deny_rule_at_once_without_asking_anyone(c, agent):
    body = payload(PERMISSION_REQUEST, tool_input={"command": "rm -rf /srv/data"})
    r = agent.post(HOOK, json=body, params={"wait": 600})  # answered at once, not held
    assert r.json() == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "Denied by rule: deny Bash(command:rm -rf /*)"},
        }
    }
    record = c.get("/v1/mcp/calls/" + _last_call(c, body["session_id"])).json()
    assert (record["status"], record["decision"], record["rule"]) == ("skipped", "rule", DENY_RM)


@pytest.mark.live
def test_it_answers_pre_tool_use_allow_deny_abort_and_ask(c, agent, pool):
    def run(reply: dict | None, wait: float | None = None) -> dict:
        body = payload(PRE_TOOL_USE)
        answer = hold(pool, agent, body, wait)
        if reply is not None:
            item = pending_of(c, body["session_id"])
            assert item["cwd"] == "/home/user/my-project"
            c.reply(item["session_id"], item["id"], reply)
        got = answer.result(30).json()
        check_shape("PreToolUse", got)
        return got

    def specific(decision: str, reason: str) -> dict:
        return {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }

    assert run({"approve": True}) == {
        "hookSpecificOutput": specific("allow", "Approved in the console by token:tests-approver")
    }
    assert run({"approve": False, "reason": "use the staging box"}) == {
        "hookSpecificOutput": specific("deny", "Skipped by user. Reason: use the staging box")
    }
    assert run({"abort": True}) == {
        "continue": False,
        "stopReason": "user stopped",
        "hookSpecificOutput": specific("deny", "user stopped"),
    }
    assert run(None, wait=1.5) == {
        "hookSpecificOutput": specific("ask", "no decision in the console within 1.5 s")
    }


@pytest.mark.live
def test_it_lets_an_allow_rule_and_an_ask_rule_decide_by_the_agents_tool_name(c, agent, pool):
    read = payload(PRE_TOOL_USE, tool_name="Read", tool_input={"file_path": "/etc/hosts"})
    got = agent.post(HOOK, json=read).json()
    assert got["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert got["hookSpecificOutput"]["permissionDecisionReason"] == "Approved in the console by rule"
    fetch = payload(PERMISSION_REQUEST, tool_name="WebFetch", tool_input={"url": "https://example.com"})
    assert agent.post(HOOK, json=fetch, params={"wait": 1}).json() == {}  # asked: nobody answered


@pytest.mark.live
def test_it_refuses_an_agent_token_replying_to_a_hook_prompt(c, agent, pool):
    body = payload(PERMISSION_REQUEST)
    answer = hold(pool, agent, body, wait=20)
    item = pending_of(c, body["session_id"])
    with c.client_for("agent") as other:
        r = other.post(f"/v1/session/{item['session_id']}/confirm/{item['id']}", json={"approve": True})
    assert (r.status_code, r.json()) == (403, {"error": "this token may not reply to confirmations"})
    r = agent.post(f"/v1/session/{item['session_id']}/confirm/{item['id']}", json={"approve": True})
    assert (r.status_code, r.json()) == (403, {"error": "a token may not reply to its own call"})
    c.reply(item["session_id"], item["id"], {"approve": False})
    assert answer.result(30).json()["hookSpecificOutput"]["decision"]["behavior"] == "deny"


# --- answers that come at once (Django test client) ---------------------------------------------


@pytest.fixture
def token(db) -> tuple[ApiToken, str]:
    return ApiToken.issue("claude", role="agent")


def post(token: str, body, query: str = "", raw: bytes | None = None):
    data = raw if raw is not None else json.dumps(body)
    return Client().post(
        HOOK + query, data=data, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"", "body must be a JSON object"),
        (b"not json", "body must be a JSON object"),
        (b"[1, 2]", "body must be a JSON object"),
        (b'"PermissionRequest"', "body must be a JSON object"),
        (b"{}", "unsupported hook event: "),
        (b'{"hook_event_name": "PostToolUse", "tool_name": 5}', "unsupported hook event: PostToolUse"),
        (b'{"hook_event_name": "PermissionRequest", "tool_input": []}', "tool_name is required"),
        (b'{"hook_event_name": "PreToolUse", "tool_name": "  "}', "tool_name is required"),
        (b'{"hook_event_name": "PreToolUse", "tool_name": "Bash"}', "tool_input must be an object"),
        (
            b'{"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": "ls"}',
            "tool_input must be an object",
        ),
    ],
)
def test_it_refuses_bad_input_in_the_order_of_the_spec(token, agenvoy_home, raw, message):
    r = post(token[1], None, raw=raw)
    assert (r.status_code, r.json()) == (400, {"error": message})
    assert not ToolCall.objects.exists()


@pytest.mark.parametrize("wait", ["0", "0.5", "601", "abc", "nan", "-3", "1e9"])
def test_it_refuses_a_wait_outside_1_to_600_seconds(token, agenvoy_home, wait):
    r = post(token[1], PERMISSION_REQUEST, f"?wait={wait}")
    assert (r.status_code, r.json()) == (400, {"error": "wait must be between 1 and 600 seconds"})
    assert not ToolCall.objects.exists()


def test_it_refuses_a_body_over_the_upload_limit_with_413(token, agenvoy_home, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = {**PERMISSION_REQUEST, "tool_input": {"command": "x" * 2000}}
    r = post(token[1], body)
    assert (r.status_code, r.json()) == (413, {"error": "request body too large"})
    assert not ToolCall.objects.exists()


def test_it_needs_a_token(db):
    r = Client().post(HOOK, data=json.dumps(PERMISSION_REQUEST), content_type="application/json")
    assert (r.status_code, r.json()) == (401, {"error": "authentication required"})


def test_it_refuses_more_pending_prompts_than_the_tokens_limit(token, agenvoy_home, settings):
    settings.AGENVOY_MAX_PENDING = 2
    for n in range(2):
        calls.create_permission_prompt(token[0], "Bash", {"command": f"ls {n}"}, f"cc:s{n}")
    r = post(token[1], PERMISSION_REQUEST)
    assert (r.status_code, r.json()) == (429, {"error": "too many pending confirmations for this token"})
    assert ToolCall.objects.filter(via="hook").count() == 0


def test_it_answers_allow_at_once_under_a_grant_of_the_token_and_records_via_hook(token, agenvoy_home):
    calls.grant(token[0], CallKind.PERMISSION_PROMPT, "Bash", "op", 3600)
    r = post(token[1], PERMISSION_REQUEST, "?wait=600")
    assert r.json() == {
        "hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}
    }
    row = ToolCall.objects.get()
    assert (row.via, row.session_id, row.cwd, row.decision, row.status) == (
        "hook",
        "cc:abc123",
        "/Users/...",
        "grant",
        "done",
    )
    assert PermissionGrant.objects.count() == 1


def test_it_applies_argument_rules_to_approval_prompt_on_the_agents_tool_name(token, agenvoy_home):
    (agenvoy_home / "rules").write_text("deny Bash(command:git push --force*)\nallow Read\nask WebFetch\n")
    denied = calls.create_permission_prompt(token[0], "Bash", {"command": "git push --force origin"}, "mcp:s")
    assert (denied.status, denied.result) == (
        "skipped",
        "Denied by rule: deny Bash(command:git push --force*)",
    )
    assert calls.permission_answer(denied) == {
        "behavior": "deny",
        "message": "Denied by rule: deny Bash(command:git push --force*)",
    }
    other = calls.create_permission_prompt(token[0], "Bash", {"command": "git push"}, "mcp:s")
    assert other.status == "pending"
    read = calls.create_permission_prompt(token[0], "Read", {"file_path": "/x"}, "mcp:s")
    assert (read.status, read.decision) == ("done", "rule")
    # An ask rule makes it wait even under a remembered grant of the token.
    calls.remember_permission(token[0], "WebFetch", "op")
    fetch = calls.create_permission_prompt(token[0], "WebFetch", {"url": "https://example.com"}, "mcp:s")
    assert (fetch.status, fetch.rule) == ("pending", "ask WebFetch")


@pytest.mark.parametrize("event", ["PermissionRequest", "PreToolUse"])
def test_it_answers_a_prompt_ended_another_way_as_a_deny_with_its_result(event):
    from mcpcore.api import claude_hooks

    for status, result in (
        ("expired", "Skipped by user. Reason: confirmation expired"),
        ("cancelled", "token revoked"),
    ):
        got = claude_hooks.answer(event, ToolCall(status=status, result=result), 55, timed_out=False)
        check_shape(event, got)
        specific = got["hookSpecificOutput"]
        if event == "PermissionRequest":
            assert specific["decision"] == {"behavior": "deny", "message": result}
        else:
            assert (specific["permissionDecision"], specific["permissionDecisionReason"]) == ("deny", result)
    assert (
        claude_hooks.answer("PreToolUse", ToolCall(status="cancelled"), 55, timed_out=True)[
            "hookSpecificOutput"
        ]["permissionDecisionReason"]
        == "no decision in the console within 55 s"
    )
