"""Holding a call on an MCP request until it ends (SPEC 13.3): heartbeats while a person
decides, upstream progress passed on, the call cancelled when the client goes away, and the
call's questions relayed to this client meanwhile (SPEC 20.4, `relay`). Tool calls, prompt
gets, resource reads and permission prompts are all held here."""

import json
import logging
import math

import anyio
from channels.layers import get_channel_layer
from django.conf import settings
from mcp.shared.exceptions import MCPError

from .. import calls, control, db, gate
from ..calls import questions
from ..choices import QuestionStatus
from ..models import ApiToken, Question, ToolCall
from . import relay
from .context import is_modern, local_of

log = logging.getLogger("mcpcore.mcpserver")


class Inflight:
    """Calls held for 2025 sessions, by (Mcp-Session-Id, JSON-RPC id): the ASGI app cancels
    one when the client closes the POST it came in (the SDK only acts on
    `notifications/cancelled`, and some clients just drop the connection)."""

    def __init__(self) -> None:
        self._scopes: dict[tuple[str, str], anyio.CancelScope] = {}

    @staticmethod
    def key(session_id: str, request_id) -> tuple[str, str]:
        return session_id, json.dumps(request_id)

    def add(self, key: tuple[str, str], scope: anyio.CancelScope) -> None:
        self._scopes[key] = scope

    def discard(self, key: tuple[str, str]) -> None:
        self._scopes.pop(key, None)

    def cancel(self, key: tuple[str, str]) -> None:
        scope = self._scopes.get(key)
        if scope is not None:
            scope.cancel()


INFLIGHT = Inflight()


async def hold(ctx, call: ToolCall) -> ToolCall:
    """Wait (`calls.wait`) until the call has ended, sending heartbeats while it is pending
    and passing on upstream progress while it runs, when the request asked for progress. The
    client going away (its request cancelled) cancels the call: out of the inbox at once if
    pending, cancelled upstream if running (SPEC 13.3)."""
    held = await hold_or_ask(ctx, call, None)
    assert isinstance(held, ToolCall)  # nothing is relayed without a token
    return held


async def hold_or_ask(ctx, call: ToolCall, token: ApiToken | None, retry: bool = False) -> ToolCall | dict:
    """`hold`, relaying the call's `asked` questions to this client meanwhile (SPEC 20.4,
    `relay`): a 2025 client is asked on this request's stream and the call held on; for a
    2026-07-28 client the request ends with an `InputRequiredResult` (returned here as its
    dict), the call still running until the client's retry holds it again."""
    meta = (ctx.params or {}).get("_meta")
    wants_progress = isinstance(meta, dict) and meta.get("progressToken") is not None
    # The confirmation's own page, on the Pending page's address (SPEC 13.3, 15); a repeat says
    # why it was held (25.2), a group's call by whom and, once escalated, to whom (24.1, 24.3).
    page = f"{settings.AGENVOY_PUBLIC_URL}/pending/{call.confirm_id}/"
    group, escalated_to = call.for_group, call.escalated_to
    beats = 0

    async def heartbeat() -> None:
        nonlocal beats, escalated_to
        beats += 1
        if group and not escalated_to:  # an escalation is the one change the message follows
            fresh = await calls.get(call.id)
            escalated_to = fresh.escalated_to if fresh is not None else ""
        waiting = gate.waiting_text(page, group, escalated_to, call.repeat_note)
        await ctx.session.report_progress(beats, None, waiting)

    async def progress(value, total, message) -> None:
        # Progress of one request must increase: after n heartbeats the server's own
        # progress (and total) is passed on n higher; with none, exactly as it came.
        await ctx.session.report_progress(value + beats, None if total is None else total + beats, message)

    key = None
    sid = None if is_modern(ctx) else ctx.request.headers.get("mcp-session-id")
    local = local_of(ctx)
    done = False
    asking: dict | None = None

    async def wait() -> None:
        nonlocal call
        call = await calls.wait(
            call,
            math.inf,
            on_progress=progress if wants_progress else None,
            on_heartbeat=heartbeat if wants_progress else None,
            local=local,
        )

    try:
        with anyio.CancelScope() as scope:
            if sid and ctx.request_id is not None:
                key = Inflight.key(sid, ctx.request_id)
                INFLIGHT.add(key, scope)
            if token is None or not call.client_asks or call.ended:
                await wait()
            else:
                async with anyio.create_task_group() as tg:

                    async def relaying() -> None:
                        nonlocal asking
                        asking = await _relay(ctx, call, token, retry)
                        tg.cancel_scope.cancel()  # a 2026 question ends this request

                    tg.start_soon(relaying)
                    await wait()
                    tg.cancel_scope.cancel()
            done = True
        if not done:
            log.info("call %s: the MCP client went away", call.id)
    finally:
        if key is not None:
            INFLIGHT.discard(key)
        if not done:
            with anyio.CancelScope(shield=True):
                await _abandon(call, local)
                call = await calls.get(call.id) or call
    return asking if asking is not None and not call.ended else call


