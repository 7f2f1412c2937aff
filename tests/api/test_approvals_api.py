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
    assert extend(tokens["agent"][1], question.id) == (403, {"error": "this token may not reply to confirmations"})
    status, body = extend(tokens["approver"][1], question.id)
    question.refresh_from_db()
    assert status == 200 and 895 < seconds_from_now(question.expires_at) <= 900
    assert body["expires_at"] == question.expires_at.isoformat().replace("+00:00", "Z")
    Question.objects.filter(id=question.id).update(status="declined")
    assert extend(tokens["approver"][1], question.id) == (410, {"error": "confirmation already resolved or expired"})
