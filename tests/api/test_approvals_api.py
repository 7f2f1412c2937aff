"""SPEC 24.4-24.6 over /v1 with the Django test client (no MCP server runs): extending a pending
confirmation or question, and the refusals of SPEC 12.1 in their order on the new routes."""

import datetime
import uuid

import pytest
from django.utils import timezone

from mcpcore.calls import questions
from mcpcore.models import ApiToken, Question, ToolCall
from tests.api.test_roles import ROLES, make_call, request


@pytest.fixture
def tokens(db) -> dict[str, tuple[ApiToken, str]]:
    made = {role: ApiToken.issue(f"t-{role}", role=role) for role in ROLES}
    return made | {"other": ApiToken.issue("other", role="agent")}


def seconds_from_now(when) -> float:
    return (when - timezone.now()).total_seconds()


# --- Extend (SPEC 24.4) ----------------------------------------------------------------------------


def extend(secret: str, item_id) -> tuple[int, dict]:
    r = request(secret, "POST", f"/v1/pending/{item_id}/extend")
    return r.status_code, r.json()


def test_it_extends_a_pending_confirmation_to_now_plus_the_timeout(tokens, settings):
    settings.AGENVOY_CONFIRM_TIMEOUT = 600
    call = make_call(tokens["other"][0])
    status, body = extend(tokens["approver"][1], call.confirm_id)
    assert status == 200 and body["ok"] is True
    call.refresh_from_db()
    assert body == {"ok": True, "expires_at": call.expires_at.isoformat().replace("+00:00", "Z")}
    assert 595 < seconds_from_now(call.expires_at) <= 600 and call.status == "pending"
    listed = request(tokens["admin"][1], "GET", "/v1/pending").json()["pending"]
    assert listed[0]["expires_at"] == body["expires_at"]


def test_it_refuses_to_extend_past_24_hours_after_the_item_was_made(tokens, settings):
    settings.AGENVOY_CONFIRM_TIMEOUT = 300
    made = timezone.now() - datetime.timedelta(hours=23, minutes=56)
    call = make_call(tokens["other"][0])
    ToolCall.objects.filter(id=call.id).update(created_at=made)
    before = ToolCall.objects.get(id=call.id).expires_at
    assert extend(tokens["admin"][1], call.confirm_id) == (400, {"error": "cannot extend past 24 hours"})
    assert ToolCall.objects.get(id=call.id).expires_at == before
    # Four minutes under the cap is still an extension.
    ToolCall.objects.filter(id=call.id).update(created_at=made + datetime.timedelta(minutes=1, seconds=5))
    assert extend(tokens["admin"][1], call.confirm_id)[0] == 200


def test_it_answers_an_extend_in_the_order_of_the_spec(tokens):
    agent, approver = tokens["agent"][1], tokens["approver"][1]
    theirs = make_call(tokens["other"][0])
    decided = make_call(tokens["other"][0], status="skipped")
    own_decided = make_call(tokens["agent"][0], status="skipped")
    past = make_call(tokens["other"][0])
    ToolCall.objects.filter(id=past.id).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    cases = [
        (agent, uuid.uuid4(), 404, "confirmation not found"),
        (agent, "not-a-uuid", 404, "confirmation not found"),
        (agent, own_decided.confirm_id, 403, "a token may not reply to its own call"),
        (agent, decided.confirm_id, 403, "this token may not reply to confirmations"),
        (agent, theirs.confirm_id, 403, "this token may not reply to confirmations"),
        (approver, decided.confirm_id, 410, "confirmation already resolved or expired"),
        (approver, past.confirm_id, 410, "confirmation already resolved or expired"),
    ]
    for secret, item_id, status, message in cases:
        assert extend(secret, item_id) == (status, {"error": message}), item_id
    past.refresh_from_db()
    assert past.status == "expired"
    theirs.refresh_from_db()
    assert theirs.status == "pending"


def test_it_extends_a_servers_question_and_refuses_as_an_answer_is(tokens, settings):
    settings.AGENVOY_CONFIRM_TIMEOUT = 900
    call = make_call(tokens["other"][0], status="running")
    question = questions.ask(call.id, "srv", "form", "Go on?", {"type": "object", "properties": {}})
    own = questions.ask(make_call(tokens["agent"][0], status="running").id, "srv", "form", "Mine?", {})
    assert extend(tokens["agent"][1], own.id) == (403, {"error": "a token may not reply to its own call"})
    assert extend(tokens["agent"][1], question.id) == (
        403,
        {"error": "this token may not reply to confirmations"},
    )
    status, body = extend(tokens["approver"][1], question.id)
    question.refresh_from_db()
    assert status == 200 and 895 < seconds_from_now(question.expires_at) <= 900
    assert body["expires_at"] == question.expires_at.isoformat().replace("+00:00", "Z")
    Question.objects.filter(id=question.id).update(status="declined")
    assert extend(tokens["approver"][1], question.id) == (
        410,
        {"error": "confirmation already resolved or expired"},
    )


# --- Edit and approve (SPEC 24.5) --------------------------------------------------------------


