"""Running one approved call on its server's session: a tool call, a prompt get or a resource
read (`ToolCall.kind`); timeout (with progress for tools), cancel, retry once on a renewed
session, convert and store the result (SPEC 4, 6, 20.3); and the questions its server asks
meanwhile (SPEC 20.4, `Asking`).

A server asks in one of two ways. On a 2025 session it sends `elicitation/create` while the
call runs: the elicitation callback of the session's questions part (`Askers.on_elicit`) hands
it to the `Asking` of the call it belongs to. On 2026-07-28 the call answers an `InputRequiredResult`:
the runner drives the rounds itself (`call_tool(..., allow_input_required=True)`, then the
same call again with `input_responses` and `request_state`), asking each question in turn.
Either way the question is recorded (`questions.ask`: relayed to the MCP client that made the
call when it can answer that mode, else the inbox), waited for (`questions.wait_answer`), and
what a person or the client answered goes back to the server.
"""

import asyncio
import json
import logging
import math

import anyio
from django.conf import settings
from mcp.shared.exceptions import MCPError
from mcp_types import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    ElicitRequest,
    ElicitResult,
    ErrorData,
    InputRequiredResult,
)

from .. import calls, control, db, elicitation, gate, results
from ..calls import questions, traces
from ..choices import CallKind, CallStatus, QuestionStatus, Via
from ..models import ToolCall
from ..oauth import upstream as oauth_upstream
from .errors import describe, is_session_lost
from .session import SessionHost, not_offered, upstream_error

log = logging.getLogger("mcpcore.supervisor")


class CallTimeout(Exception):
    pass


async def run_call(sup: SessionHost, call_id: str) -> ToolCall | None:
    """Claim a recorded, approved call (`calls.claim`), then run it."""
    call = await db.run(calls.claim, call_id, sup.name)
    return await run_claimed(sup, call) if call is not None else None


async def run_claimed(sup: SessionHost, call: ToolCall) -> ToolCall | None:
    """Run a call this worker has claimed; store and announce its end, and return the call as
    stored (None when it was ended meanwhile by someone else, say a cancel)."""
    call_id = str(call.id)
    try:
        # Its upstream request (the SDK's client span) joins the trace of the door it came
        # in by, whichever process that was (SPEC 27).
        with traces.continued(call.traceparent):
            status, text, extra = await _execute(sup, call)
    except asyncio.CancelledError:
        stopping = sup.stopping
        status, text = (
            (CallStatus.INTERRUPTED, calls.INTERRUPTED) if stopping else (CallStatus.CANCELLED, "cancelled")
        )
        await db.write(calls.finish, call.id, status, text, is_error=stopping)
        await calls.announce(call_id, pending=False)
        raise
    except Exception as exc:  # a failure of this call is this call's error, nothing more
        session = sup.session(call.server_name)
        problem = session.describe(exc) if session is not None else describe(exc)
        log.warning("call %s (%s) failed: %s", call_id, call.tool_name, problem)
        status, text, extra = CallStatus.ERROR, f"tool error: {problem}", {"is_error": True}
    if call.edited_by:
        text, extra = _told_of_edit(call, text, extra)
    stored = await db.write(calls.finish_call, call, status, text, **extra)
    await calls.announce(call_id, pending=False)
    return stored


def _told_of_edit(call: ToolCall, text: str, extra: dict) -> tuple[str, dict]:
    """The result of a call a person changed before approving (SPEC 24.5) starts with what
    was run: the first line of the text (a REST agent's result, the history), and a first text
    item of the upstream result an MCP client gets as it was."""
    notice = gate.edited_text(call.edited_by, call.arguments)
    native = extra.get("native_result")
    if isinstance(native, dict) and isinstance(native.get("content"), list):
        native = {**native, "content": [{"type": "text", "text": notice}, *native["content"]]}
        extra = {**extra, "native_result": native}
    if extra.get("raw_result"):
        extra = {**extra, "raw_result": f"{notice}\n{extra['raw_result']}"}
    return f"{notice}\n{text}", extra


