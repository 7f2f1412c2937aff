"""Tool calls from request to result. Every door (`POST /v1/mcp/call`, a page's try-it, the
MCP endpoint) takes the same three steps, and every reply to a confirmation the same one:

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

from .. import allowlist, audit, control, db, files, gate, metrics, names, oauth, rules, schemas
from ..choices import AuditAction, CallDecision, CallKind, CallStatus, Mode, RuleDecision, ServerState, Via
from ..db import cache, callsql
from ..models import (
    AllowEntry,
    ApiToken,
    PermissionGrant,
    Server,
    SessionAllowance,
    Tool,
    ToolCall,
    Worker,
    iso,
    time_ordered_uuid,
)

log = logging.getLogger("mcpcore.calls")


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


class CallError(Exception):
    """A request the gate refuses; message and status are the API's answer."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def checked[M: schemas.Contract](model: type[M], data: dict, error: type["CallError"] | None = None) -> M:
    """`data` as `model` (the input contract, mcpcore.schemas); its first error is raised as
    `error` (CallError) with status 400."""
    try:
        return model.check(data)
    except schemas.InputError as exc:
        raise (error or CallError)(exc.message, 400) from None


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


def trusted(tool: Tool) -> bool:
    """Whether `allow_tool` trusts the tool now. A tool with a definition digest is trusted only
    with its pin written (SPEC 14.1: pinned at the moment it becomes trusted), so no definition
    can change between trust and pin unseen. An entry another program wrote that the file's
    pick-up has not reached yet is pinned here, by the first call that sees it: the call runs
    at once, as SPEC 2.2 has it, instead of waiting for a person (issue 39.7)."""
    name = tool.registered_name
    if not allowed(name):
        return False
    if not tool.digest or cache.pin(name):
        return True
    files.sync_pins(files.current_allow(), only=name)
    return bool(cache.pin(name))


_rules: dict = {"key": None, "set": None}


def rules_in_force() -> rules.RuleSet:
    """The argument rules (SPEC 14.2), read like `allowed` reads `allow_tool`: kept until the
    file's stat changes; a file with a bad line gives the last good (mirrored) rules."""
    key = files.stat_key(files.RULES)
    if key is None or key != _rules["key"]:
        found, _ = files.current_rules(mirror=True)
        _rules["key"], _rules["set"] = key, rules.RuleSet(found)
    return _rules["set"]


def rule_for(tool_name: str, arguments: dict, form: str | None = None) -> tuple[str, str] | None:
    """(decision, line) of the rule that decides a call checked under `tool_name`, or None;
    `form` as `RuleSet.check` takes it."""
    rule = rules_in_force().check(tool_name, arguments, form)
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
    via: str = Via.REST,
    local: LocalSupervisor | None = None,
    within: Callable[[str], bool] | None = None,
    client_asks: str = "",
) -> ToolCall:
    """Check a call request (the contract's `schemas.CallRequest`: every door gets the same
    checks and messages), run it through the gate, and record it (SPEC 5, 7). Sync;
    from async code run it with `db.write`, so its INSERT shares a commit with the writes
    queued beside it (a sync page calls it directly).

    A call that runs at once is recorded `running`; when `local` (the supervisor of this
    process) holds its server, already claimed by it (nobody else can see the row before it
    is committed, so this claim needs no condition), else unclaimed, for `claim` by the
    server's owner.

    A token limited to views (SPEC 19), and `within` (the view of `/mcp/v/<view>`), see only
    their tools: any other name is an unknown tool, refused on the name alone before any
    lookup, so a hidden tool and one that does not exist take the same steps.

    `client_asks` is what the MCP client making the call can answer of its server's questions
    (`ToolCall.client_asks`, SPEC 20.4).
    """
    request = checked(
        schemas.CallRequest, {"name": name, "arguments": arguments, "session_id": session_id, "mode": mode}
    )
    arguments, norm = request.arguments, request.mode
    wanted = request.name.strip()
    scope = cache.scope(token)
    hidden = (scope is not None and not scope(wanted)) or (within is not None and not within(wanted))
    tool = None if hidden else cache.tool(wanted)
    if tool is None:
        raise CallError(f"unknown tool: {name}", 404)
    server = tool.server
    _reachable(server)
    if norm == Mode.AUTO and token is not None and not token.may_auto:
        raise CallError("this token may not use auto mode", 403)
    session_id = request.session_id or time_ordered_uuid().hex

    @functools.cache
    def changed() -> bool:
        """A trusted tool whose definition no longer matches its pin (SPEC 14.1)."""
        if not (allowed(tool.registered_name) and tool.digest):
            return False
        pinned = cache.pin(tool.registered_name)
        return bool(pinned) and pinned != tool.digest

    decision = gate.decide(
        norm,
        lambda: trusted(tool),
        lambda: session_allowed(token, session_id),
        rule=lambda: rule_for(tool.registered_name, arguments),
        changed=changed,
        granted=lambda: granted(token, CallKind.TOOL_CONFIRM, tool.registered_name),
    )
    now = timezone.now()
    call = callsql.new(
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
        definition_changed=decision.reason == RuleDecision.ASK and changed(),
        via=via,
        client_asks=client_asks,
    )
    return _record(call, decision, token, local, now)