@pytest.fixture
def echo_call(tokens, agenvoy_home):
    """A pending call of `mcp__every__echo` (its schema: `message` string, required; `count`
    integer; `loud` boolean) made by the `other` token."""
    from tests.rows import add_tools, write_servers

    write_servers(agenvoy_home, {"every": {"command": "node", "args": ["index.js"]}})
    add_tools("every", ["echo"])
    call = make_call(tokens["other"][0])
    ToolCall.objects.filter(id=call.id).update(
        tool_name="mcp__every__echo", server_name="every", tool="echo", arguments={"message": "hi"}
    )
    call.refresh_from_db()
    return call


def edit(secret: str, call: ToolCall, body: dict):
    return request(secret, "POST", f"/v1/session/{call.session_id}/confirm/{call.confirm_id}", body)


def test_it_approves_with_changed_arguments_and_keeps_what_was_asked(tokens, echo_call):
    r = edit(tokens["approver"][1], echo_call, {"approve": True, "arguments": {"message": "bye", "count": 2}})
    assert (r.status_code, r.json()) == (200, {"ok": True})
    echo_call.refresh_from_db()
    assert echo_call.status == "running" and echo_call.decided_by == "token:t-approver"
    assert echo_call.arguments == {"message": "bye", "count": 2}
    assert echo_call.requested_arguments == {"message": "hi"} and echo_call.edited_by == "token:t-approver"
    record = request(tokens["admin"][1], "GET", f"/v1/mcp/calls/{echo_call.id}").json()
    assert record["arguments"] == {"message": "bye", "count": 2}
    assert record["requested_arguments"] == {"message": "hi"} and record["edited_by"] == "token:t-approver"


def test_it_approves_unchanged_arguments_as_a_plain_approval(tokens, echo_call):
    assert (
        edit(tokens["approver"][1], echo_call, {"approve": True, "arguments": {"message": "hi"}}).status_code
        == 200
    )
    echo_call.refresh_from_db()
    assert (
        echo_call.status == "running" and echo_call.edited_by == "" and echo_call.requested_arguments is None
    )


@pytest.mark.parametrize(
    "arguments, why",
    [
        ({"message": 3}, "message: 3 is not of type 'string'"),
        ({"count": 1}, "'message' is a required property"),
        ({"message": "x", "count": "two"}, "count: 'two' is not of type 'integer'"),
    ],
)
def test_it_refuses_arguments_the_tools_schema_does_not_take_and_stays_pending(
    tokens, echo_call, arguments, why
):
    r = edit(tokens["approver"][1], echo_call, {"approve": True, "arguments": arguments})
    assert (r.status_code, r.json()) == (400, {"error": f"arguments do not match the tool's schema: {why}"})
    echo_call.refresh_from_db()
    assert (
        echo_call.status == "pending"
        and echo_call.arguments == {"message": "hi"}
        and echo_call.edited_by == ""
    )


def test_it_checks_arguments_with_the_draft_the_tools_schema_declares(tokens, echo_call):
    from mcpcore.models import Tool

    # Draft 4's boolean exclusiveMaximum: 5 is out; a 2020-12 validator would not read it so.
    Tool.objects.filter(registered_name="mcp__every__echo").update(
        input_schema={
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "object",
            "properties": {"count": {"type": "integer", "maximum": 5, "exclusiveMaximum": True}},
        }
    )
    r = edit(tokens["approver"][1], echo_call, {"approve": True, "arguments": {"count": 5}})
    assert (r.status_code, r.json()) == (
        400,
        {
            "error": "arguments do not match the tool's schema: count: 5 is greater than or equal to the maximum of 5"
        },
    )
    assert (
        edit(tokens["approver"][1], echo_call, {"approve": True, "arguments": {"count": 4}}).status_code
        == 200
    )


def test_it_refuses_changed_arguments_a_deny_rule_now_matches(tokens, echo_call, agenvoy_home):
    (agenvoy_home / "rules").write_text("deny mcp__every__echo(message:rm *)\n")
    r = edit(tokens["approver"][1], echo_call, {"approve": True, "arguments": {"message": "rm -rf /"}})
    assert (r.status_code, r.json()) == (
        400,
        {"error": "Denied by rule: deny mcp__every__echo(message:rm *)"},
    )
    echo_call.refresh_from_db()
    assert echo_call.status == "pending" and echo_call.arguments == {"message": "hi"}


@pytest.mark.parametrize(
    "body, message",
    [
        ({"approve": True, "arguments": ["x"]}, "arguments must be a JSON object"),
        ({"approve": False, "arguments": {"message": "x"}}, "arguments needs approve"),
    ],
)
def test_it_refuses_a_malformed_edit(tokens, echo_call, body, message):
    r = edit(tokens["approver"][1], echo_call, body)
    assert (r.status_code, r.json()) == (400, {"error": message})
    echo_call.refresh_from_db()
    assert echo_call.status == "pending"


