"""Tool calls from request to result: the call layer's path, beneath every door. Every door
(`POST /v1/mcp/call`, a page's try-it, the MCP endpoint) takes the same three steps, and every
reply to a confirmation the same one:

    local = calls.local_supervisor(request)    # the supervisor of this process, or None
    call = await db.write(calls.create, ..., local=local)  # validate, gate, record (one INSERT)
    await calls.submit(call, local)            # pending: the inbox is told; approved: it runs
    call = await calls.wait(call, seconds, local=local)  # ended, or as it is after `seconds`
    await calls.respond(..., local=local)      # a person's reply: record, run if approved, tell

An approved call runs in the supervisor that holds its server's session. When that is the
supervisor hosted by this process (a `LocalSupervisor`, which the process wiring,
`mcpcore.runtime`, puts in every request's ASGI scope and the door hands on here), the call is
recorded already claimed by it, runs as a task there, and `wait` waits on that task; otherwise
the owner is told through the channel layer and `wait` watches the call's group and the
database. Who ends a call writes it with one conditional UPDATE (`finish`). Nothing here
imports `mcp`, and nothing here holds a supervisor: each call is handed the one it may use.

Beside the path, in this package: `record` (recording a call and ending it), `approvals` (what
lets a call run unasked, permission prompts), `replies` (a person's reply, with changed
arguments or many at once; extension; expiry), `questions` (SPEC 20.4) and `notify` (SPEC 15). The doors use the names below from here.
"""

import asyncio
import datetime
import functools
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
from channels.layers import get_channel_layer
from django.utils import timezone

from .. import audit, control, db, gate, names, schemas
from ..choices import CallKind, CallStatus, Mode, RuleDecision, ServerState, Via
from ..db import cache, callsql
from ..models import ApiToken, Server, Tool, ToolCall, Worker, time_ordered_uuid
from ..oauth import upstream
from . import guards, notify, routing, traces
from .approvals import (
    allowed,
    app_grant_revoke,
    create_permission_prompt,
    grant,
    granted,
    limited,
    permission_answer,
    permission_grant_revoke,
    remember_permission,
    revoke_allowance,
    revoke_token,
    rule_for,
    rules_in_force,
    ruling,
    session_allowed,
    trusted,
)
from .questions import extend as extend_question
from .record import INTERRUPTED, WORKER_LOST, CallError, checked, finish, finish_call, record
from .replies import ReplyError, decide_many, expire, expire_due, extend_confirmation, reply

# The package's face: what the doors, the supervisor and the process wiring call.
__all__ = [
    "HEARTBEAT",
    "INTERRUPTED",
    "LOCAL",
    "WORKER_LOST",
    "CallError",
    "LocalSupervisor",
    "ReplyError",
    "agent_left",
    "announce",
    "app_grant_revoke",
    "cancel",
    "checked",
    "claim",
    "create",
    "create_permission_prompt",
    "create_read",
    "decide",
    "dispatch",
    "expire",
    "escalate_due",
    "expire_due",
    "extend",
    "finish",
    "finish_call",
    "get",
    "grant",
    "granted",
    "interrupt_for",
    "interrupt_orphans",
    "local_supervisor",
    "permission_answer",
    "remember_permission",
    "reply",
    "respond",
    "revoke_allowance",
    "permission_grant_revoke",
    "revoke_token",
    "rule_for",
    "rules_in_force",
    "session_allowed",
    "stop",
    "submit",
    "trusted",
    "unstarted_for",
    "wait",
]


