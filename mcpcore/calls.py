"""Tool calls from request to result, on the database: the gate flow around `gate.decide`,
replies to confirmations, expiry, cancellation, and waiting for a call to end. Used by the web
side and the supervisor alike; nothing here imports `mcp`."""

import asyncio
import datetime
import json
import logging
import uuid

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from . import allowlist, control, db, files, gate
from .models import AllowEntry, ApiToken, Server, SessionAllowance, Tool, ToolCall, Worker

log = logging.getLogger("mcpcore.calls")


class CallError(Exception):
    """A request the gate refuses; message and status are the API's answer."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


INTERRUPTED = "interrupted: the console stopped while the call was running"


_matcher: dict = {"key": None, "match": None}


def allowed(tool_name: str) -> bool:
    """Whether `allow_tool` (the shared truth) allows the tool. The parsed matcher is kept
    until the file's stat changes; an unreadable file falls back to the mirrored table."""
    path = files.path_of(files.ALLOW_TOOL)
    try:
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size, st.st_ino)
    except FileNotFoundError:
        key = (str(path), None)
    except OSError:
        key = None
    if key is None or key != _matcher["key"]:
        try:
            entries = files.read_allow_tool()
        except files.ConfigFileError:
            entries, key = list(AllowEntry.objects.values_list("entry", flat=True)), None
        _matcher["key"], _matcher["match"] = key, allowlist.Matcher(entries)
    return _matcher["match"](tool_name)


def session_allowed(session_id: str) -> bool:
    return SessionAllowance.objects.filter(session_id=session_id, revoked_at__isnull=True).exists()


def create(
    token: ApiToken | None,
    user: str,
    name: object,
    arguments: object,
    session_id: object,
    mode: object,
    local=None,
    via: str = "rest",
) -> ToolCall:
    """Validate a call request, run it through the gate, and record it (SPEC 5, 7).

    `local(server) -> worker name or None` says whether this process's supervisor holds the
    server: a call that runs at once is then recorded as already claimed by it.
    """
    if not isinstance(name, str) or not name.strip():
        raise CallError("name is required", 400)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise CallError("arguments must be a JSON object", 400)
    try:
        # What can't be sent as UTF-8 JSON would break the server's session for every caller.
        json.dumps(arguments, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError):
        raise CallError(
            "arguments must be JSON that can be sent as UTF-8 (no lone surrogates, NaN or Infinity)", 400
        ) from None
    if session_id is not None and (
        not isinstance(session_id, str) or not session_id.strip() or len(session_id) > 200
    ):
        raise CallError("session_id must be a non-empty string of at most 200 characters", 400)
    norm = gate.normalize_mode(mode)
    if norm is None:
        raise CallError(f"unknown mode: {mode}", 400)
    tool = Tool.objects.select_related("server").filter(registered_name=name.strip()).first()
    if tool is None:
        raise CallError(f"unknown tool: {name}", 404)
    server = tool.server
    if server.state not in ("connected", "connecting"):
        raise CallError(f"server {server.name} is not connected: {server.last_error or server.state}", 503)
    if norm == "auto" and token is not None and not token.may_auto:
        raise CallError("this token may not use auto mode", 403)
    session_id = session_id.strip() if isinstance(session_id, str) else uuid.uuid4().hex
    decision = gate.decide(norm, lambda: allowed(tool.registered_name), lambda: session_allowed(session_id))
    now = timezone.now()
    call = ToolCall(
        session_id=session_id,
        tool_name=tool.registered_name,
        server_name=server.name,
        tool=tool.tool_name,
        arguments=arguments,
        mode=norm,
        token=token,
        requested_by=user or (token.name if token else ""),
        created_at=now,
        via=via,
    )
    if decision.run:
        call.status, call.decision, call.decided_at = "running", decision.reason, now
        worker = local(server.name) if local is not None else None
        if worker:
            call.started_at, call.worker, call.attempts = now, worker, 1
    else:
        call.status = "pending"
        call.confirm_id = uuid.uuid4()
        call.expires_at = now + datetime.timedelta(seconds=settings.AGENVOY_CONFIRM_TIMEOUT)
    call.save()
    return call


