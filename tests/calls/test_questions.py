"""Questions servers ask during a call (SPEC 20.4), through `mcpcore.calls.questions`: asked or
pending, answered in 12.1's order, expired, relayed, cancelled with their call, and waited on."""

import asyncio
import datetime

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.utils import timezone

from mcpcore import control
from mcpcore.calls import ReplyError, questions
from mcpcore.models import Question
from tests.rows import make_call

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "minLength": 2}}, "required": ["name"]}


def running(**fields):
    return make_call("running", started_at=timezone.now(), **fields)


def refusal(question_id, body, **kw) -> tuple[int, str]:
    with pytest.raises(ReplyError) as caught:
        questions.answer(question_id, body, "ann", **kw)
    return caught.value.status, caught.value.message


@pytest.mark.django_db
def test_it_puts_a_question_in_the_inbox_unless_the_calling_client_declared_its_mode(settings):
    settings.AGENVOY_CONFIRM_TIMEOUT = 60
    rest = running()
    q = questions.ask(rest.id, "every", "form", "Your name?", SCHEMA)
    assert q.status == "pending" and q.schema == SCHEMA
    assert 59 <= (q.expires_at - q.created_at).total_seconds() <= 60
    form_client = running(via="mcp", client_asks="form")
    assert questions.ask(form_client.id, "every", "form", "Name?", SCHEMA).status == "asked"
    # A client that declared form only cannot open a URL: a person is asked.
    url = questions.ask(
        form_client.id, "every", "url", "Sign in", url="https://idp.example/x", elicitation_id="e1"
    )
    assert url.status == "pending" and url.schema is None and url.elicitation_id == "e1"
    both = running(via="mcp", client_asks="form,url")
    assert questions.ask(both.id, "every", "url", "Sign in", url="https://idp.example/x").status == "asked"


@pytest.mark.django_db
def test_it_lists_a_pending_question_as_a_pending_item():
    call = running(arguments={"a": 1})
    q = questions.ask(call.id, "every", "form", "Your name?", SCHEMA)
    item = questions.to_pending(questions.get(q.id))
    assert item == {
        "id": str(q.id),
        "kind": "question",
        "session_id": "sess-1",
        "tool_name": "mcp__every__echo",
        "tool_args": {"a": 1},
        "created_at": item["created_at"],
        "expires_at": item["expires_at"],
        "call_id": str(call.id),
        "server": "every",
        "message": "Your name?",
        "for": None,  # its call's group (SPEC 24.1)
        "schema": SCHEMA,
    }
    u = questions.ask(call.id, "every", "url", "Sign in", url="https://idp.example/x")
    item = questions.to_pending(questions.get(u.id))
    assert item["url"] == "https://idp.example/x" and "schema" not in item
    assert [p.id for p in questions.pending_for()] == [q.id, u.id]
    assert questions.pending_for(token_id=12345) == []


@pytest.mark.django_db
def test_it_answers_in_the_order_of_the_rights():
    q = questions.ask(running().id, "every", "form", "Your name?", SCHEMA)
    assert refusal("nope", {"action": "accept"}) == (404, "confirmation not found")
    assert refusal("7f1b7d3e-0000-4000-8000-000000000000", {"action": "accept"}) == (
        404,
        "confirmation not found",
    )

    def deny(question):
        raise ReplyError("this token may not reply to confirmations", 403)

    # The rights come before the body is looked at.
    assert refusal(q.id, {"action": "nonsense"}, authorize=deny) == (
        403,
        "this token may not reply to confirmations",
    )
    assert refusal(q.id, {"action": "accept", "content": {"name": "A"}}) == (
        400,
        "invalid answer: name: must be at least 2 characters",
    )
    q.refresh_from_db()
    assert q.status == "pending" and q.answer is None and q.answered_by == ""  # nothing stored
    done = questions.answer(q.id, {"action": "accept", "content": {"name": "Ann"}}, "ann")
    assert (done.status, done.answer, done.answered_by) == (
        "answered",
        {"action": "accept", "content": {"name": "Ann"}},
        "ann",
    )
    assert questions.result_for_server(done) == {"action": "accept", "content": {"name": "Ann"}}
    # Once ended: 410 before the body is checked.
    assert refusal(q.id, {"action": "bad"}) == (410, "confirmation already resolved or expired")
    assert refusal(q.id, {"action": "bad"}, authorize=deny)[0] == 403


@pytest.mark.django_db
def test_it_ends_a_question_declined_or_cancelled():
    call = running()
    a = questions.ask(call.id, "every", "form", "Your name?", SCHEMA)
    b = questions.ask(call.id, "every", "url", "Sign in", url="https://idp.example/x")
    declined = questions.answer(a.id, {"action": "decline", "content": {"name": 1}}, "ann")
    assert declined.status == "declined" and questions.result_for_server(declined) == {"action": "decline"}
    # URL mode: Done is an accept without content.
    done = questions.answer(b.id, {"action": "accept"}, "bo")
    assert done.status == "answered" and questions.result_for_server(done) == {"action": "accept"}
    c = questions.ask(call.id, "every", "form", "Again?", SCHEMA)
    cancelled = questions.answer(c.id, {"action": "cancel"}, "ann")
    assert cancelled.status == "cancelled" and questions.result_for_server(cancelled) == {"action": "cancel"}


