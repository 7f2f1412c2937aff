"""Tool calls from request to result. Every door (`POST /v1/mcp/call`, a page's try-it, the
MCP endpoint) takes the same three steps, and every reply to a confirmation the same one:

    call = await db.write(calls.create, ...)   # validate, gate, record (one INSERT)
    await calls.submit(call)                   # pending: the inbox is told; approved: it runs
    call = await calls.wait(call, seconds)     # the ended call, or as it is after `seconds`
    await calls.respond(...)                   # a person's reply: record, run if approved, tell

An approved call runs in the supervisor that holds its server's session. When that is the
supervisor of this process (`attach`ed by the process wiring), the call is recorded already
claimed by it, runs as a task here, and `wait` waits on that task; otherwise the owner is told
through the channel layer and `wait` watches the call's group and the database. Who ends a call
writes it with one conditional UPDATE (`finish`). Nothing here imports `mcp`.
"""

import asyncio
import datetime
import functools
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from . import allowlist, cache, control, db, files, gate, metrics, rules, store
from .models import (
    AllowEntry,
    ApiToken,
    PermissionGrant,
    Server,
    SessionAllowance,
    ToolCall,
    Worker,
    time_ordered_uuid,
)

log = logging.getLogger("mcpcore.calls")


class Runner(Protocol):
    """What the call path needs of the supervisor in this process (`supervisor.Supervisor`):

    - `name`: the worker name calls it claims are recorded under;
    - `holds(server_name)`: whether it holds that server's session (read from any thread);
    - `run(call)`: run a call claimed for it, as a task whose result is the ended call
      (None when someone else ended it first, say a cancel);
    - `pick_up(call_id)`: claim a recorded, approved call (`claim`) and run it;
    - `cancel(call_id)`: cancel a call it runs (its task's end records `cancelled`).
    """

    name: str

    def holds(self, server_name: str) -> bool: ...

    def run(self, call: ToolCall) -> "asyncio.Task[ToolCall | None]": ...

    def pick_up(self, call_id: str) -> None: ...

    def cancel(self, call_id: str) -> bool: ...


_runner: Runner | None = None
_local: dict[str, asyncio.Task] = {}  # calls running in this process, for `wait`


def attach(runner: Runner | None) -> None:
    """Called by the process wiring (`serve`, tests) with the supervisor of this process, and
    with None when it stops. A web process without one (scale-out) reaches workers only
    through the database and the channel layer."""
    global _runner
    _runner = runner


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
    key = files.stat_key(files.ALLOW_TOOL)
    if key is None or key != _matcher["key"]:
        try:
            entries = files.read_allow_tool()
        except files.ConfigFileError:
            entries, key = list(AllowEntry.objects.values_list("entry", flat=True)), None
        _matcher["key"], _matcher["match"] = key, allowlist.Matcher(entries)
    return _matcher["match"](tool_name)


_rules: dict = {"key": None, "set": None}


def rules_in_force() -> rules.RuleSet:
    """The argument rules (SPEC 14.2), read like `allowed` reads `allow_tool`: kept until the
    file's stat changes; a file with a bad line gives the last good (mirrored) rules."""
    key = files.stat_key(files.RULES)
    if key is None or key != _rules["key"]:
        found, _ = files.current_rules(mirror=True)
        _rules["key"], _rules["set"] = key, rules.RuleSet(found)
    return _rules["set"]


def rule_for(tool_name: str, arguments: dict) -> tuple[str, str] | None:
    rule = rules_in_force().check(tool_name, arguments)
    return (rule.decision, rule.text) if rule is not None else None


def session_allowed(token: ApiToken | None, session_id: str) -> bool:
    """Whether "approve for session" is in force for this token and session id (SPEC 12.2):
    another token sending the same session id gets nothing."""
    return SessionAllowance.objects.filter(
        session_id=session_id, token=token, revoked_at__isnull=True
    ).exists()