async def _execute(sup: SessionHost, call: ToolCall) -> tuple[str, str, dict]:
    session = sup.session(call.server_name)
    if session is None:
        return (
            CallStatus.ERROR,
            f"server {call.server_name} is not connected: not held by this worker",
            {"is_error": True},
        )
    timeout = session.call_timeout or settings.AGENVOY_CALL_TIMEOUT
    asking = Asking(call, timeout)
    try:
        with session.running(asking):
            outcome = await _attempts(session, call, timeout, asking)
        return outcome
    finally:
        if asking.asked:
            # A question still open when its call ends has nobody left to answer to (SPEC
            # 20.4). Only a call that asked has one: the trip to the database thread costs
            # every other call about 1.2 ms of that thread's CPU (issue 39).
            with anyio.CancelScope(shield=True):
                await _close_questions(call)


async def _close_questions(call: ToolCall) -> None:
    try:
        await db.run(questions.cancel_for_call, call.id)
    except Exception:
        log.exception("could not cancel the open questions of call %s", call.id)


async def _attempts(session, call: ToolCall, timeout: float, asking: "Asking") -> tuple[str, str, dict]:
    for attempt in (1, 2):
        if session.needs_authorization:
            return CallStatus.ERROR, oauth_upstream.needs_authorization(call.server_name), {"is_error": True}
        client = await session.wait_ready(settings.AGENVOY_CONNECT_TIMEOUT)
        if client is None:
            reason = session.error or "still connecting"
            return (
                CallStatus.ERROR,
                f"server {call.server_name} is not connected: {reason}",
                {"is_error": True},
            )
        try:
            result = await _call(client, call, timeout, asking)
        except CallTimeout:
            return CallStatus.ERROR, gate.timeout_text(call.tool_name, timeout), {"is_error": True}
        except Exception as exc:
            if attempt == 1 and is_session_lost(exc):
                log.info("call %s: session of %s lost, renewing and retrying once", call.id, call.server_name)
                await session.renew_after_loss()
                continue
            if call.kind in READS and _answered(exc):
                return _refused(exc, session)
            raise
        return _store_read(result, call) if call.kind in READS else _store(result, call)
    raise RuntimeError("unreachable")


READS = (CallKind.PROMPT, CallKind.RESOURCE)


async def _call(client, call: ToolCall, timeout: float, asking: "Asking | None" = None):
    """The call's request with a deadline; for a tool, progress notifications push it back,
    up to the cap. While a person is asked a question of the call, its deadline is off
    (`Asking`)."""
    asking = asking or Asking(call, timeout)
    if call.kind in READS:
        with anyio.CancelScope() as scope:
            scope.deadline = anyio.current_time() + timeout
            asking.timed(scope, math.inf)
            if call.kind == CallKind.PROMPT:
                result = await client.get_prompt(call.tool, call.arguments or {})
            else:
                result = await client.read_resource(call.arguments["uri"], cache_mode="bypass")
        if scope.cancelled_caught:
            raise CallTimeout()
        return result
    loop_time = anyio.current_time
    with anyio.CancelScope() as scope:
        asking.timed(scope, loop_time() + settings.AGENVOY_CALL_MAX_SECONDS)
        asking.push_back()

        async def on_progress(progress, total, message) -> None:
            asking.push_back()
            asking.last = progress
            if call.via == Via.MCP:
                # Whoever holds the MCP request (in any web process) passes it on (SPEC 13.3),
                # after the console's own messages of waiting (`Asking.offset`).
                offset = asking.offset
                await asking.progress(progress + offset, None if total is None else total + offset, message)

        result = await _rounds(client, call, asking, on_progress)
    if scope.cancelled_caught:
        raise CallTimeout()
    return result


async def _rounds(client, call: ToolCall, asking: "Asking", on_progress):
    """`tools/call` until it has a result: a 2026-07-28 server may answer `InputRequiredResult`
    instead, whose questions are asked in order (`Asking.answer`), and the call is made again
    with the answers and the server's `request_state` (SPEC 20.4). A 2025 server never does
    (it asks through `elicitation/create` meanwhile)."""
    responses, state = None, None

    def one_round():
        return client.session.call_tool(
            call.tool,
            call.arguments,
            progress_callback=on_progress,
            input_responses=responses,
            request_state=state,
            allow_input_required=True,
        )

    for _ in range(ROUNDS):
        try:
            result = await one_round()
        except MCPError as exc:
            if exc.error.code != HEADER_MISMATCH:
                raise
            # The SDK's own recovery (`Client.call_tool`): the tool's listed schema is stale,
            # so list it again and send the same round once more.
            await _relist(client, call.tool)
            result = await one_round()
        if not isinstance(result, InputRequiredResult):
            return result
        answered = {}
        for key, request in (result.input_requests or {}).items():
            answered[key] = await asking.answer(request)
        responses, state = answered or None, result.request_state
    raise RuntimeError(f"the server asked for input more than {ROUNDS} times")


