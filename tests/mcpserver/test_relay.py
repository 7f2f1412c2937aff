"""The console's own `requestState` for questions relayed to 2026-07-28 clients (SPEC 20.4,
`mcpserver.relay`): signed and bound to the call, the question, the token and 10 minutes; and
the elicitation modes a client's capabilities declare (`ToolCall.client_asks`)."""

import time
import uuid

import pytest
from django.test import override_settings
from mcp_types import ClientCapabilities

from mcpcore.mcpserver import relay

CALL, QUESTION = uuid.uuid4(), uuid.uuid4()


def test_it_reads_back_the_call_question_and_token_it_signed():
    state = relay.sign(CALL, QUESTION, 7)
    assert relay.verify(state, 7) == relay.State(CALL, QUESTION, 7)


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s[:-1] + ("A" if s[-1] != "A" else "B"),  # the MAC altered
        lambda s: s.replace(CALL.hex, uuid.uuid4().hex),  # another call
        lambda s: s.replace(QUESTION.hex, uuid.uuid4().hex),  # another question
        lambda s: s.rsplit(".", 2)[0] + ".9999999999." + s.rsplit(".", 1)[1],  # a later expiry
        lambda s: s[:40],  # cut short
        lambda s: "",
        lambda s: s + ".x",
    ],
)
def test_it_refuses_a_state_it_did_not_make_as_it_is(change):
    with pytest.raises(relay.StateError, match="invalid requestState"):
        relay.verify(change(relay.sign(CALL, QUESTION, 7)), 7)


def test_it_refuses_a_state_made_with_another_secret():
    with override_settings(SECRET_KEY="another console"):
        state = relay.sign(CALL, QUESTION, 7)
    with pytest.raises(relay.StateError, match="invalid requestState"):
        relay.verify(state, 7)


def test_it_refuses_a_state_of_another_token():
    with pytest.raises(relay.StateError, match="another client"):
        relay.verify(relay.sign(CALL, QUESTION, 7), 8)


def test_it_refuses_a_state_past_its_10_minutes():
    now = time.time()
    state = relay.sign(CALL, QUESTION, 7, now=now)
    assert relay.verify(state, 7, now=now + relay.LIFETIME - 1).call_id == CALL
    with pytest.raises(relay.StateError, match="expired"):
        relay.verify(state, 7, now=now + relay.LIFETIME)


@pytest.mark.parametrize(
    "capabilities, asks",
    [
        ({}, ""),
        ({"elicitation": {}}, "form"),  # Claude Code: form only
        ({"elicitation": {"form": {}}}, "form"),
        ({"elicitation": {"url": {}}}, "url"),
        ({"elicitation": {"form": {}, "url": {}}}, "form,url"),  # VS Code, the SDKs
        ({"sampling": {}}, ""),
    ],
)
def test_it_records_the_elicitation_modes_a_client_declared(capabilities, asks):
    assert relay.asks_of(ClientCapabilities.model_validate(capabilities)) == asks
    assert relay.asks_of(None) == ""