class LocalSupervisor(Protocol):
    """What the call path needs of the supervisor hosted by the same process (implemented by
    `supervisor.Supervisor`); the only way the web side reaches a supervisor other than the
    database and the channel layer:

    - `name`: the worker name calls it claims are recorded under;
    - `holds(server_name)`: whether it holds that server's session (read from any thread);
    - `run(call)`: run a call claimed for it, as a task whose result is the ended call
      (None when someone else ended it first, say a cancel);
    - `pick_up(call_id)`: claim a recorded, approved call (`claim`) and run it;
    - `cancel(call_id)`: cancel a call it runs (its task's end records `cancelled`);
    - `running(call_id)`: the task of a call it runs, else None (its table of running calls
      is the one truth of which calls run in this process).
    """

    name: str

    def holds(self, server_name: str) -> bool: ...

    def run(self, call: ToolCall) -> "asyncio.Task[ToolCall | None]": ...

    def pick_up(self, call_id: str) -> None: ...

    def cancel(self, call_id: str) -> bool: ...

    def running(self, call_id: str) -> "asyncio.Task[ToolCall | None] | None": ...


# The ASGI scope key under which the process wiring (`mcpcore.runtime`) hands every request the
# supervisor of its process; absent in a web process that hosts none (scale-out, tests).
LOCAL = "agenvoy.supervisor"


def local_supervisor(request: object) -> LocalSupervisor | None:
    """The supervisor of this process as a request (Django's or the MCP SDK's) carries it in
    its ASGI scope; None when there is none, or no scope (Django's test client)."""
    scope = getattr(request, "scope", None)
    return scope.get(LOCAL) if isinstance(scope, dict) else None


def create(
    token: ApiToken | None,
    user: str,
    name: object,
    arguments: object,
    session_id: object,
    mode: object,
    via: str = Via.REST,
    local: LocalSupervisor | None = None,
    within: Callable[[str], bool] | None = None,
    client_asks: str = "",
    traceparent: str = "",
) -> ToolCall:
    """Check a call request (the contract's `schemas.CallRequest`: every door gets the same
    checks and messages), run it through the gate, and record it (SPEC 5, 7). Sync;
    from async code run it with `db.write`, so its INSERT shares a commit with the writes
    queued beside it (a sync page calls it directly). What a token limited to views and
    `within` may call: `_visible_tool`; a call that runs at once: `_run_at_once`.

    `client_asks` is what the MCP client making the call can answer of its server's questions
    (`ToolCall.client_asks`, SPEC 20.4); `traceparent` the door's span (`traces.current()`),
    kept with the call and the parent of its `gate` span (SPEC 27).
    """
    request = checked(
        schemas.CallRequest, {"name": name, "arguments": arguments, "session_id": session_id, "mode": mode}
    )
    tool = _visible_tool(token, request.name.strip(), within, name)
    server = tool.server
    _reachable(server)
    if request.mode == Mode.AUTO and token is not None and not token.may_auto:
        raise CallError("this token may not use auto mode", 403)
    session_id = request.session_id or time_ordered_uuid().hex
    started = traces.clock()
    decision, changed = _decide(token, tool, request.mode, session_id, request.arguments)
    traces.gate(traceparent, started, decision)
    now = timezone.now()
    call = callsql.new(
        session_id=session_id,
        tool_name=tool.registered_name,
        server_name=server.name,
        tool=tool.tool_name,
        arguments=request.arguments,
        mode=request.mode,
        token=token,
        requested_by=user or (token.name if token else ""),
        created_at=now,
        rule=decision.rule,
        # An ask rule decides before the pin is looked at; the inbox still wants to know.
        definition_changed=decision.reason == RuleDecision.ASK and changed(),
        via=via,
        client_asks=client_asks,
        traceparent=traceparent,
    )
    return record(call, decision, token, now, functools.partial(_run_at_once, local))


def _visible_tool(
    token: ApiToken | None, wanted: str, within: Callable[[str], bool] | None, name: object
) -> Tool:
    """The tool a call names. A token limited to views (SPEC 19), and `within` (the view of
    `/mcp/v/<view>`), see only their tools: any other name is an unknown tool, refused on the
    name alone before any lookup, so a hidden tool and one that does not exist take the same
    steps."""
    scope = cache.scope(token)
    hidden = (scope is not None and not scope(wanted)) or (within is not None and not within(wanted))
    tool = None if hidden else cache.tool(wanted)
    if tool is None:
        raise CallError(f"unknown tool: {name}", 404)
    return tool