def create(
    token: ApiToken | None,
    user: str,
    name: object,
    arguments: object,
    session_id: object,
    mode: object,
    via: str = "rest",
) -> ToolCall:
    """Validate a call request, run it through the gate, and record it (SPEC 5, 7). Sync;
    from async code run it with `db.write`, so its INSERT shares a commit with the writes
    queued beside it (a sync page calls it directly).

    A call that runs at once is recorded `running`; when the supervisor of this process holds
    its server, already claimed by it (nobody else can see the row before it is committed, so
    this claim needs no condition), else unclaimed, for `claim` by the server's owner.
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
    tool = cache.tool(name.strip())
    if tool is None:
        raise CallError(f"unknown tool: {name}", 404)
    server = tool.server
    if server.state not in ("connected", "connecting"):
        raise CallError(f"server {server.name} is not connected: {server.last_error or server.state}", 503)
    if norm == "auto" and token is not None and not token.may_auto:
        raise CallError("this token may not use auto mode", 403)
    session_id = session_id.strip() if isinstance(session_id, str) else time_ordered_uuid().hex

    @functools.cache
    def changed() -> bool:
        """A trusted tool whose definition no longer matches its pin (SPEC 14.1)."""
        if not (allowed(tool.registered_name) and tool.digest):
            return False
        pinned = cache.pin(tool.registered_name)
        return bool(pinned) and pinned != tool.digest

    decision = gate.decide(
        norm,
        lambda: allowed(tool.registered_name),
        lambda: session_allowed(token, session_id),
        rule=lambda: rule_for(tool.registered_name, arguments),
        changed=changed,
    )
    now = timezone.now()
    call = store.new(
        session_id=session_id,
        tool_name=tool.registered_name,
        server_name=server.name,
        tool=tool.tool_name,
        arguments=arguments,
        mode=norm,
        token=token,
        requested_by=user or (token.name if token else ""),
        created_at=now,
        rule=decision.rule,
        # An ask rule decides before the pin is looked at; the inbox still wants to know.
        definition_changed=decision.reason == "ask" and changed(),
        via=via,
    )
    if decision.reason == "deny":
        # Denied by a rule: nobody is asked and nothing runs.
        call.status, call.decision, call.decided_at, call.ended_at = "skipped", "rule", now, now
        call.decided_by, call.result = "rule", gate.denied_text(decision.rule)
    elif decision.run:
        call.status, call.decision, call.decided_at = "running", decision.reason, now
        runner = _runner
        if runner is not None and runner.holds(server.name):
            call.started_at, call.worker, call.attempts = now, runner.name, 1
    else:
        _wait_for_a_person(call, token, now)
    store.insert(call)
    if call.ended:  # denied by a rule
        _count_end(call)
    if call.status == "pending" and token is not None and not _still_live(token):
        # Revoked between this request's auth and now: revoke_token's sweep may have missed it.
        finish(call.id, "cancelled", TOKEN_REVOKED, decided_at=timezone.now())
        call.refresh_from_db()
    return call


def _still_live(token: ApiToken) -> bool:
    return ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).exists()


def _wait_for_a_person(call: ToolCall, token: ApiToken | None, now: datetime.datetime) -> None:
    """Make `call` a pending confirmation (SPEC 5): its id and expiry. At most
    AGENVOY_MAX_PENDING of them per token (SPEC 12.2)."""
    if token is not None:
        if connection.features.has_select_for_update:
            # Held until the insert commits: two processes taking the same token's calls count
            # one after the other. (SQLite has a single writer: its counts never overlap.)
            list(ApiToken.objects.select_for_update().filter(pk=token.pk).values_list("pk"))
        if ToolCall.objects.filter(token=token, status="pending").count() >= settings.AGENVOY_MAX_PENDING:
            raise CallError("too many pending confirmations for this token", 429)
    call.status = "pending"
    call.confirm_id = uuid.uuid4()
    call.expires_at = now + datetime.timedelta(seconds=settings.AGENVOY_CONFIRM_TIMEOUT)


def owner_channel(server_name: str) -> str | None:
    owner = Server.objects.filter(name=server_name).values_list("owner", flat=True).first()
    if not owner:
        return None
    return Worker.objects.filter(name=owner).values_list("channel", flat=True).first()


async def submit(call: ToolCall) -> None:
    """Set a recorded call going: a pending confirmation is announced (inbox, pages, anyone
    waiting); an approved call is handed to whoever holds its server; an ended one (a rule's
    deny, an already granted permission prompt) needs nothing."""
    if call.ended:
        return
    if call.status == "pending":
        await announce(str(call.id))
    else:
        await dispatch(call)


async def dispatch(call: ToolCall) -> None:
    """Run an approved call where its server's session is: here when the supervisor of this
    process holds it (claimed at creation, or claimed now), else on the owner's channel (if
    there is no owner, the next one picks it up from the database)."""
    if call.is_permission_prompt:
        return  # answered by the reply itself; there is no server to run it on
    runner, call_id = _runner, str(call.id)
    if runner is not None and call.worker == runner.name and call.started_at is not None:
        task = runner.run(call)
        _local[call_id] = task
        task.add_done_callback(lambda _t: _local.pop(call_id, None))
    elif runner is not None and runner.holds(call.server_name):
        runner.pick_up(call_id)
    else:
        channel = await db.run(owner_channel, call.server_name)
        if channel:
            await get_channel_layer().send(channel, {"type": "call.run", "call_id": call_id})


async def announce(call_id: str, pending: bool = True) -> None:
    """Wake whoever waits on this call, and, when the set of pending confirmations changed
    (`pending`), the browsers' pending lists: each open page re-reads them."""
    await control.asend_group(control.call_group(call_id), {"type": "call.changed", "call_id": call_id})
    if pending:
        await control.asend_group(control.PENDING, {"type": "pending.changed", "call_id": call_id})