def owner_channel(server_name: str) -> str | None:
    owner = Server.objects.filter(name=server_name).values_list("owner", flat=True).first()
    if not owner:
        return None
    return Worker.objects.filter(name=owner).values_list("channel", flat=True).first()


async def dispatch(call: ToolCall) -> None:
    """Hand a running call to the worker that owns its server (if none, the next owner picks
    it up from the database). The supervisor of this process takes its own calls directly."""
    local = control.local_supervisor
    if local is not None and call.server_name in local.sessions:
        local.spawn_call(str(call.id))
        return
    channel = await db.run(owner_channel, call.server_name)
    if channel:
        await get_channel_layer().send(channel, {"type": "call.run", "call_id": str(call.id)})


async def announce(call_id: str) -> None:
    """Wake whoever waits on this call, and the browsers' pending lists."""
    await control.asend_group(control.call_group(call_id), {"type": "call.changed", "call_id": call_id})
    await control.asend_group(control.PENDING, {"type": "pending.changed", "call_id": call_id})


def finish(call_id, status: str, result: str, **fields) -> bool:
    """End a call once: a conditional update from pending/running, so no end is overwritten."""
    return (
        ToolCall.objects.filter(id=call_id, status__in=("pending", "running")).update(
            status=status, result=result, ended_at=timezone.now(), **fields
        )
        == 1
    )


class ReplyError(CallError):
    pass


def reply(session_id: str, confirm_id: str, body: dict, who: str) -> ToolCall:
    """Apply a person's reply to a pending confirmation (SPEC 5); returns the updated call."""
    try:
        cid = uuid.UUID(str(confirm_id))
    except ValueError:
        raise ReplyError("confirmation not found", 404) from None
    call = ToolCall.objects.filter(confirm_id=cid, session_id=session_id).first()
    if call is None:
        raise ReplyError("confirmation not found", 404)
    for key in ("approve", "remember", "allow_turn", "abort"):
        if key in body and not isinstance(body[key], bool):
            raise ReplyError(f"{key} must be true or false", 400)
    reason = body.get("reason") or ""
    if not isinstance(reason, str):
        raise ReplyError("reason must be a string", 400)
    now = timezone.now()
    if call.status == "pending" and call.expires_at and call.expires_at <= now:
        expire(call.id)
        raise ReplyError("confirmation already resolved or expired", 410)
    pending = ToolCall.objects.filter(id=call.id, status="pending")
    decided = {"decided_by": who, "decided_at": now}
    if body.get("abort") or not body.get("approve"):
        aborted = bool(body.get("abort"))
        changed = pending.update(
            status="aborted" if aborted else "skipped",
            decision="abort" if aborted else "deny",
            reason=reason,
            result=gate.ABORTED if aborted else gate.skipped_text(reason),
            ended_at=now,
            **decided,
        )
    else:
        decision = "remember" if body.get("remember") else "session" if body.get("allow_turn") else "approve"
        with transaction.atomic():
            changed = pending.update(status="running", decision=decision, **decided)
            if changed and body.get("allow_turn"):
                SessionAllowance.objects.create(session_id=session_id, granted_by=who)
        if changed and body.get("remember"):
            try:
                files.add_allow_entry(call.tool_name)
            except files.ConfigFileError as exc:
                # The approval stands; only remembering it failed, and the log says why.
                log.warning("could not remember %s in allow_tool: %s", call.tool_name, exc)
    if not changed:
        raise ReplyError("confirmation already resolved or expired", 410)
    call.refresh_from_db()
    return call


def expire(call_id) -> bool:
    return (
        ToolCall.objects.filter(id=call_id, status="pending").update(
            status="expired",
            decision="expired",
            decided_by="timeout",
            decided_at=timezone.now(),
            reason="confirmation expired",
            result=gate.skipped_text("confirmation expired"),
            ended_at=timezone.now(),
        )
        == 1
    )


def expire_due() -> list[str]:
    """Expire every pending confirmation past its time; returns the call ids expired."""
    due = ToolCall.objects.filter(status="pending", expires_at__lte=timezone.now())
    return [str(cid) for cid in due.values_list("id", flat=True) if expire(cid)]


