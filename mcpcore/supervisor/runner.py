"""Running one approved call on its server's session: a tool call, a prompt get or a resource
read (`ToolCall.kind`); timeout (with progress for tools), cancel, retry once on a renewed
session, convert and store the result (SPEC 4, 6, 20.3)."""

import asyncio
import json
import logging

import anyio
from django.conf import settings

from .. import calls, control, db, gate, oauth, results
from ..choices import CallKind, CallStatus, Via
from ..models import ToolCall
from .session import NEEDS_AUTHORIZATION, SessionHost, describe, is_session_lost, upstream_error

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
    stored = await db.write(calls.finish_call, call, status, text, **extra)
    await calls.announce(call_id, pending=False)
    return stored


async def _execute(sup: SessionHost, call: ToolCall) -> tuple[str, str, dict]:
    session = sup.session(call.server_name)
    if session is None:
        return (
            CallStatus.ERROR,
            f"server {call.server_name} is not connected: not held by this worker",
            {"is_error": True},
        )
    timeout = session.call_timeout or settings.AGENVOY_CALL_TIMEOUT
    session.active_calls += 1
    try:
        return await _attempts(session, call, timeout)
    finally:
        session.active_calls -= 1


async def _attempts(session, call: ToolCall, timeout: float) -> tuple[str, str, dict]:
    for attempt in (1, 2):
        if session.error == NEEDS_AUTHORIZATION and not session.ready.is_set():
            return CallStatus.ERROR, oauth.needs_authorization(call.server_name), {"is_error": True}
        client = await session.wait_ready(settings.AGENVOY_CONNECT_TIMEOUT)
        if client is None:
            reason = session.error or "still connecting"
            return (
                CallStatus.ERROR,
                f"server {call.server_name} is not connected: {reason}",
                {"is_error": True},
            )
        try:
            result = await _call(client, call, timeout)
        except CallTimeout:
            return CallStatus.ERROR, gate.timeout_text(call.tool_name, timeout), {"is_error": True}
        except Exception as exc:
            if attempt == 1 and is_session_lost(exc):
                log.info("call %s: session of %s lost, renewing and retrying once", call.id, call.server_name)
                session.session_lost()
                await asyncio.sleep(0)
                session.ready.clear()
                continue
            if call.kind in READS and _answered(exc):
                return _refused(exc, session)
            raise
        return _store_read(result, call) if call.kind in READS else _store(result, call)
    raise RuntimeError("unreachable")


READS = (CallKind.PROMPT, CallKind.RESOURCE)


async def _call(client, call: ToolCall, timeout: float):
    """The call's request with a deadline; for a tool, progress notifications push it back,
    up to the cap."""
    if call.kind in READS:
        with anyio.CancelScope() as scope:
            scope.deadline = anyio.current_time() + timeout
            if call.kind == CallKind.PROMPT:
                result = await client.get_prompt(call.tool, call.arguments or {})
            else:
                result = await client.read_resource(call.arguments["uri"], cache_mode="bypass")
        if scope.cancelled_caught:
            raise CallTimeout()
        return result
    loop_time = anyio.current_time
    cap_at = loop_time() + settings.AGENVOY_CALL_MAX_SECONDS
    with anyio.CancelScope() as scope:
        scope.deadline = min(loop_time() + timeout, cap_at)

        async def on_progress(progress, total, message) -> None:
            scope.deadline = min(loop_time() + timeout, cap_at)
            if call.via == Via.MCP:
                # Whoever holds the MCP request (in any web process) passes it on (SPEC 13.3).
                await control.asend_group(
                    control.call_group(str(call.id)),
                    {"type": "call.progress", "progress": progress, "total": total, "message": message},
                )

        result = await client.call_tool(call.tool, call.arguments, progress_callback=on_progress)
    if scope.cancelled_caught:
        raise CallTimeout()
    return result


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
    from mcp.shared.exceptions import MCPError

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