@pytest.mark.django_db
def test_it_expires_a_question_past_its_time_with_a_410():
    q = questions.ask(running().id, "every", "form", "Your name?", SCHEMA)
    Question.objects.filter(id=q.id).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    assert refusal(q.id, {"action": "accept", "content": {"name": "Ann"}}) == (
        410,
        "confirmation already resolved or expired",
    )
    q.refresh_from_db()
    assert (q.status, q.answer, q.answered_by) == ("expired", {"action": "cancel"}, "timeout")
    assert questions.result_for_server(q) == {"action": "cancel"}
    assert questions.pending_for() == []


@pytest.mark.django_db
def test_it_takes_the_clients_own_answer_to_a_relayed_question():
    call = running(via="mcp", client_asks="form,url")
    q = questions.ask(call.id, "every", "form", "Your name?", SCHEMA)
    # An asked question is no inbox item: nobody else answers it.
    assert refusal(q.id, {"action": "accept", "content": {"name": "Ann"}})[0] == 404
    got = questions.relayed(q.id, {"action": "accept", "content": {"name": "Zed"}})
    assert (got.status, got.answered_by) == ("answered", "client")
    assert questions.result_for_server(got) == {"action": "accept", "content": {"name": "Zed"}}
    again = questions.relayed(q.id, {"action": "decline"})
    assert again.status == "answered"  # the first answer stands
    u = questions.ask(call.id, "every", "url", "Sign in", url="https://idp.example/x")
    assert questions.result_for_server(questions.relayed(u.id, {"action": "weird"})) == {"action": "cancel"}


@pytest.mark.django_db
def test_it_cancels_the_open_questions_of_an_ended_call():
    call = running(via="mcp", client_asks="form")
    asked = questions.ask(call.id, "every", "form", "Your name?", SCHEMA)
    pending = questions.ask(call.id, "every", "url", "Sign in", url="https://idp.example/x")
    other = questions.ask(running().id, "every", "form", "Other?", SCHEMA)
    assert questions.cancel_for_call(call.id) == 2
    assert {q.status for q in questions.of_call(call.id)} == {"cancelled"}
    assert [q.id for q in questions.pending_for()] == [other.id]
    assert questions.result_for_server(Question.objects.get(id=asked.id)) == {"action": "cancel"}
    assert Question.objects.get(id=pending.id).answer == {"action": "cancel"}
    assert questions.cancel_for_call(call.id) == 0


async def _next(channel: str) -> dict:
    return await asyncio.wait_for(get_channel_layer().receive(channel), 5)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_tells_the_call_and_the_inbox_and_wakes_the_waiter():
    call = await sync_to_async(running)()
    layer = get_channel_layer()
    inbox, group = await layer.new_channel(), await layer.new_channel()
    await layer.group_add(control.PENDING, inbox)
    await layer.group_add(control.call_group(str(call.id)), group)
    q = await sync_to_async(questions.ask)(call.id, "every", "form", "Your name?", SCHEMA)
    assert await _next(group) == {"type": "call.question", "question_id": str(q.id), "call_id": str(call.id)}
    assert (await _next(inbox))["type"] == "pending.changed"
    waiter = asyncio.ensure_future(questions.wait_answer(q, float("inf")))
    still = await questions.wait_answer(q, 0.05)
    assert still.status == "pending" and not waiter.done()
    await sync_to_async(questions.answer)(q.id, {"action": "accept", "content": {"name": "Ann"}}, "ann")
    assert (await _next(group))["type"] == "question.answered"
    got = await asyncio.wait_for(waiter, 5)
    assert got.status == "answered" and questions.result_for_server(got)["content"] == {"name": "Ann"}


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_expires_a_pending_question_while_waiting():
    call = await sync_to_async(running)()
    q = await sync_to_async(questions.ask)(call.id, "every", "form", "Your name?", SCHEMA)
    soon = timezone.now() + datetime.timedelta(milliseconds=300)
    await Question.objects.filter(id=q.id).aupdate(expires_at=soon)
    got = await asyncio.wait_for(questions.wait_answer(q, float("inf")), 5)
    assert got.status == "expired" and questions.result_for_server(got) == {"action": "cancel"}


@pytest.mark.django_db
def test_it_sweeps_out_questions_past_their_time_or_of_calls_that_ended():
    live_call = running()
    due = questions.ask(live_call.id, "every", "form", "Late?", SCHEMA)
    waiting = questions.ask(live_call.id, "every", "form", "Still?", SCHEMA)
    Question.objects.filter(id=due.id).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    gone = running(via="mcp", client_asks="form")
    orphans = [
        questions.ask(gone.id, "every", "form", "Relayed?", SCHEMA),
        questions.ask(gone.id, "every", "url", "Open?", url="https://idp.example/x"),
    ]
    gone.status = "interrupted"
    gone.save(update_fields=["status"])
    assert questions.sweep() == 3
    assert Question.objects.get(id=due.id).status == "expired"
    assert Question.objects.get(id=waiting.id).status == "pending"
    assert {Question.objects.get(id=q.id).status for q in orphans} == {"cancelled"}
    assert questions.sweep() == 0