def unstarted_for(servers: list[str]) -> list[str]:
    """Approved calls no worker has started yet (their message went to a worker that died)."""
    if not servers:
        return []
    rows = ToolCall.objects.filter(status="running", started_at__isnull=True, server_name__in=servers)
    return [str(cid) for cid in rows.values_list("id", flat=True)]


def interrupt_orphans(worker_alive) -> int:
    """Calls that were running in a worker that is gone end as interrupted."""
    count = 0
    rows = ToolCall.objects.filter(status="running", started_at__isnull=False)
    for cid, worker in rows.values_list("id", "worker"):
        if not worker_alive(worker):
            count += finish(cid, "interrupted", INTERRUPTED, is_error=True)
    return count


def interrupt_for(server_name: str, worker: str) -> int:
    """Calls a dead worker had started on a server end as interrupted, with a clear message."""
    rows = ToolCall.objects.filter(
        status="running", started_at__isnull=False, server_name=server_name, worker=worker
    )
    ended = [
        cid
        for cid in rows.values_list("id", flat=True)
        if finish(cid, "interrupted", WORKER_LOST, is_error=True)
    ]
    return len(ended)


WORKER_LOST = "interrupted: the worker running this call stopped; the call may or may not have run"


def cancel(call_id) -> tuple[ToolCall, bool]:
    """Cancel a pending or running call; returns (call, whether the owner must be told)."""
    call = ToolCall.objects.filter(id=call_id).first()
    if call is None:
        raise CallError("call not found", 404)
    if call.ended:
        raise CallError("call already ended", 409)
    if call.status == "pending" or call.started_at is None:
        if finish(call.id, "cancelled", "cancelled", decided_at=timezone.now()):
            call.refresh_from_db()
            return call, False
        call.refresh_from_db()
        if call.ended:
            raise CallError("call already ended", 409)
    return call, True


async def wait_ended(call_id, seconds: float) -> ToolCall | None:
    """The call once it has ended, or as it is after `seconds` (None if it doesn't exist).

    Waits on the call's channel-layer group (pushed by whoever ends it) and re-reads the row
    on every wake and at least every second, so a missed message costs at most a second.
    """

    def get():
        return db.run(lambda: ToolCall.objects.filter(id=call_id).first())

    call = await get()
    if call is None or call.ended or seconds <= 0:
        return call
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = control.call_group(str(call_id))
    await layer.group_add(group, channel)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    try:
        while True:
            call = await get()
            if call is None or call.ended:
                return call
            if call.status == "pending" and call.expires_at and call.expires_at <= timezone.now():
                if await db.run(expire, call.id):
                    await announce(str(call.id))
                continue
            left = deadline - loop.time()
            if left <= 0:
                return call
            try:
                await asyncio.wait_for(layer.receive(channel), min(left, 1.0))
            except TimeoutError:
                pass
    finally:
        await layer.group_discard(group, channel)


# --- permission prompts (/mcp/_permission, SPEC 13.5) -------------------------------------------
# placeholder — perm branch replaces: the minimal shape the MCP endpoint holds and answers.


def create_permission_prompt(
    token: ApiToken | None, tool_name: str, tool_input: dict, session_id: str
) -> ToolCall:
    """A pending confirmation for another agent's own tool (placeholder — perm branch replaces)."""
    now = timezone.now()
    return ToolCall.objects.create(
        session_id=session_id,
        tool_name=tool_name,
        server_name="",
        tool=tool_name,
        arguments=tool_input,
        mode="confirm",
        token=token,
        requested_by=token.name if token else "",
        created_at=now,
        status="pending",
        confirm_id=uuid.uuid4(),
        expires_at=now + datetime.timedelta(seconds=settings.AGENVOY_CONFIRM_TIMEOUT),
        via="mcp",
    )


def permission_answer(call: ToolCall) -> dict:
    """The JSON an agent's permission prompt gets back (placeholder — perm branch replaces)."""
    if call.status == "done":
        return {"behavior": "allow", "updatedInput": call.arguments}
    answer = {"behavior": "deny", "message": call.result}
    if call.status == "aborted":
        answer["interrupt"] = True
    return answer