def _reachable(server: Server) -> None:
    """A call can go to the server now (connected, or connecting: it waits for the session);
    else the 503 of SPEC 6 and 16.1."""
    if server.state == ServerState.NEEDS_AUTHORIZATION:
        raise CallError(oauth.needs_authorization(server.name), 503)
    if server.state not in (ServerState.CONNECTED, ServerState.CONNECTING):
        raise CallError(f"server {server.name} is not connected: {server.last_error or server.state}", 503)


def _record(
    call: ToolCall, decision: gate.Decision, token: ApiToken | None, local: LocalSupervisor | None, now
) -> ToolCall:
    """Apply the gate's decision to a new call of a server and record it (one INSERT): a rule's
    deny ends it with nobody asked and nothing run; a run is recorded `running` (claimed by
    `local` when it holds the server); else it waits for a person."""
    if decision.reason == RuleDecision.DENY:
        call.status, call.decision = CallStatus.SKIPPED, CallDecision.RULE
        call.decided_at = call.ended_at = now
        call.decided_by, call.result = "rule", gate.denied_text(decision.rule)
    elif decision.run:
        call.status, call.decision, call.decided_at = CallStatus.RUNNING, decision.reason, now
        if local is not None and local.holds(call.server_name):
            call.started_at, call.worker = now, local.name
    else:
        _wait_for_a_person(call, token, now)
    callsql.insert(call)
    if call.ended:  # denied by a rule
        _count_end(call)
    if call.status == CallStatus.PENDING and token is not None and not _still_live(token):
        # Revoked between this request's auth and now: revoke_token's sweep may have missed it.
        finish(call.id, CallStatus.CANCELLED, TOKEN_REVOKED, decided_at=timezone.now())
        call.refresh_from_db()
    return call


def create_read(
    token: ApiToken | None,
    kind: str,
    server: Server,
    name: str,
    arguments: dict,
    session_id: str,
    via: str = Via.MCP,
    local: LocalSupervisor | None = None,
) -> ToolCall:
    """Record a prompt get (`kind` prompt: `name` is the prompt's own name, `arguments` its
    arguments) or a resource read (`kind` resource: `name` is the URI) on `server`, decided by
    the gate as every call is (SPEC 20.3): it runs unless a rule says otherwise (`prompt:` rules
    on the registered prompt name, `resource:` rules on the server with the URI). The door has
    already routed it (the server owns the prompt or URI, and the client may see it). Sync, like
    `create`: run it with `db.write`."""
    _reachable(server)
    if kind == CallKind.PROMPT:
        tool_name, tool, checked_as = names.registered_name(server.name, name), name, arguments
        rule_name = f"prompt:{tool_name}"
    else:
        tool_name, tool, checked_as = name[:700], "", {"uri": name}
        rule_name = f"resource:{server.name}"
    decision = gate.decide(
        Mode.CONFIRM,
        allowed=lambda: False,
        session_allowed=lambda: False,
        rule=lambda: rule_for(rule_name, checked_as),
        reads=True,
    )
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
    )
    return _record(call, decision, token, local, now)


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
        if (
            ToolCall.objects.filter(token=token, status=CallStatus.PENDING).count()
            >= settings.AGENVOY_MAX_PENDING
        ):
            raise CallError("too many pending confirmations for this token", 429)
    call.status = CallStatus.PENDING
    call.confirm_id = uuid.uuid4()
    call.expires_at = now + datetime.timedelta(seconds=settings.AGENVOY_CONFIRM_TIMEOUT)


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