def _decide(
    token: ApiToken | None, tool: Tool, mode: str, session_id: str, arguments: dict
) -> tuple[gate.Decision, Callable[[], bool]]:
    """The gate's decision on a tool call, and whether the tool's definition changed since it
    was trusted (asked once, when needed)."""

    @functools.cache
    def changed() -> bool:
        """A trusted tool whose definition no longer matches its pin (SPEC 14.1)."""
        if not (allowed(tool.registered_name) and tool.digest):
            return False
        pinned = cache.pin(tool.registered_name)
        return bool(pinned) and pinned != tool.digest

    in_force = rules_in_force()  # one read for the rule and the limits the gate asks of every call
    decision = gate.decide(
        mode,
        lambda: trusted(tool),
        lambda: session_allowed(token, session_id),
        rule=lambda: ruling(tool.registered_name, arguments, in_force=in_force),
        changed=changed,
        granted=lambda: granted(token, CallKind.TOOL_CONFIRM, tool.registered_name),
        limited=lambda: limited(token, tool.registered_name, arguments, in_force=in_force),
        repeated=lambda: guards.repeated(token, tool.registered_name, arguments),
    )
    return decision, changed


def _run_at_once(local: LocalSupervisor | None, call: ToolCall, reason: str, now: datetime.datetime) -> None:
    """A call that runs at once is recorded `running`; when `local` (the supervisor of this
    process) holds its server, already claimed by it (nobody else can see the row before it
    is committed, so this claim needs no condition), else unclaimed, for `claim` by the
    server's owner."""
    call.status, call.decision, call.decided_at = CallStatus.RUNNING, reason, now
    if local is not None and local.holds(call.server_name):
        call.started_at, call.worker = now, local.name


def _reachable(server: Server) -> None:
    """A call can go to the server now (connected, or connecting: it waits for the session);
    else the 503 of SPEC 6 and 16.1."""
    if server.state == ServerState.NEEDS_AUTHORIZATION:
        raise CallError(upstream.needs_authorization(server.name), 503)
    if server.state not in (ServerState.CONNECTED, ServerState.CONNECTING):
        raise CallError(f"server {server.name} is not connected: {server.last_error or server.state}", 503)


def create_read(
    token: ApiToken | None,
    kind: str,
    server: Server,
    name: str,
    arguments: dict,
    session_id: str,
    via: str = Via.MCP,
    local: LocalSupervisor | None = None,
    traceparent: str = "",
) -> ToolCall:
    """Record a prompt get (`kind` prompt: `name` is the prompt's own name, `arguments` its
    arguments) or a resource read (`kind` resource: `name` is the URI) on `server`, decided by
    the gate as every call is (SPEC 20.3): it runs unless a rule says otherwise (`prompt:` rules
    on the registered prompt name, `resource:` rules on the server with the URI). The door has
    already routed it (the server owns the prompt or URI, and the client may see it). Sync, like
    `create`: run it with `db.write` (`traceparent`: as for `create`)."""
    _reachable(server)
    if kind == CallKind.PROMPT:
        tool_name, tool, checked_as = names.registered_name(server.name, name), name, arguments
        rule_name = f"prompt:{tool_name}"
    else:
        tool_name, tool, checked_as = name[:700], "", {"uri": name}
        rule_name = f"resource:{server.name}"
    started, in_force = traces.clock(), rules_in_force()
    decision = gate.decide(
        Mode.CONFIRM,
        allowed=lambda: False,
        session_allowed=lambda: False,
        rule=lambda: ruling(rule_name, checked_as, in_force=in_force),
        reads=True,
        limited=lambda: limited(token, rule_name, checked_as, in_force=in_force),
    )
    traces.gate(traceparent, started, decision)
    now = timezone.now()
    call = callsql.new(
        kind=kind,
        session_id=session_id,
        tool_name=tool_name,
        server_name=server.name,
        tool=tool,
        arguments=checked_as,
        mode=Mode.CONFIRM,
        token=token,
        requested_by=token.name if token else "",
        created_at=now,
        rule=decision.rule,
        via=via,
        traceparent=traceparent,
    )
    return record(call, decision, token, now, functools.partial(_run_at_once, local))