def test_it_refuses_changed_arguments_of_what_is_not_a_tool_call(tokens, echo_call):
    ToolCall.objects.filter(id=echo_call.id).update(kind="prompt")
    r = edit(tokens["approver"][1], echo_call, {"approve": True, "arguments": {"message": "x"}})
    assert (r.status_code, r.json()) == (400, {"error": "only a tool call's arguments can be changed"})


def test_it_describes_the_reply_bodys_arguments_in_the_openapi_document(client):
    reply = client.get("/v1/openapi.json").json()["components"]["schemas"]["Reply"]["properties"]
    assert "arguments" in reply and "Edit and approve" in reply["arguments"]["description"]


# --- Many at once (SPEC 24.6) --------------------------------------------------------------------


def decide(secret: str, body: dict) -> tuple[int, dict]:
    r = request(secret, "POST", "/v1/pending/decide", body)
    return r.status_code, r.json()


def test_it_decides_many_with_each_ids_own_answer(tokens):
    theirs = [make_call(tokens["other"][0], session_id=f"s-{i}") for i in range(3)]
    own = make_call(tokens["approver"][0])
    decided = make_call(tokens["other"][0], status="skipped")
    past = make_call(tokens["other"][0])
    ToolCall.objects.filter(id=past.id).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    unknown = str(uuid.uuid4())
    ids = [str(c.confirm_id) for c in (*theirs, own, decided, past)] + [unknown, "junk"]
    status, body = decide(tokens["approver"][1], {"ids": ids, "approve": True})
    assert status == 200
    assert body == {
        "results": {
            **{str(c.confirm_id): "ok" for c in theirs},
            str(own.confirm_id): "a token may not reply to its own call",
            str(decided.confirm_id): "confirmation already resolved or expired",
            str(past.confirm_id): "confirmation already resolved or expired",
            unknown: "confirmation not found",
            "junk": "confirmation not found",
        }
    }
    for call in theirs:
        call.refresh_from_db()
        assert (call.status, call.decision, call.decided_by) == ("running", "approve", "token:t-approver")
    own.refresh_from_db()
    past.refresh_from_db()
    assert own.status == "pending" and past.status == "expired"


def test_it_denies_many_with_one_reason(tokens):
    calls_ = [make_call(tokens["other"][0]) for _ in range(4)]
    status, body = decide(
        tokens["admin"][1],
        {"ids": [str(c.confirm_id) for c in calls_], "approve": False, "reason": "a flood"},
    )
    assert status == 200 and set(body["results"].values()) == {"ok"}
    for call in calls_:
        call.refresh_from_db()
        assert (call.status, call.result, call.decided_by) == (
            "skipped",
            "Skipped by user. Reason: a flood",
            "token:t-admin",
        )


def test_it_answers_an_agents_batch_as_each_reply_would_be_answered(tokens):
    mine, theirs = make_call(tokens["agent"][0]), make_call(tokens["other"][0])
    unknown = str(uuid.uuid4())
    ids = [str(mine.confirm_id), str(theirs.confirm_id), unknown]
    assert decide(tokens["agent"][1], {"ids": ids, "approve": True}) == (
        200,
        {
            "results": {
                str(mine.confirm_id): "a token may not reply to its own call",
                str(theirs.confirm_id): "this token may not reply to confirmations",
                unknown: "confirmation not found",
            }
        },
    )
    assert set(ToolCall.objects.values_list("status", flat=True)) == {"pending"}


@pytest.mark.parametrize(
    "body, message",
    [
        ({"ids": [str(uuid.uuid4()) for _ in range(501)], "approve": True}, "at most 500 ids"),
        ({"ids": "abc", "approve": True}, "ids must be a list of ids"),
        ({"approve": True}, "ids must be a list of ids"),
        ({"ids": [1, 2], "approve": True}, "ids must be a list of ids"),
        ({"ids": []}, "approve must be true or false"),
        ({"ids": [], "approve": "yes"}, "approve must be true or false"),
        ({"ids": [], "approve": False, "reason": 3}, "reason must be a string"),
    ],
)
def test_it_refuses_a_malformed_batch(tokens, body, message):
    assert decide(tokens["approver"][1], body) == (400, {"error": message})


def test_it_decides_500_in_a_few_queries(tokens, django_assert_max_num_queries):
    now = timezone.now()
    ToolCall.objects.bulk_create(
        ToolCall(
            session_id="s",
            tool_name="mcp__srv__tool",
            server_name="srv",
            tool="tool",
            token=tokens["other"][0],
            confirm_id=uuid.uuid4(),
            created_at=now,
            expires_at=now + datetime.timedelta(minutes=5),
        )
        for _ in range(500)
    )
    ids = [str(cid) for cid in ToolCall.objects.values_list("confirm_id", flat=True)]
    for approve in (False, True):
        if approve:
            ToolCall.objects.update(status="pending", decision="", decided_by="", result="")
        with django_assert_max_num_queries(12):
            status, body = decide(tokens["approver"][1], {"ids": ids, "approve": approve})
        assert status == 200 and list(body["results"].values()) == ["ok"] * 500
    assert ToolCall.objects.filter(status="running").count() == 500