async def dispatch(call: ToolCall, local: LocalSupervisor | None = None) -> None:
    """Run an approved call where its server's session is: here when `local` (the supervisor
    of this process) holds it (claimed at creation, or claimed now), else on the owner's
    channel (if there is no owner, the next one picks it up from the database)."""
    if call.is_permission_prompt:
        return  # answered by the reply itself; there is no server to run it on
    call_id = str(call.id)
    if local is not None and call.worker == local.name and call.started_at is not None:
        local.run(call)
    elif local is not None and local.holds(call.server_name):
        local.pick_up(call_id)
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
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    task = local.running(call_id) if local is not None else None
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
                # A pending call is re-read every second by each of its waiters: its status
                # alone first (no ORM, no thread hop), the whole row once that has moved.
                if (
                    call.status != CallStatus.PENDING
                    or await db.read(callsql.status, call.id) != CallStatus.PENDING
                ):
                    fresh = await db.run(_get, call.id)
                    if fresh is None:
                        return call
                    call = fresh
                if call.ended:
                    return call
                if (
                    call.status == CallStatus.PENDING
                    and call.expires_at
                    and call.expires_at <= timezone.now()
                ):
                    if await db.run(expire, call.id):
                        await announce(call_id)
                    continue
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


async def respond(
    session_id: str,
    confirm_id: str,
    body: dict,
    who: str,
    authorize=None,
    local: LocalSupervisor | None = None,
    by: audit.Actor | None = None,
) -> ToolCall:
    """A person's reply to a pending confirmation, from any door (`/v1`, the pages): record it
    (`reply`), run the call when approved, and tell the inbox and the waiters. Raises
    ReplyError with the API's message and status. `by`: who replied, for the audit rows of
    the allowances it makes (default: `who`)."""
    call = await db.run(reply, session_id, confirm_id, body, who, authorize, by)
    if call.status == CallStatus.RUNNING:
        await dispatch(call, local)
    await announce(str(call.id))
    return call


def agent_left(call_id, left: bool) -> bool:
    """Mark a pending call as one its agent stopped waiting for (`left`), or as waited on
    again; True when the row changed (the inbox is then told)."""
    return bool(
        ToolCall.objects.filter(id=call_id, status=CallStatus.PENDING)
        .exclude(agent_left_at__isnull=not left)
        .update(agent_left_at=timezone.now() if left else None)
    )


def finish(call_id, status: str, result: str, **fields) -> bool:
    """End a call once: a conditional update from pending/running, so no end is overwritten."""
    ended = callsql.end(call_id, {"status": status, "result": result, "ended_at": timezone.now(), **fields})
    if ended:
        _count_end_of(call_id)
    return ended


def finish_call(call: ToolCall, status: str, result: str, **fields) -> ToolCall | None:
    """`finish` for the object the call path holds: on success the same fields are set on it
    (it then is the row as stored), and it is returned; None when the call had already ended."""
    ended = {"status": status, "result": result, "ended_at": timezone.now(), **fields}
    if not callsql.end(call.id, ended):
        return None
    for key, value in ended.items():
        setattr(call, key, value)
    _count_end(call)
    return call