def owner_channel(server_name: str) -> str | None:
    owner = Server.objects.filter(name=server_name).values_list("owner", flat=True).first()
    if not owner:
        return None
    return Worker.objects.filter(name=owner).values_list("channel", flat=True).first()


async def submit(call: ToolCall, local: LocalSupervisor | None = None) -> None:
    """Set a recorded call going: a pending confirmation is announced (inbox, pages, anyone
    waiting); an approved call is handed to whoever holds its server; an ended one (a rule's
    deny, an already granted permission prompt) needs nothing."""
    if call.ended:
        return
    if call.status == CallStatus.PENDING:
        await announce(str(call.id))
    else:
        await dispatch(call, local)


async def dispatch(
    call: ToolCall, local: LocalSupervisor | None = None, owners: dict[str, str | None] | None = None
) -> None:
    """Run an approved call where its server's session is: here when `local` (the supervisor
    of this process) holds it (claimed at creation, or claimed now), else on the owner's
    channel (if there is no owner, the next one picks it up from the database). `owners`
    keeps the owners' channels looked up, by server, across the calls of a batch."""
    if call.is_permission_prompt:
        return  # answered by the reply itself; there is no server to run it on
    if local is not None and call.worker == local.name and call.started_at is not None:
        local.run(call)
    elif local is not None and local.holds(call.server_name):
        local.pick_up(str(call.id))
    else:
        owners = {} if owners is None else owners
        if call.server_name not in owners:
            owners[call.server_name] = await db.run(owner_channel, call.server_name)
        channel = owners[call.server_name]
        if channel:
            await get_channel_layer().send(channel, {"type": "call.run", "call_id": str(call.id)})


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
    local: LocalSupervisor | None = None,
) -> ToolCall:
    """The call once it has ended, or as it is after `seconds` (`inf`: until it ends).

    A call running in this process (`local.running`) is waited on through its task (no
    database read); any other through the call's channel-layer group (pushed by whoever ends
    it), re-reading the row on every wake and at least every second, so a missed message
    costs at most a second.
    A pending call past its expiry is expired here. `on_progress(progress, total, message)`
    gets the upstream server's progress while it runs; `on_heartbeat()` is called every
    HEARTBEAT seconds while it is pending (SPEC 13.3). A cancelled wait (the client went away)
    leaves the call as it is: cancelling it is the caller's decision.
    """
    if call.ended or seconds <= 0:
        return call
    call_id = str(call.id)
    deadline = asyncio.get_running_loop().time() + seconds
    task = local.running(call_id) if local is not None else None
    layer = get_channel_layer()
    # A run in this process that nobody wants progress of ends through its task alone. The
    # group is joined and left here, not in an async context manager: every call waits, and
    # an async generator's manager costs each about eight more Python calls (branch perf-house).
    channel = await layer.new_channel() if task is None or on_progress is not None else None
    group = control.call_group(call_id)
    if channel is not None:
        await layer.group_add(group, channel)
    try:
        return await _watch(call, deadline, task, layer, channel, on_progress, on_heartbeat)
    finally:
        if channel is not None:  # left even when the wait is cancelled
            with _shielded():
                await layer.group_discard(group, channel)


