"""Questions servers ask during a call, seen from the supervisor (SPEC 20.4): the console
declares form and URL elicitation in both eras, each question of a `/v1` call becomes an item
in the inbox, the person's answer (or the expiry's cancel) reaches the server, two questions
of one call are asked in order, the call's timeout does not run while a person is asked, and
sampling and roots get -32601. The server is `tests/servers/asking.py` over stdio, speaking
2026-07-28 (`InputRequiredResult` rounds) or only 2025-11-25 (`elicitation/create`); the
supervisor is the console's own, in this process."""

import contextlib
import json

import anyio
import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.utils import timezone

from mcpcore import control, db
from mcpcore.calls import questions
from mcpcore.choices import QuestionStatus, Via
from mcpcore.models import Question, ToolCall
from mcpcore.supervisor import Supervisor
from mcpcore.supervisor.session import ServerSession
from tests.live import await_until, our_server
from tests.rows import claimed_call, write_servers

NAME = "asking"
ERAS = [pytest.param(False, id="2026-07-28"), pytest.param(True, id="2025-11-25")]

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@contextlib.asynccontextmanager
async def holding(agenvoy_home, legacy: bool):
    """A supervisor (not started: no loops, no leases) holding the session of the asking
    server, connected when this yields."""
    env = {"ASKING_LEGACY": "1"} if legacy else None
    await sync_to_async(write_servers)(agenvoy_home, {NAME: our_server("asking.py", env=env)})
    sup = Supervisor(exclusive=False, name="w1")
    session = sup.sessions[NAME] = ServerSession(sup, NAME)
    session.start()
    try:
        with anyio.fail_after(30):
            await session.ready.wait()
        assert session.protocol == ("2025-11-25" if legacy else "2026-07-28")
        yield sup
    finally:
        await sup.stop()


async def start(sup: Supervisor, tool: str, arguments: dict, via: str = Via.REST):
    """Record a call claimed by `sup` and start running it there; the call and its task."""
    call = await claimed_call(sup.name, NAME, tool, arguments, via=via)
    return call, sup.run(call)


async def open_question(call: ToolCall, count: int = 1) -> Question:
    """The call's `count`-th question, once it is open."""

    def nth():
        rows = questions.of_call(call.id)
        return rows[count - 1] if len(rows) >= count and rows[count - 1].status in questions.OPEN else None

    return await await_until(nth, 20, what=f"question {count} of the call")


async def answers_of(task) -> list:
    with anyio.fail_after(30):
        stored = await task
    assert stored is not None and stored.status == "done", (stored.status, stored.result)
    return json.loads(stored.result)["answers"]


@pytest.mark.parametrize("legacy", ERAS)
async def test_it_puts_a_v1_calls_form_question_in_the_inbox_and_sends_the_answer_upstream(
    agenvoy_home, legacy
):
    async with holding(agenvoy_home, legacy) as sup:
        call, task = await start(sup, "ask_form", {"message": "Which name?"})
        question = await open_question(call)
        assert (question.status, question.mode, question.message) == ("pending", "form", "Which name?")
        assert question.schema["required"] == ["name"] and question.expires_at is not None
        item = await db.run(lambda: questions.to_pending(questions.get(question.id)))
        assert item["kind"] == "question" and item["server"] == NAME and item["call_id"] == str(call.id)
        await db.run(questions.answer, question.id, {"action": "accept", "content": {"name": "Ada"}}, "op")
        got = await answers_of(task)
    assert got == [{"action": "accept", "content": {"name": "Ada"}}]


@pytest.mark.parametrize("legacy", ERAS)
async def test_it_asks_a_url_question_with_its_url_and_passes_on_done(agenvoy_home, legacy):
    async with holding(agenvoy_home, legacy) as sup:
        call, task = await start(sup, "ask_url", {"url": "https://login.example.com/start?x=1"})
        question = await open_question(call)
        assert (question.mode, question.url, question.schema) == (
            "url",
            "https://login.example.com/start?x=1",
            None,
        )
        assert bool(question.elicitation_id) == legacy  # 2026-07-28 has no elicitation ids
        await db.run(questions.answer, question.id, {"action": "accept"}, "op")
        got = await answers_of(task)
    assert got == [{"action": "accept"}]


