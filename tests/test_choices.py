"""The vocabulary (`mcpcore.choices`): its values are the contract's words (SPEC 5, 7, 12, 13,
15), each status is live or ended and never both, and the models store nothing else."""

import pytest

from mcpcore import choices
from mcpcore.models import ApiToken, Delivery, NotificationTarget, Question, Server, ToolCall


def test_it_keeps_the_words_of_the_contract():
    assert choices.ServerState.values == [
        "connected",
        "connecting",
        "error",
        "disabled",
        "needs_authorization",
    ]
    assert choices.ServerState.NEEDS_AUTHORIZATION.label == "Needs authorization"
    assert choices.GrantType.values == ["authorization_code", "client_credentials"]
    assert choices.Transport.values == ["stdio", "streamable-http", "sse"]
    assert choices.CallStatus.values == [
        "pending",
        "running",
        "done",
        "error",
        "skipped",
        "expired",
        "aborted",
        "cancelled",
        "interrupted",
    ]
    assert choices.CallKind.values == ["tool_confirm", "permission_prompt", "prompt", "resource"]
    assert [choices.history_kind(k) for k in choices.CallKind.values] == [
        "tool",
        "permission_prompt",
        "prompt",
        "resource",
    ]
    assert choices.Mode.values == ["confirm", "auto"]
    assert choices.RuleDecision.values == ["deny", "ask", "allow", "limit"]  # limit: SPEC 25.1
    assert choices.Via.values == ["rest", "mcp", "hook"]
    assert choices.TokenRole.values == ["agent", "approver", "admin"]
    assert choices.PersonRole.values == ["admin", "approver", "viewer"]  # SPEC 23.1
    assert choices.TargetKind.values == ["webhook", "ntfy"]
    assert choices.DeliveryStatus.values == ["pending", "sent", "failed"]
    # SPEC 20.4: how a server asks, and where its question is.
    assert choices.QuestionMode.values == ["form", "url"]
    assert choices.QuestionStatus.values == [
        "asked",
        "pending",
        "answered",
        "declined",
        "cancelled",
        "expired",
    ]


def test_it_tells_open_questions_from_ended_ones_and_each_action_its_end():
    from mcpcore.calls import questions

    assert set(questions.OPEN) == {"asked", "pending"}
    assert questions.ENDED_BY == {"accept": "answered", "decline": "declined", "cancel": "cancelled"}
    assert set(questions.OPEN) | set(questions.ENDED_BY.values()) | {"expired"} == set(
        choices.QuestionStatus.values
    )


def test_it_splits_every_call_status_into_live_or_ended():
    assert choices.CALL_LIVE == {"pending", "running"}
    assert choices.CALL_LIVE.isdisjoint(choices.CALL_ENDED)
    assert choices.CALL_LIVE | choices.CALL_ENDED == set(choices.CallStatus.values)
    # Plain strings: they go into SQL parameters and JSON as they are.
    assert all(type(s) is str for s in choices.CALL_LIVE | choices.CALL_ENDED)


@pytest.mark.parametrize(
    "model, field, vocabulary",
    [
        (Server, "state", choices.ServerState),
        (Server, "transport", choices.Transport),
        (ToolCall, "status", choices.CallStatus),
        (ToolCall, "kind", choices.CallKind),
        (ToolCall, "mode", choices.Mode),
        (ToolCall, "decision", choices.CallDecision),
        (ToolCall, "via", choices.Via),
        (NotificationTarget, "kind", choices.TargetKind),
        (Delivery, "status", choices.DeliveryStatus),
        (ApiToken, "role", choices.TokenRole),
        (Question, "mode", choices.QuestionMode),
        (Question, "status", choices.QuestionStatus),
    ],
)
def test_it_gives_each_model_field_its_vocabulary(model, field, vocabulary):
    assert model._meta.get_field(field).choices == vocabulary.choices


def test_it_renders_a_member_as_its_value():
    member = choices.CallStatus.DONE
    assert (str(member), f"{member}", member == "done") == ("done", "done", True)
    assert {"done": 1}[member] == 1