# Seconds between `on_heartbeat`s while a call is pending: well under the 10 s of SPEC 13.3, so
# a client that resets a 15 s timer on progress never sees it run out.
HEARTBEAT = 5.0


async def wait(
    call: ToolCall,
    seconds: float,
    on_progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
    on_heartbeat: Callable[[], Awaitable[None]] | None = None,
) -> ToolCall:
    """The call once it has ended, or as it is after `seconds` (`inf`: until it ends).

    A call running in this process is waited on through its task (no database read); any
    other through the call's channel-layer group (pushed by whoever ends it), re-reading the
    row on every wake and at least every second, so a missed message costs at most a second.
    A pending call past its expiry is expired here. `on_progress(progress, total, message)`
    gets the upstream server's progress while it runs; `on_heartbeat()` is called every
    HEARTBEAT seconds while it is pending (SPEC 13.3). A cancelled wait (the client went away)
    leaves the call as it is: cancelling it is the caller's decision.
    """
    if call.ended or seconds <= 0:
        return call
    call_id = str(call.id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    task = _local.get(call_id)
    layer = get_channel_layer()
    # A run in this process that nobody wants progress of ends through its task alone.
    channel = await layer.new_channel() if task is None or on_progress is not None else None
    group = control.call_group(call_id)
    if channel is not None:
        await layer.group_add(group, channel)
    next_beat = loop.time()
    reread = task is None
    try:
        while True:
            if reread:
                fresh = await db.run(_get, call.id)
                if fresh is None:
                    return call
                call = fresh
                if call.ended:
                    return call
                if call.status == "pending" and call.expires_at and call.expires_at <= timezone.now():
                    if await db.run(expire, call.id):
                        await announce(call_id)
                    continue
            now = loop.time()
            if now >= deadline:
                return call
            beating = on_heartbeat is not None and call.status == "pending"
            if beating and now >= next_beat:
                await on_heartbeat()
                next_beat = now + HEARTBEAT
            timeout = min(deadline - now, 1.0, max(0.0, next_beat - now) if beating else 1.0)
            event = await _next(layer, channel, task, timeout)
            if event == "task":
                ended = None if task.cancelled() or task.exception() else task.result()
                task = None
                if ended is not None and ended.ended:
                    return ended
                reread = True
            elif event and event.get("type") == "call.progress":
                if on_progress is not None:
                    await on_progress(event["progress"], event.get("total"), event.get("message"))
                reread = False
            else:
                reread = task is None
    finally:
        if channel is not None:
            with _shielded():
                await layer.group_discard(group, channel)


def _shielded() -> anyio.CancelScope:
    return anyio.CancelScope(shield=True)


async def _next(layer, channel: str | None, task, timeout: float):
    """The next channel message, "task" when the local run ended, or None after `timeout`."""
    if channel is None:
        if task is None:
            await asyncio.sleep(timeout)
            return None
        done, _ = await asyncio.wait({task}, timeout=timeout)
        return "task" if done else None
    receive = asyncio.ensure_future(layer.receive(channel))
    waits = {receive} if task is None else {receive, task}
    try:
        done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not receive.done():
            receive.cancel()
    if receive in done:
        return receive.result()
    return "task" if task is not None and task in done else None


async def get(call_id) -> ToolCall | None:
    """The call as it is in the database (None when there is no such call)."""
    return await db.run(_get, call_id)


def _get(call_id) -> ToolCall | None:
    return ToolCall.objects.filter(id=call_id).first()


async def respond(session_id: str, confirm_id: str, body: dict, who: str, authorize=None) -> ToolCall:
    """A person's reply to a pending confirmation, from any door (`/v1`, the pages): record it
    (`reply`), run the call when approved, and tell the inbox and the waiters. Raises
    ReplyError with the API's message and status."""
    call = await db.run(reply, session_id, confirm_id, body, who, authorize)
    if call.status == "running":
        await dispatch(call)
    await announce(str(call.id))
    return call


def finish(call_id, status: str, result: str, **fields) -> bool:
    """End a call once: a conditional update from pending/running, so no end is overwritten."""
    ended = store.end(call_id, {"status": status, "result": result, "ended_at": timezone.now(), **fields})
    if ended:
        _count_end_of(call_id)
    return ended


def finish_call(call: ToolCall, status: str, result: str, **fields) -> ToolCall | None:
    """`finish` for the object the call path holds: on success the same fields are set on it
    (it then is the row as stored), and it is returned; None when the call had already ended."""
    ended = {"status": status, "result": result, "ended_at": timezone.now(), **fields}
    if not store.end(call.id, ended):
        return None
    for key, value in ended.items():
        setattr(call, key, value)
    _count_end(call)
    return call


def claim(call_id, worker: str) -> ToolCall | None:
    """Take a recorded, approved call no worker has started: a conditional UPDATE, so only
    one worker ever gets it (the way every call is claimed, but the one `create` records
    already claimed for this process, whose row nobody else could see yet)."""
    claimed = ToolCall.objects.filter(id=call_id, status="running", started_at__isnull=True).update(
        started_at=timezone.now(), worker=worker, attempts=F("attempts") + 1
    )
    return ToolCall.objects.filter(id=call_id).first() if claimed == 1 else None


class ReplyError(CallError):
    pass


def reply(session_id: str, confirm_id: str, body: dict, who: str, authorize=None) -> ToolCall:
    """Apply a person's reply to a pending confirmation (SPEC 5); returns the updated call.

    `authorize(call)`, when given, runs once the confirmation is found and raises to refuse
    the replier (the `/v1` token rights, SPEC 12.1), before the 410 of a decided call."""
    try:
        cid = uuid.UUID(str(confirm_id))
    except ValueError:
        raise ReplyError("confirmation not found", 404) from None
    call = ToolCall.objects.filter(confirm_id=cid, session_id=session_id).first()
    if call is None:
        raise ReplyError("confirmation not found", 404)
    if authorize is not None:
        authorize(call)
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
        prompt = call.is_permission_prompt
        with transaction.atomic():
            if prompt:  # nothing to run: the approval is the answer
                ended = {"status": "done", "result": json.dumps(_allow(call)), "ended_at": now}
                changed = pending.update(decision=decision, **ended, **decided)
            else:
                changed = pending.update(status="running", decision=decision, **decided)
            if changed and body.get("allow_turn"):
                # Bound to the token that made the call (SPEC 12.2), not to whoever replied.
                SessionAllowance.objects.create(session_id=session_id, token_id=call.token_id, granted_by=who)
            if changed and prompt and body.get("remember"):
                remember_permission(call.token, call.tool_name, who)
        if changed and body.get("remember") and not prompt:
            try:
                files.add_allow_entry(call.tool_name, repin=True)
            except files.ConfigFileError as exc:
                # The approval stands; only remembering it failed, and the log says why.
                log.warning("could not remember %s in allow_tool: %s", call.tool_name, exc)
    if not changed:
        raise ReplyError("confirmation already resolved or expired", 410)
    call.refresh_from_db()
    _count_reply(call)
    return call


def expire(call_id) -> bool:
    expired = (
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
    if expired:
        _count_end_of(call_id)
    return expired


def expire_due() -> list[str]:
    """Expire every pending confirmation past its time; returns the call ids expired."""
    due = ToolCall.objects.filter(status="pending", expires_at__lte=timezone.now())
    return [str(cid) for cid in due.values_list("id", flat=True) if expire(cid)]


def unstarted_for(servers: list[str]) -> list[str]:
    """Approved calls no worker has started yet (their message went to a worker that died)."""
    if not servers:
        return []
    rows = ToolCall.objects.filter(
        status="running", started_at__isnull=True, server_name__in=servers, kind=ToolCall.TOOL_CONFIRM
    )
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


async def stop(call_id) -> ToolCall:
    """Cancel a pending or running call from any door (SPEC 6): a pending one ends here, a
    running one is cancelled by the worker running it (here, or told on its channel), which
    records the end. Raises CallError 404/409."""
    call, tell_owner = await db.run(cancel, call_id)
    if not tell_owner:
        await announce(str(call.id))
    elif _runner is not None and call.worker == _runner.name:
        _runner.cancel(str(call.id))
    else:
        await control.cancel_call(call)
    return call


# --- permission prompts (SPEC 13.5) -----------------------------------------------------------
# `approval_prompt` on /mcp/_permission asks a person about an agent's own tool (Claude Code's
# `Bash`, `Edit`, ...). The prompt is a ToolCall of kind `permission_prompt` that is never run:
# a person's approval, a session allowance of that token and session, or a remembered grant of
# that token for the exact tool name ends it as `done`. `allow_tool` and modes never apply.


def create_permission_prompt(
    token: ApiToken,
    tool_name: object,
    tool_input: object,
    session_id: str,
    tool_use_id: str | None = None,
) -> ToolCall:
    """Record a permission prompt: already allowed (status `done`, decision `remember` or
    `session`) when a grant or a session allowance of this token covers it, else pending."""
    if not isinstance(tool_name, str) or not tool_name.strip():
        raise CallError("tool_name must be a non-empty string", 400)
    if len(tool_name) > 700:
        raise CallError("tool_name must be at most 700 characters", 400)
    if not isinstance(tool_input, dict):
        raise CallError("input must be a JSON object", 400)
    try:
        json.dumps(tool_input, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError):
        raise CallError(
            "input must be JSON that can be sent as UTF-8 (no lone surrogates, NaN or Infinity)", 400
        ) from None
    if tool_use_id is not None and not isinstance(tool_use_id, str):
        raise CallError("tool_use_id must be a string", 400)
    if not isinstance(session_id, str) or not session_id.strip() or len(session_id) > 200:
        raise CallError("session_id must be a non-empty string of at most 200 characters", 400)
    now = timezone.now()
    call = ToolCall(
        kind=ToolCall.PERMISSION_PROMPT,
        via="mcp",
        session_id=session_id,
        tool_name=tool_name,
        server_name="",
        tool=tool_name,
        arguments=tool_input,
        token=token,
        requested_by=token.name,
        created_at=now,
    )
    if _granted(token, tool_name):
        decision = "remember"
    elif session_allowed(token, session_id):
        decision = "session"
    else:
        decision = ""
    if decision:
        call.status, call.decision, call.decided_at, call.ended_at = "done", decision, now, now
        call.result = json.dumps(_allow(call))
    else:
        _wait_for_a_person(call, token, now)
    store.insert(call)
    if call.ended:  # allowed by a grant or a session allowance
        _count_end(call)
    return call


def permission_answer(call: ToolCall) -> dict:
    """What the agent receives for an ended permission prompt (SPEC 13.5), as the JSON object
    Claude Code's `--permission-prompt-tool` expects; anything but an approval is a deny."""
    if call.status == "done":
        return _allow(call)
    if call.status == "aborted":
        return {"behavior": "deny", "message": gate.ABORTED, "interrupt": True}
    # skipped and expired carry SPEC 5's texts; cancelled and the rest their own result.
    return {"behavior": "deny", "message": call.result or f"not allowed: {call.status}"}


def remember_permission(token: ApiToken | None, tool_name: str, who: str) -> PermissionGrant | None:
    """Remember `tool_name` for the token (once: an existing grant in force is kept)."""
    if token is None:
        return None
    grant = PermissionGrant.objects.filter(token=token, tool_name=tool_name, revoked_at__isnull=True).first()
    return grant or PermissionGrant.objects.create(token=token, tool_name=tool_name, granted_by=who)


def revoke_permission(grant_id: int) -> PermissionGrant | None:
    """Revoke a remembered grant; returns it when this call revoked it."""
    grant = PermissionGrant.objects.filter(pk=grant_id).first()
    if grant is None:
        return None
    changed = PermissionGrant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    return grant if changed else None


def _granted(token: ApiToken, tool_name: str) -> bool:
    return PermissionGrant.objects.filter(token=token, tool_name=tool_name, revoked_at__isnull=True).exists()


def _allow(call: ToolCall) -> dict:
    return {"behavior": "allow", "updatedInput": call.arguments}


# --- token revocation (SPEC 12.2) ---------------------------------------------------------------

TOKEN_REVOKED = "token revoked"


def revoke_token(token_id: int) -> tuple[bool, list[str]]:
    """Revoke a token: its next request gets 401, its session allowances end, and its pending
    confirmations end `cancelled` (result `token revoked`). Returns whether this revoked it
    and the ids of the calls it ended (to announce)."""
    now = timezone.now()
    with transaction.atomic():
        if not ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True).update(revoked_at=now):
            return False, []
        SessionAllowance.objects.filter(token_id=token_id, revoked_at__isnull=True).update(revoked_at=now)
    pending = ToolCall.objects.filter(token_id=token_id, status="pending").values_list("id", flat=True)
    ended = [str(cid) for cid in pending if finish(cid, "cancelled", TOKEN_REVOKED, decided_at=now)]
    return True, ended


# --- metrics (SPEC 18.3) ------------------------------------------------------------------------
# Each end of a call is counted where the write that ends it is made, once it is committed.


def _count_end(call: ToolCall) -> None:
    labels = (call.server_name, call.status, call.decision, call.started_at, call.ended_at)
    db.on_commit(lambda: metrics.call_ended(*labels))


def _count_end_of(call_id) -> None:
    """`_count_end` for a call ended by id: its labels read back from the row."""
    row = store.ended_row(call_id)
    if row is None:
        return
    server, status, decision, started_at, ended_at, confirm_id = row
    db.on_commit(lambda: metrics.call_ended(server, status, decision, started_at, ended_at))
    if confirm_id is not None and status in ("expired", "cancelled") and decision in ("", "expired"):
        # A confirmation that ended without a person's decision (a timeout, a cancel, a revoke).
        db.on_commit(lambda: metrics.confirmation_ended(status))


def _count_reply(call: ToolCall) -> None:
    """A person's (or one tap's) decision: the confirmation, and the call if that ended it."""
    outcome = "approved" if call.decision in ("approve", "remember", "session") else "denied"
    created_at, decided_at = call.created_at, call.decided_at
    db.on_commit(lambda: metrics.confirmation_ended(outcome, created_at, decided_at))
    if call.ended:
        _count_end(call)