def claim(call_id, worker: str) -> ToolCall | None:
    """Take a recorded, approved call no worker has started: a conditional UPDATE, so only
    one worker ever gets it (the way every call is claimed, but the one `create` records
    already claimed for this process, whose row nobody else could see yet)."""
    claimed = ToolCall.objects.filter(id=call_id, status=CallStatus.RUNNING, started_at__isnull=True).update(
        started_at=timezone.now(), worker=worker
    )
    return ToolCall.objects.filter(id=call_id).first() if claimed == 1 else None


class ReplyError(CallError):
    pass


def reply(
    session_id: str, confirm_id: str, body: dict, who: str, authorize=None, by: audit.Actor | None = None
) -> ToolCall:
    """Apply a person's reply to a pending confirmation (SPEC 5); returns the updated call.

    `authorize(call)`, when given, runs once the confirmation is found and raises to refuse
    the replier (the `/v1` token rights, SPEC 12.1); then `body` is checked (`schemas.Reply`),
    before the 410 of a decided call. The allowances it makes are audited as `by`'s (default:
    `who`); "approve and remember" of a tool call is a `trust.change` (it writes allow_tool)."""
    by = by or audit.Actor(who)
    try:
        cid = uuid.UUID(str(confirm_id))
    except ValueError:
        raise ReplyError("confirmation not found", 404) from None
    call = ToolCall.objects.filter(confirm_id=cid, session_id=session_id).first()
    if call is None:
        raise ReplyError("confirmation not found", 404)
    if authorize is not None:
        authorize(call)
    answer = checked(schemas.Reply, body, ReplyError)
    reason = answer.reason
    grant_for = int(answer.remember_for or 0)
    if call.is_prompt_or_resource and answer.approve and (answer.remember or answer.allow_turn or grant_for):
        # Only an `ask` rule holds these, and it outranks allow_tool, allowances and grants
        # (SPEC 14.2): remembering would write nothing that lets the next one run (docs/decisions.md).
        raise ReplyError(
            f"a {call.kind} call is approved once or denied: remember, allow_turn and remember_for do not apply",
            400,
        )
    now = timezone.now()
    if call.status == CallStatus.PENDING and call.expires_at and call.expires_at <= now:
        expire(call.id)
        raise ReplyError("confirmation already resolved or expired", 410)
    pending = ToolCall.objects.filter(id=call.id, status=CallStatus.PENDING)
    decided = {"decided_by": who, "decided_at": now}
    if answer.abort or not answer.approve:
        aborted = answer.abort
        changed = pending.update(
            status=CallStatus.ABORTED if aborted else CallStatus.SKIPPED,
            decision=CallDecision.ABORT if aborted else CallDecision.DENY,
            reason=reason,
            result=gate.ABORTED if aborted else gate.skipped_text(reason),
            ended_at=now,
            **decided,
        )
    else:
        decision = (
            CallDecision.REMEMBER
            if answer.remember
            else CallDecision.SESSION
            if answer.allow_turn
            else CallDecision.GRANT
            if grant_for
            else CallDecision.APPROVE
        )
        prompt = call.is_permission_prompt
        with transaction.atomic():
            if prompt:  # nothing to run: the approval is the answer
                ended = {"status": CallStatus.DONE, "result": json.dumps(_allow(call)), "ended_at": now}
                changed = pending.update(decision=decision, **ended, **decided)
            else:
                changed = pending.update(status=CallStatus.RUNNING, decision=decision, **decided)
            if changed and answer.allow_turn:
                # Bound to the token that made the call (SPEC 12.2), not to whoever replied.
                row = SessionAllowance.objects.create(
                    session_id=session_id, token_id=call.token_id, granted_by=who
                )
                audit.record(
                    AuditAction.ALLOWANCE_ADD,
                    session_id,
                    actor=by,
                    after=allowance_state(row, call.tool_name),
                )
            if changed and prompt and answer.remember:
                remember_permission(call.token, call.tool_name, who, by)
            if changed and grant_for:
                grant(call.token, call.kind, call.tool_name, who, grant_for, by)
        if changed and answer.remember and not prompt:
            try:
                files.add_allow_entry(call.tool_name, repin=True, by=by)
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
        ToolCall.objects.filter(id=call_id, status=CallStatus.PENDING).update(
            status=CallStatus.EXPIRED,
            decision=CallDecision.EXPIRED,
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
    due = ToolCall.objects.filter(status=CallStatus.PENDING, expires_at__lte=timezone.now())
    return [str(cid) for cid in due.values_list("id", flat=True) if expire(cid)]


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


WORKER_LOST = "interrupted: the worker running this call stopped; the call may or may not have run"


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
    via: str = "mcp",
    cwd: str = "",
) -> ToolCall:
    """Check (`schemas.PromptRequest`) and record a permission prompt (SPEC 13.5, 17.1), from
    `/mcp/_permission` (`via` mcp) or a Claude Code hook (`via` hook, with the agent's `cwd`).
    Decided by the gate (`gate.decide`, as every call is) with neither mode nor allow-list:
    argument rules (14.2) first, matched on the agent's own `tool_name`: a deny ends it
    `skipped` at once, an ask makes it wait whatever else would allow it. Else it is allowed at
    once (status `done`) by an allow rule (decision `rule`), a session allowance (`session`) or
    a grant of this token (`remember`, or `grant` for a time-boxed one); else it is pending."""
    prompt = checked(
        schemas.PromptRequest,
        {"tool_name": tool_name, "input": tool_input, "tool_use_id": tool_use_id, "session_id": session_id},
    )
    tool_name, tool_input, session_id = prompt.tool_name, prompt.input, prompt.session_id
    now = timezone.now()
    call = ToolCall(
        kind=CallKind.PERMISSION_PROMPT,
        via=via,
        cwd=cwd[:1000],
        session_id=session_id,
        tool_name=tool_name,
        server_name="",
        tool=tool_name,
        arguments=tool_input,
        token=token,
        requested_by=token.name,
        created_at=now,
    )
    grant_kind = functools.cache(lambda: _prompt_grant(token, tool_name))
    decision = gate.decide(
        Mode.CONFIRM,  # modes do not apply to permission prompts, nor does allow_tool (13.5)
        allowed=lambda: False,
        session_allowed=lambda: session_allowed(token, session_id),
        # The agent names its own tool: a `prompt:...` name must not escape the plain rules.
        rule=lambda: rule_for(tool_name, tool_input, rules.PLAIN),
        granted=lambda: bool(grant_kind()),
    )
    call.rule = decision.rule
    if decision.reason == RuleDecision.DENY:
        call.status, call.decision, call.decided_at, call.ended_at = (
            CallStatus.SKIPPED,
            CallDecision.RULE,
            now,
            now,
        )
        call.decided_by, call.result = "rule", gate.denied_text(call.rule)  # the rule's text, above
    elif decision.run:
        # A grant says which kind it is: remembered for good, or time-boxed (17.3).
        reason = grant_kind() if decision.reason == CallDecision.GRANT else decision.reason
        call.status, call.decision, call.decided_at, call.ended_at = CallStatus.DONE, reason, now, now
        call.decided_by = AUTOMATIC[reason]
        call.result = json.dumps(_allow(call))
    else:
        _wait_for_a_person(call, token, now)
    callsql.insert(call)
    if call.ended:  # allowed by a grant or a session allowance
        _count_end(call)
    return call