async def _relay(ctx, call: ToolCall, token: ApiToken, look_first: bool) -> dict:
    """Relay the call's `asked` questions to this client as they come, one at a time, until
    the call ends (this task is then cancelled). A 2025 client is asked on this request's
    stream and its answer given to the question; for a 2026-07-28 client the answer is the
    `InputRequiredResult` this request ends with. The database is looked at when told of a
    question (`call.question` on the call's group, not its progress), every RELAY_POLL
    seconds in case a message went missing, and first when `look_first` (a retry: the next
    question may have come before this request)."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = control.call_group(str(call.id))
    await layer.group_add(group, channel)
    look = look_first
    try:
        while True:
            question = await db.run(_asked_of, call.id) if look else None
            if question is not None:
                if is_modern(ctx):
                    return _input_required(question, call, token)
                await _ask_2025(ctx, question)
                continue
            look = True
            with anyio.move_on_after(RELAY_POLL):
                event = await layer.receive(channel)
                look = event.get("type") == "call.question"
                if event.get("type") == "question.complete" and not is_modern(ctx):
                    # The server's URL question was done out of band: the client is told
                    # too (2025 only: 2026-07-28 has no such notification).
                    await ctx.session.send_elicit_complete(
                        event["elicitation_id"], related_request_id=ctx.request_id
                    )
    finally:
        with anyio.CancelScope(shield=True):
            await layer.group_discard(group, channel)


RELAY_POLL = 5.0  # seconds between looks for a question nobody told the door of


def _asked_of(call_id) -> Question | None:
    return (
        Question.objects.filter(call_id=call_id, status=QuestionStatus.ASKED).order_by("created_at").first()
    )


async def _ask_2025(ctx, question: Question) -> None:
    """`elicitation/create` on this request's stream; whatever the client answers (or a
    refusal: cancel) goes to the question."""
    try:
        if question.mode == "url":
            result = await ctx.session.elicit_url(
                question.message,
                question.url,
                question.elicitation_id or question.id.hex,
                related_request_id=ctx.request_id,
            )
        else:
            result = await ctx.session.elicit_form(
                question.message, question.schema or {}, related_request_id=ctx.request_id
            )
        answer = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    except MCPError as exc:
        log.info("question %s: the client refused it: %s", question.id, exc.error.message)
        answer = {"action": "cancel"}
    try:
        await db.run(questions.relayed, question.id, answer)
    except calls.CallError as exc:
        log.info("question %s: answer not taken: %s", question.id, exc.message)


def _input_required(question: Question, call: ToolCall, token: ApiToken) -> dict:
    """The `InputRequiredResult` asking a 2026-07-28 client the question, keyed by its id."""
    return {
        "resultType": "input_required",
        "inputRequests": {
            question.id.hex: {"method": "elicitation/create", "params": relay.request_of(question)}
        },
        "requestState": relay.sign(call.id, question.id, token.pk),
    }


async def _abandon(call: ToolCall, local: calls.LocalSupervisor | None) -> None:
    """Nobody waits for this call any more: cancel it (SPEC 13.3)."""
    try:
        # Its questions leave the inbox (or the client's hands) at once (SPEC 20.4).
        await db.run(questions.cancel_for_call, call.id)
    except Exception:
        log.exception("could not cancel the questions of abandoned call %s", call.id)
    try:
        await calls.stop(call.id, local)
    except calls.CallError:
        return  # it ended meanwhile
    except Exception:
        log.exception("could not cancel abandoned call %s", call.id)