async def _relist(client, tool: str) -> None:
    """List the server's tools again, page by page, until a page lists `tool`: what
    `Client.call_tool` does after a `HEADER_MISMATCH` (its private `_relist_tool`), through the
    public `list_tools`, which refreshes the client's headers for the tool (SEP-2243)."""
    cursor: str | None = None
    for _ in range(RELIST_PAGES):
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        cursor = page.next_cursor
        if cursor is None or any(t.name == tool for t in page.tools):
            return


ROUNDS = 10  # input_required rounds of one call, as the SDK's own driver allows
RELIST_PAGES = 100  # a server whose pages never end cannot hold a call (the SDK's cap too)
WAITING = "waiting for an answer to {server}'s question"
# How long a question relayed to an MCP client is waited for at most: a 2026-07-28 client's
# `requestState` lives 10 minutes, and a person in the inbox has the confirm timeout.
RELAYED_FOR = 600.0


class Asking:
    """The questions of one running call (SPEC 20.4), asked one at a time in the order the
    server asked them. While one is open the call's own timeout does not run (the question
    has its own: the confirm timeout in the inbox); it starts afresh once answered, and the
    cap on the call's whole time is pushed back by the time spent asking. A call that came
    in on `/mcp` is told `waiting for an answer to <server>'s question` every few seconds,
    through its group as upstream progress is, so the client's timers keep being reset."""

    def __init__(self, call: ToolCall, timeout: float) -> None:
        self.call = call
        self.call_id = str(call.id)
        self.caller = (call.token_id, call.session_id)
        # Its URL questions' ids, for the server's `notifications/elicitation/complete`.
        self.elicitation_ids: set[str] = set()
        self.timeout = timeout
        self.scope: anyio.CancelScope | None = None
        self.cap_at = math.inf
        self.paused = False
        # Set before the first question is recorded (even if that is cut short): only then
        # has the call questions to close when it ends.
        self.asked = False
        # Progress values: the last the server sent, and how many of the console's own
        # messages went before (added to the server's later ones: progress must increase).
        self.last: float = 0
        self.offset = 0
        self._turn = asyncio.Lock()

    @property
    def busy(self) -> bool:
        return self._turn.locked()

    def timed(self, scope: anyio.CancelScope, cap_at: float) -> None:
        self.scope, self.cap_at = scope, cap_at

    def push_back(self) -> None:
        """The call's deadline `timeout` from now (up to the cap), unless a person is asked."""
        if self.scope is not None and not self.paused:
            self.scope.deadline = min(anyio.current_time() + self.timeout, self.cap_at)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        await control.asend_group(
            control.call_group(str(self.call.id)),
            {"type": "call.progress", "progress": progress, "total": total, "message": message},
        )

    async def answer(self, request):
        """The answer to one input request of an `InputRequiredResult`: an elicitation is
        asked; sampling and roots are not offered (-32601, the call fails)."""
        if not isinstance(request, ElicitRequest):
            error = not_offered(request.method)
            raise MCPError(error.code, error.message)
        got = await self.elicit(request.params)
        if not isinstance(got, ElicitResult):
            raise MCPError(got.code, got.message)
        return got

    async def elicit(self, params, sure: bool = True):
        """Ask the person one question (`mcp_types.ElicitRequestParams`) and give back what
        goes to the server (`ElicitResult`); one this call may not have asked (`sure` false:
        `Askers._asker_for`) is asked in the inbox only. A URL question whose address shows
        another host than the one a browser opens is refused at once (`ErrorData`, -32602),
        asked of no one."""
        if getattr(params, "mode", "form") == "url" and (why := elicitation.url_refusal(params.url)):
            log.warning("server %s: URL question refused: %s", self.call.server_name, why)
            return ErrorData(code=INVALID_PARAMS, message=f"URL question refused: {why}")

        async with self._turn:
            started = anyio.current_time()
            self.paused = True
            if self.scope is not None:
                self.scope.deadline = math.inf
            try:
                answer = await self._asked(params, sure)
            finally:
                self.paused = False
                self.cap_at += anyio.current_time() - started
                self.push_back()
        return ElicitResult.model_validate(answer)

    async def _asked(self, params, sure: bool = True) -> dict:
        call = self.call
        url_mode = getattr(params, "mode", "form") == "url"
        if url_mode and params.elicitation_id:
            self.elicitation_ids.add(params.elicitation_id)
        self.asked = True
        question = await db.run(
            questions.ask,
            call.id,
            call.server_name,
            "url" if url_mode else "form",
            params.message,
            schema=None if url_mode else params.requested_schema,
            url=params.url if url_mode else "",
            elicitation_id=(params.elicitation_id or "") if url_mode else "",
            sure=sure,
        )
        async with anyio.create_task_group() as tg:
            # A question this call may not have asked is none of its client's business.
            if call.via == Via.MCP and sure:
                tg.start_soon(self._waiting)
            # One in the inbox ends at its row's expiry, which an extension moves (SPEC 24.4):
            # waited for up to the 24 hours an extension may reach.
            bound = RELAYED_FOR if question.status == QuestionStatus.ASKED else questions.EXTEND_SECONDS
            ended = await questions.wait_answer(question, max(float(settings.AGENVOY_CONFIRM_TIMEOUT), bound))
            tg.cancel_scope.cancel()
        if ended.status in questions.OPEN:
            # Nobody answered in time: the question ends, the server gets a cancel.
            await db.run(questions.cancel_for_call, call.id)
            return {"action": "cancel"}
        return questions.result_for_server(ended)

    async def _waiting(self) -> None:
        message = WAITING.format(server=self.call.server_name)
        while True:
            self.offset += 1
            await self.progress(self.last + self.offset, None, message)
            await anyio.sleep(calls.HEARTBEAT)