def permission_answer(call: ToolCall) -> dict:
    """What the agent receives for an ended permission prompt (SPEC 13.5), as the JSON object
    Claude Code's `--permission-prompt-tool` expects; anything but an approval is a deny."""
    if call.status == CallStatus.DONE:
        return _allow(call)
    if call.status == CallStatus.ABORTED:
        return {"behavior": "deny", "message": gate.ABORTED, "interrupt": True}
    # skipped and expired carry SPEC 5's texts; cancelled and the rest their own result.
    return {"behavior": "deny", "message": call.result or f"not allowed: {call.status}"}


def remember_permission(
    token: ApiToken | None, tool_name: str, who: str, by: audit.Actor | None = None
) -> PermissionGrant | None:
    """Remember `tool_name` for the token (once: an existing grant in force is kept)."""
    if token is None:
        return None
    found = PermissionGrant.objects.filter(
        token=token, kind=CallKind.PERMISSION_PROMPT, tool_name=tool_name, revoked_at__isnull=True
    ).filter(expires_at__isnull=True)
    kept = found.first()
    if kept is not None:
        return kept
    with transaction.atomic():
        made = PermissionGrant.objects.create(
            token=token, kind=CallKind.PERMISSION_PROMPT, tool_name=tool_name, granted_by=who
        )
        audit.record(
            AuditAction.ALLOWANCE_ADD, tool_name, actor=by or audit.Actor(who), after=grant_state(made)
        )
    return made