async def _watch(
    call: ToolCall, deadline: float, task, layer, channel, on_progress, on_heartbeat
) -> ToolCall:
    """`wait`'s loop: the next event (a message, the local task's end, a second gone by, a
    heartbeat due) until the call ends or `deadline` (the loop's time) passes."""
    loop = asyncio.get_running_loop()
    next_beat = loop.time()
    reread = task is None
    while True:
        if reread:
            call, over = await _reread(call)
            if over:
                return call
        now = loop.time()
        if now >= deadline:
            return call
        heartbeat = on_heartbeat if call.status == CallStatus.PENDING else None
        if heartbeat is not None and now >= next_beat:
            await heartbeat()
            next_beat = now + HEARTBEAT
        timeout = min(deadline - now, 1.0, max(0.0, next_beat - now) if heartbeat is not None else 1.0)
        event = await _next(layer, channel, task, timeout)
        if event == "task":
            assert task is not None  # _next answers "task" only for the task it was given
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


async def _reread(call: ToolCall) -> tuple[ToolCall, bool]:
    """The call as stored, and whether the wait is over (it ended, or its row is gone). A
    pending call is re-read every second by each of its waiters: its status alone first (no
    ORM, no thread hop), the whole row once that has moved. One past its expiry is expired
    here (and read again); one whose row was extended meanwhile (SPEC 24.4) is read again and
    waited on to its new expiry."""
    stale = False
    while True:
        if (
            stale
            or call.status != CallStatus.PENDING
            or await db.read(callsql.status, call.id) != CallStatus.PENDING
        ):
            fresh = await db.run(_get, call.id)
            if fresh is None:
                return call, True
            call = fresh
        if call.ended:
            return call, True
        if not (call.status == CallStatus.PENDING and call.expires_at and call.expires_at <= timezone.now()):
            return call, False
        if await db.run(expire, call.id):
            await announce(str(call.id))
        stale = True


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


async def respond(
    session_id: str,
    confirm_id: str,
    body: dict,
    who: "str | routing.Replier",
    authorize=None,
    local: LocalSupervisor | None = None,
    by: audit.Actor | None = None,
) -> ToolCall:
    """A person's reply to a pending confirmation, from any door (`/v1`, the pages): record it
    (`reply`), run the call when approved, and tell the inbox and the waiters. Raises
    ReplyError with the API's message and status. `by`: who replied, for the audit rows of
    the allowances it makes (default: `who`)."""
    call = await db.run(reply, session_id, confirm_id, body, who, authorize, by)
    traces.confirmation(call)
    if call.status == CallStatus.RUNNING:
        await dispatch(call, local)
    await announce(str(call.id))
    return call


async def decide(
    ids: list[str],
    approve: bool,
    reason: str,
    who: "str | routing.Replier",
    refusal: Callable[[ToolCall], str | None] | None = None,
    local: LocalSupervisor | None = None,
    by: audit.Actor | None = None,
) -> dict[str, str]:
    """Many pending confirmations approved or denied at once, from any door (SPEC 24.6): each
    id answered as its own reply would be (`refusal(call)`: the replier's refusal of that
    call, or None), recorded in bulk (`decide_many`); the approved ones run, each call's
    waiters are told, and the inbox once. Returns each id's result: "ok" or the error."""
    results, decided = await db.run(decide_many, ids, approve, reason, who, refusal, by)
    owners: dict[str, str | None] = {}
    for call in decided:
        if call.status == CallStatus.RUNNING:
            await dispatch(call, local, owners)
    await asyncio.gather(*(announce(str(call.id), pending=False) for call in decided))
    if decided:
        await control.asend_group(control.PENDING, {"type": "pending.changed", "call_id": ""})
    return results


def escalate_due() -> list[str]:
    """Escalate what is due (SPEC 24.3, `routing.escalate_due`), its notifications written with
    each claim; the supervisor's tick runs it every few seconds. Returns the call ids."""
    return routing.escalate_due(notify.queue_escalated)