def _store(result, call: ToolCall | None = None) -> tuple[str, str, dict]:
    wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    native = None
    if call is not None and call.via == Via.MCP:
        # An MCP client gets the upstream result as it was, when it fits under the cap.
        size = len(json.dumps(wire, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        native = wire if size <= settings.AGENVOY_RESULT_CAP else None
    converted = results.convert(wire, cap=settings.AGENVOY_RESULT_CAP)
    full = converted.text if not converted.truncated else results.converted_full(wire)
    raw = full
    raw_cut = False
    if len(raw.encode()) > settings.AGENVOY_HISTORY_MAX_BYTES:
        raw, raw_cut = results.cap_text(raw, settings.AGENVOY_HISTORY_MAX_BYTES)
    return (
        CallStatus.ERROR if converted.is_error else CallStatus.DONE,
        converted.text,
        {
            "is_error": converted.is_error,
            "truncated": converted.truncated,
            "result_bytes": converted.total_bytes,
            "raw_result": raw,
            "raw_truncated": raw_cut,
            "native_result": native,
        },
    )


def _answered(exc: BaseException) -> bool:
    """A JSON-RPC error the server itself answered (unknown prompt, resource not found ...)."""
    return isinstance(exc, MCPError) and exc.error.code not in (-32000, -32001)


def _refused(exc: BaseException, session) -> tuple[str, str, dict]:
    """A prompt get or resource read the server refused: its message is the result, and its
    error is kept for the MCP door to pass on as the same JSON-RPC error."""
    error = upstream_error(exc, session)
    return CallStatus.ERROR, error["message"], {"is_error": True, "native_result": {"error": error}}


def _store_read(result, call: ToolCall) -> tuple[str, str, dict]:
    """A prompt's or resource's result: the text a person reads, and the wire JSON always
    (whatever `via`) when it fits under the cap."""
    wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    size = len(json.dumps(wire, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    full = results.prompt_text(wire) if call.kind == CallKind.PROMPT else results.resource_text(wire)
    text, truncated = results.cap_text(full, settings.AGENVOY_RESULT_CAP)
    raw, raw_cut = full, False
    if len(raw.encode()) > settings.AGENVOY_HISTORY_MAX_BYTES:
        raw, raw_cut = results.cap_text(raw, settings.AGENVOY_HISTORY_MAX_BYTES)
    return (
        CallStatus.DONE,
        text,
        {
            "is_error": False,
            "truncated": truncated,
            "result_bytes": len(full.encode("utf-8", "replace")),
            "raw_result": raw,
            "raw_truncated": raw_cut,
            "native_result": wire if size <= settings.AGENVOY_RESULT_CAP else None,
        },
    )