def revoke_permission(grant_id: int, by: audit.Actor = audit.BY_SYSTEM) -> PermissionGrant | None:
    """Revoke a remembered grant; returns it when this call revoked it."""
    return _revoke(PermissionGrant, grant_id, by, lambda g: (g.tool_name, grant_state(g)))


def revoke_allowance(allowance_id: int, by: audit.Actor) -> SessionAllowance | None:
    """End an "approve for session" allowance; returns it when this call ended it."""
    return _revoke(SessionAllowance, allowance_id, by, lambda a: (a.session_id, allowance_state(a)))


def _revoke(model, pk: int, by: audit.Actor, described):
    """Set `revoked_at` on one allowance or grant still in force, with its `allowance.revoke`
    row (`described(row)`: its object and state); the row when this call ended it."""
    row = model.objects.select_related("token").filter(pk=pk).first()
    if row is None:
        return None
    with transaction.atomic():
        changed = model.objects.filter(pk=row.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        if changed:
            object, state = described(row)
            audit.record(AuditAction.ALLOWANCE_REVOKE, object, actor=by, before=state)
    return row if changed else None


def allowance_state(row: SessionAllowance, tool_name: str = "") -> dict:
    """What the audit keeps of an "approve for session": for whom (the token; none for the
    console's own calls), which session, and the call's tool it was given on."""
    state = {
        "allowance": "session",
        "token": row.token.name if row.token else "",
        "session_id": row.session_id,
    }
    return {**state, "approved_on": tool_name} if tool_name else state


def grant_state(row: PermissionGrant) -> dict:
    """What the audit keeps of a grant: what (the tool, of which kind of call), for whom, and
    until when (None: until revoked, "approve and remember")."""
    return {
        "allowance": "remember" if row.expires_at is None else "for a time",
        "token": row.token.name,
        "tool": row.tool_name,
        "kind": row.kind,
        "until": iso(row.expires_at),
    }


# Who "decided" a permission prompt that nobody was asked about (its history, a hook's reason).
AUTOMATIC = {"rule": "rule", "remember": "remembered grant", "grant": "grant", "session": "session allowance"}


def _prompt_grant(token: ApiToken, tool_name: str) -> str:
    """`remember` or `grant` when a grant of this token covers a permission prompt, else ""."""
    rows = PermissionGrant.in_force().filter(
        token=token, kind=CallKind.PERMISSION_PROMPT, tool_name=tool_name
    )
    ends = list(rows.values_list("expires_at", flat=True)[:10])
    if not ends:
        return ""
    return "remember" if None in ends else "grant"


def granted(token: ApiToken | None, kind: str, tool_name: str) -> bool:
    """Whether a grant of `tool_name` to this token is in force for calls of `kind`."""
    if token is None:
        return False
    return PermissionGrant.in_force().filter(token=token, kind=kind, tool_name=tool_name).exists()


def grant(
    token: ApiToken | None, kind: str, tool_name: str, who: str, seconds: int, by: audit.Actor | None = None
) -> PermissionGrant | None:
    """Grant `tool_name` to the token for `seconds` (SPEC 17.3): later calls of that tool by that
    token, in any session, run at once until then. A grant of the same tool already in force
    lasts to the later of the two ends; one without an end is left as it is."""
    if token is None:
        return None  # the console's own calls (try-it) have no token to grant to
    now = timezone.now()
    until = now + datetime.timedelta(seconds=seconds)
    rows = PermissionGrant.in_force(now).filter(token=token, kind=kind, tool_name=tool_name)
    current = rows.order_by(F("expires_at").desc(nulls_first=True)).first()
    if current is not None and (current.expires_at is None or current.expires_at >= until):
        return current
    by = by or audit.Actor(who)
    with transaction.atomic():
        if current is not None:
            before = grant_state(current)
            PermissionGrant.objects.filter(pk=current.pk).update(expires_at=until, granted_by=who)
            current.expires_at, current.granted_by = until, who
        else:
            before = None
            current = PermissionGrant.objects.create(
                token=token, kind=kind, tool_name=tool_name, granted_by=who, created_at=now, expires_at=until
            )
        audit.record(
            AuditAction.ALLOWANCE_ADD, tool_name, actor=by, before=before, after=grant_state(current)
        )
    return current


def _allow(call: ToolCall) -> dict:
    return {"behavior": "allow", "updatedInput": call.arguments}


# --- token revocation (SPEC 12.2) ---------------------------------------------------------------

TOKEN_REVOKED = "token revoked"


def revoke_token(token_id: int, by: audit.Actor = audit.BY_SYSTEM) -> tuple[bool, list[str]]:
    """Revoke a token: its next request gets 401, its session allowances and grants end, and
    its pending confirmations end `cancelled` (result `token revoked`). Returns whether this
    revoked it and the ids of the calls it ended (to announce). One `token.revoke` row tells
    of the allowances and grants that ended with it."""
    now = timezone.now()
    with transaction.atomic():
        if not ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True).update(revoked_at=now):
            return False, []
        allowances = SessionAllowance.objects.filter(token_id=token_id, revoked_at__isnull=True).update(
            revoked_at=now
        )
        grants = PermissionGrant.objects.filter(token_id=token_id, revoked_at__isnull=True).update(
            revoked_at=now
        )
        row = ApiToken.objects.get(pk=token_id)
        audit.record(
            AuditAction.TOKEN_REVOKE,
            row.name,
            actor=by,
            before={"id": row.pk, "role": row.role, "revoked": False},
            after={"revoked": True, "allowances_ended": allowances, "grants_ended": grants},
        )
    pending = ToolCall.objects.filter(token_id=token_id, status=CallStatus.PENDING).values_list(
        "id", flat=True
    )
    ended = [str(cid) for cid in pending if finish(cid, CallStatus.CANCELLED, TOKEN_REVOKED, decided_at=now)]
    return True, ended