async def extend(item_id: str, who: "str | routing.Replier", authorize=None) -> datetime.datetime | None:
    """Extend a pending item (SPEC 24.4) from any door: a confirmation (its `confirm_id`) or a
    server's question (its id), `authorize(call or question)` refusing as a reply's check does
    (12.1). Waiters and the inbox are told; returns the new expiry. Raises ReplyError."""
    call = await db.run(extend_confirmation, item_id, who, authorize)
    if call is not None:
        await announce(str(call.id))
        return call.expires_at
    return (await db.run(extend_question, item_id, who, authorize)).expires_at


def agent_left(call_id, left: bool) -> bool:
    """Mark a pending call as one its agent stopped waiting for (`left`), or as waited on
    again; True when the row changed (the inbox is then told)."""
    return bool(
        ToolCall.objects.filter(id=call_id, status=CallStatus.PENDING, agent_left_at__isnull=left).update(
            agent_left_at=timezone.now() if left else None
        )
    )


def claim(call_id, worker: str) -> ToolCall | None:
    """Take a recorded, approved call no worker has started: a conditional UPDATE, so only
    one worker ever gets it (the way every call is claimed, but the one `create` records
    already claimed for this process, whose row nobody else could see yet)."""
    claimed = ToolCall.objects.filter(id=call_id, status=CallStatus.RUNNING, started_at__isnull=True).update(
        started_at=timezone.now(), worker=worker
    )
    return ToolCall.objects.filter(id=call_id).first() if claimed == 1 else None


def unstarted_for(servers: list[str]) -> list[str]:
    """Approved calls no worker has started yet (their message went to a worker that died)."""
    if not servers:
        return []
    rows = ToolCall.objects.filter(
        status=CallStatus.RUNNING,
        started_at__isnull=True,
        server_name__in=servers,
    ).exclude(kind=CallKind.PERMISSION_PROMPT)
    return [str(cid) for cid in rows.values_list("id", flat=True)]


def interrupt_orphans(worker_alive) -> int:
    """Calls that were running in a worker that is gone end as interrupted."""
    count = 0
    rows = ToolCall.objects.filter(status=CallStatus.RUNNING, started_at__isnull=False)
    for cid, worker in rows.values_list("id", "worker"):
        if not worker_alive(worker):
            count += finish(cid, CallStatus.INTERRUPTED, INTERRUPTED, is_error=True)
    return count


def interrupt_for(server_name: str, worker: str) -> int:
    """Calls a dead worker had started on a server end as interrupted, with a clear message."""
    rows = ToolCall.objects.filter(
        status=CallStatus.RUNNING, started_at__isnull=False, server_name=server_name, worker=worker
    )
    ended = [
        cid
        for cid in rows.values_list("id", flat=True)
        if finish(cid, CallStatus.INTERRUPTED, WORKER_LOST, is_error=True)
    ]
    return len(ended)


def cancel(call_id) -> tuple[ToolCall, bool]:
    """Cancel a pending or running call; returns (call, whether the owner must be told)."""
    call = ToolCall.objects.filter(id=call_id).first()
    if call is None:
        raise CallError("call not found", 404)
    if call.ended:
        raise CallError("call already ended", 409)
    if call.status == CallStatus.PENDING or call.started_at is None:
        if finish(call.id, CallStatus.CANCELLED, "cancelled", decided_at=timezone.now()):
            call.refresh_from_db()
            return call, False
        call.refresh_from_db()
        if call.ended:
            raise CallError("call already ended", 409)
    return call, True


async def stop(call_id, local: LocalSupervisor | None = None) -> ToolCall:
    """Cancel a pending or running call from any door (SPEC 6): a pending one ends here, a
    running one is cancelled by the worker running it (`local`, or told on its channel), which
    records the end. Raises CallError 404/409."""
    call, tell_owner = await db.run(cancel, call_id)
    if not tell_owner:
        await announce(str(call.id))
    elif local is not None and call.worker == local.name:
        local.cancel(str(call.id))
    else:
        await control.cancel_call(call)
    return call