@pytest.mark.parametrize("tool", ["ask_twice", "ask_both"])
@pytest.mark.parametrize("legacy", ERAS)
async def test_it_asks_two_questions_of_one_call_in_order(agenvoy_home, legacy, tool):
    """`ask_both` puts both in one `InputRequiredResult` on 2026-07-28: still one at a time."""
    async with holding(agenvoy_home, legacy) as sup:
        call, task = await start(sup, tool, {})
        first = await open_question(call, 1)
        assert first.message == "first"
        assert len(await db.run(questions.of_call, call.id)) == 1  # the second waits for the first
        await db.run(questions.answer, first.id, {"action": "decline"}, "op")
        second = await open_question(call, 2)
        assert second.message == "second"
        await db.run(questions.answer, second.id, {"action": "accept", "content": {"sure": True}}, "op")
        got = await answers_of(task)
    assert got == [{"action": "decline"}, {"action": "accept", "content": {"sure": True}}]


@pytest.mark.parametrize("legacy", ERAS)
async def test_it_sends_cancel_when_the_question_expires(agenvoy_home, legacy, settings):
    settings.AGENVOY_CONFIRM_TIMEOUT = 1
    async with holding(agenvoy_home, legacy) as sup:
        call, task = await start(sup, "ask_form", {"message": "too late"})
        question = await open_question(call)
        got = await answers_of(task)
        question = await db.run(Question.objects.get, id=question.id)
    assert got == [{"action": "cancel"}]
    assert question.status == QuestionStatus.EXPIRED


@pytest.mark.parametrize("legacy", ERAS)
async def test_it_does_not_run_the_calls_timeout_while_a_person_is_asked(agenvoy_home, legacy, settings):
    settings.AGENVOY_CALL_TIMEOUT = 1
    async with holding(agenvoy_home, legacy) as sup:
        call, task = await start(sup, "ask_form", {"message": "take your time"})
        question = await open_question(call)
        # Three call timeouts go by while the question is open; the call still runs.
        asked_at = question.created_at
        await await_until(lambda: (timezone.now() - asked_at).total_seconds() > 3, 10, 0.2, what="3 s")
        assert not task.done()
        await db.run(questions.answer, question.id, {"action": "accept", "content": {"name": "late"}}, "op")
        got = await answers_of(task)
    assert got == [{"action": "accept", "content": {"name": "late"}}]


@pytest.mark.parametrize("legacy", ERAS)
async def test_it_cancels_the_question_when_the_call_is_cancelled(agenvoy_home, legacy):
    async with holding(agenvoy_home, legacy) as sup:
        call, task = await start(sup, "ask_form", {"message": "never mind"})
        question = await open_question(call)
        assert sup.cancel(str(call.id))
        with anyio.fail_after(20):
            with contextlib.suppress(BaseException):
                await task
        question = await db.run(Question.objects.get, id=question.id)
        assert question.status == QuestionStatus.CANCELLED
        assert await db.run(questions.pending_for) == []


@pytest.mark.parametrize("legacy", ERAS)
async def test_it_tells_the_waiting_mcp_call_whose_answer_it_waits_for(agenvoy_home, legacy):
    layer = get_channel_layer()
    channel = await layer.new_channel()
    async with holding(agenvoy_home, legacy) as sup:
        call, task = await start(sup, "ask_form", {"message": "who?"}, via=Via.MCP)
        await layer.group_add(control.call_group(str(call.id)), channel)
        with anyio.fail_after(20):
            while True:
                event = await layer.receive(channel)
                if event["type"] == "call.progress":
                    break
        assert event["message"] == "waiting for an answer to asking's question"
        question = await open_question(call)
        # No MCP client declared elicitation for this call: the inbox has it.
        assert question.status == QuestionStatus.PENDING
        await db.run(questions.answer, question.id, {"action": "cancel"}, "op")
        assert await answers_of(task) == [{"action": "cancel"}]


async def test_it_answers_sampling_and_roots_with_method_not_found_on_a_2025_session(agenvoy_home):
    async with holding(agenvoy_home, True) as sup:
        for tool in ("sample", "roots"):
            _, task = await start(sup, tool, {})
            got = await answers_of(task)
            assert got[0]["code"] == -32601, got


async def test_it_fails_a_2026_call_whose_server_asks_for_sampling_or_roots(agenvoy_home):
    async with holding(agenvoy_home, False) as sup:
        for tool, method in (("sample", "sampling/createMessage"), ("roots", "roots/list")):
            _, task = await start(sup, tool, {})
            with anyio.fail_after(30):
                stored = await task
            assert stored.status == "error", stored.result
            assert f"{method} is not offered by this client" in stored.result