# --- metrics (SPEC 18.3) ------------------------------------------------------------------------
# Each end of a call is counted where the write that ends it is made, once it is committed.


def _count_end(call: ToolCall) -> None:
    labels = (call.server_name, call.status, call.decision, call.started_at, call.ended_at)
    db.on_commit(lambda: metrics.call_ended(*labels))


def _count_end_of(call_id) -> None:
    """`_count_end` for a call ended by id: its labels read back from the row."""
    row = callsql.ended_row(call_id)
    if row is None:
        return
    server, status, decision, started_at, ended_at, confirm_id = row
    db.on_commit(lambda: metrics.call_ended(server, status, decision, started_at, ended_at))
    if confirm_id is not None and status in ("expired", "cancelled") and decision in ("", "expired"):
        # A confirmation that ended without a person's decision (a timeout, a cancel, a revoke).
        db.on_commit(lambda: metrics.confirmation_ended(status))


def _count_reply(call: ToolCall) -> None:
    """A person's (or one tap's) decision: the confirmation, and the call if that ended it."""
    outcome = "approved" if call.decision in ("approve", "remember", "session", "grant") else "denied"
    created_at, decided_at = call.created_at, call.decided_at
    db.on_commit(lambda: metrics.confirmation_ended(outcome, created_at, decided_at))
    if call.ended:
        _count_end(call)
