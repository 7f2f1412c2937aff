"""A person's reply to a pending confirmation (SPEC 5), from any door, and the expiry of one
nobody answered in time. What an approval makes (an allowance, a grant, an allow_tool entry)
is written in the same transaction as the decision (`approvals`)."""

import datetime
import json
import logging
import uuid
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from .. import audit, files, gate, schemas
from ..choices import CallDecision, CallKind, CallStatus, RuleDecision
from ..models import Tool, ToolCall, iso
from . import guards, routing
from .approvals import allow_answer, allow_session, grant, remember_permission, rule_for
from .record import CallError, checked, count_end_of, count_reply

log = logging.getLogger("mcpcore.calls")


class ReplyError(CallError):
    pass


NOT_FOUND = "confirmation not found"
GONE = "confirmation already resolved or expired"
# SPEC 24.4: an extension never sets an expiry further than this after the item was made.
EXTEND_LIMIT = datetime.timedelta(hours=24)


def reply(
    session_id: str,
    confirm_id: str,
    body: dict,
    who: "str | routing.Replier",
    authorize=None,
    by: audit.Actor | None = None,
) -> ToolCall:
    """Apply a person's reply to a pending confirmation (SPEC 5); returns the updated call.

    `authorize(call)`, when given, runs once the confirmation is found and raises to refuse
    the replier (the `/v1` token rights, SPEC 12.1); then whether `who` may decide it (24.1,
    `routing`); then `body` is checked (`schemas.Reply`), before the 410 of a decided call. The
    allowances it makes are audited as `by`'s (default: `who`); "approve and remember" of a
    tool call is a `trust.change` (it writes allow_tool)."""
    call = _confirmation(session_id, confirm_id)
    if authorize is not None:
        authorize(call)
    refuse_routed(call, who)
    who = routing.name_of(who)
    answer = checked(schemas.Reply, body, ReplyError)
    if (
        call.is_prompt_or_resource
        and answer.approve
        and (answer.remember or answer.allow_turn or _grant_for(answer))
    ):
        # Only an `ask` rule holds these, and it outranks allow_tool, allowances and grants
        # (SPEC 14.2): remembering would write nothing that lets the next one run (docs/decisions.md).
        raise ReplyError(
            f"a {call.kind} call is approved once or denied: remember, allow_turn and remember_for do not apply",
            400,
        )
    if answer.arguments is not None and call.kind != CallKind.TOOL_CONFIRM:
        raise ReplyError("only a tool call's arguments can be changed", 400)
    several = call.approvals_needed > 1 and answer.approve and not answer.abort
    changes = answer.arguments is not None and answer.arguments != call.arguments
    if several and (answer.remember or answer.allow_turn or _grant_for(answer) or changes):
        raise ReplyError(f"this call needs {call.approvals_needed} approvals", 400)  # SPEC 24.2
    now = timezone.now()
    if call.status == CallStatus.PENDING and call.expires_at and call.expires_at <= now:
        expire(call.id)
        raise ReplyError(GONE, 410)
    if several:
        return _one_of_several(call, answer, who, by or audit.Actor(who), now)
    edit = _edit(call, answer.arguments, who)
    pending = ToolCall.objects.filter(id=call.id, status=CallStatus.PENDING)
    if answer.abort or not answer.approve:
        aborted = answer.abort
        changed = pending.update(
            status=CallStatus.ABORTED if aborted else CallStatus.SKIPPED,
            decision=CallDecision.ABORT if aborted else CallDecision.DENY,
            reason=answer.reason,
            result=gate.ABORTED if aborted else gate.skipped_text(answer.reason),
            ended_at=now,
            decided_by=who,
            decided_at=now,
        )
    else:
        changed = _approve(call, pending, answer, who, by or audit.Actor(who), now, edit)
    if not changed:
        raise ReplyError(GONE, 410)
    call.refresh_from_db()
    count_reply(call)
    return call


def _one_of_several(call: ToolCall, answer: schemas.Reply, who: str, by: audit.Actor, now) -> ToolCall:
    """One approval of a call that needs several (SPEC 24.2), by `who` (a person's username, a
    token's `token:<name>`, a target's one-tap name): counted exactly once however many arrive
    at once, on any process, because the row is locked while its approvals are read and
    written (PostgreSQL's row lock; SQLite's IMMEDIATE transaction holds the write lock). The
    last one approves the call, `decided_by` naming every approver in order."""
    with transaction.atomic():
        row = ToolCall.objects.select_for_update().filter(id=call.id, status=CallStatus.PENDING).first()
        if row is None:
            raise ReplyError(GONE, 410)
        if any(a.get("by") == who for a in row.approvals):
            raise ReplyError(f"{who} has already approved this call", 403)
        approvals = [*row.approvals, {"by": who, "at": iso(now)}]
        pending = ToolCall.objects.filter(id=call.id, status=CallStatus.PENDING)
        if len(approvals) < row.approvals_needed:
            pending.update(approvals=approvals)
            final = False
        else:
            everyone = ", ".join(a["by"] for a in approvals)
            _approve(row, pending, answer, everyone[:150], by, now, {"approvals": approvals})
            final = True
    call.refresh_from_db()
    if final:
        count_reply(call)
    return call


def refuse_routed(call: ToolCall, who: "str | routing.Replier") -> None:
    """Raise the 403 of SPEC 24.1 for one who may not decide `call` (`routing.refusal`)."""
    refused = routing.refusal(call, who)
    if refused is not None:
        raise ReplyError(refused, 403)


def decide_many(
    ids: list[str],
    approve: bool,
    reason: str,
    who: "str | routing.Replier",
    refusal: Callable[[ToolCall], str | None] | None = None,
    by: audit.Actor | None = None,
) -> tuple[dict[str, str], list[ToolCall]]:
    """Approve or deny many pending confirmations at once (SPEC 24.6): each id answered as its
    own reply would be (unknown → 404's text, `refusal(call)` → its text, decided or expired →
    410's), in three queries for any number: one read, one conditional UPDATE of them all,
    one read of which rows that UPDATE decided (its `decided_at`, so one decided by someone
    else meanwhile is told 410, exactly). A permission prompt's approval is its own answer, and
    a call needing several approvals (SPEC 24.2) counts this one: those go through `reply`, one
    by one. Returns each id's result ("ok" or the error) and the calls decided."""
    replier, who = who, routing.name_of(who)
    results: dict[str, str] = {}
    wanted: dict[str, uuid.UUID] = {}
    for raw in ids:
        try:
            wanted[raw] = uuid.UUID(raw)
        except ValueError:
            results[raw] = NOT_FOUND
    found = {c.confirm_id: c for c in ToolCall.objects.filter(confirm_id__in=set(wanted.values()))}
    now = timezone.now()
    chosen: dict[str, ToolCall] = {}
    for raw, cid in wanted.items():
        call = found.get(cid)
        refused = NOT_FOUND if call is None else refusal(call) if refusal is not None else None
        refused = refused or (routing.refusal(call, replier) if call is not None else None)
        if call is None or refused is not None:
            results[raw] = refused or NOT_FOUND
        elif call.status != CallStatus.PENDING or (call.expires_at and call.expires_at <= now):
            if call.status == CallStatus.PENDING:
                expire(call.id)
            results[raw] = GONE
        else:
            chosen[raw] = call
    decided = _approved_one_by_one(chosen, replier, by, results) if approve else []
    bulk = {raw: c for raw, c in chosen.items() if raw not in results}
    fields = _decided_fields(approve, reason, who, now)
    live = Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    rows = ToolCall.objects.filter(id__in=[c.id for c in bulk.values()])
    rows.filter(live, status=CallStatus.PENDING).update(**fields)
    ours = set(rows.filter(decided_at=now, decided_by=who).values_list("id", flat=True))
    for raw, call in bulk.items():
        results[raw] = "ok" if call.id in ours else GONE
        if call.id in ours:
            for key, value in fields.items():
                setattr(call, key, value)
            count_reply(call)
            decided.append(call)
    return {raw: results[raw] for raw in ids}, decided


def _decided_fields(approve: bool, reason: str, who: str, now: datetime.datetime) -> dict:
    """What one UPDATE writes on every confirmation of a batch (`decide_many`)."""
    decided = {"decided_by": who, "decided_at": now}
    if approve:
        return {"status": CallStatus.RUNNING, "decision": CallDecision.APPROVE, **decided}
    return {
        "status": CallStatus.SKIPPED,
        "decision": CallDecision.DENY,
        "reason": reason,
        "result": gate.skipped_text(reason),
        "ended_at": now,
        **decided,
    }


def _approved_one_by_one(
    chosen: dict[str, ToolCall], who: "str | routing.Replier", by: audit.Actor | None, results: dict[str, str]
) -> list[ToolCall]:
    """The permission prompts of a batch approved (its answer is its own), and the calls that
    need several approvals given this one (SPEC 24.2), each through `reply`; their results are
    set in `results`. Returns those decided."""
    approved = []
    for raw, call in chosen.items():
        if call.is_permission_prompt or call.approvals_needed > 1:
            try:
                done = reply(call.session_id, raw, {"approve": True}, who, by=by)
                if done.status != CallStatus.PENDING:
                    approved.append(done)
                results[raw] = "ok"
            except ReplyError as exc:
                results[raw] = exc.message
    return approved


def _confirmation(session_id: str, confirm_id: str) -> ToolCall:
    """The call a reply names by its session and confirmation id; 404 when there is none."""
    try:
        cid = uuid.UUID(str(confirm_id))
    except ValueError:
        raise ReplyError(NOT_FOUND, 404) from None
    call = ToolCall.objects.filter(confirm_id=cid, session_id=session_id).first()
    if call is None:
        raise ReplyError(NOT_FOUND, 404)
    return call


def _edit(call: ToolCall, arguments: dict | None, who: str) -> dict:
    """What "Edit and approve" (SPEC 24.5) writes with the approval: the arguments as run, as
    asked, and who changed them; nothing when they are unchanged. Changed ones must match the
    tool's input schema and pass the rules again (a `deny` now matching refuses them); a
    decided call is refused first (410)."""
    if arguments is None or arguments == call.arguments:
        return {}
    if call.status != CallStatus.PENDING:
        raise ReplyError(GONE, 410)
    schema = (
        Tool.objects.filter(registered_name=call.tool_name).values_list("input_schema", flat=True).first()
    )
    problem = schemas.schema_problem(schema, arguments)
    if problem is not None:
        raise ReplyError(f"arguments do not match the tool's schema: {problem}", 400)
    found = rule_for(call.tool_name, arguments)
    if found is not None and found[0] == RuleDecision.DENY:
        raise ReplyError(gate.denied_text(found[1]), 400)
    return {"arguments": arguments, "requested_arguments": call.arguments, "edited_by": who}


def _grant_for(answer: schemas.Reply) -> int:
    return int(answer.remember_for or 0)


def _approve(
    call: ToolCall,
    pending: QuerySet[ToolCall],
    answer: schemas.Reply,
    who: str,
    by: audit.Actor,
    now,
    edit: dict,
) -> int:
    """Record an approval and what it makes, in one transaction with it: an allowance for the
    session, a remembered permission, a grant for a time; then an allow_tool entry ("approve
    and remember" of a tool call). A permission prompt ends `done` here: nothing runs, the
    approval is the answer. `edit`: the changed arguments' fields (`_edit`). Returns the rows
    changed (0: someone decided first)."""
    grant_for = _grant_for(answer)
    decision = (
        CallDecision.REMEMBER
        if answer.remember
        else CallDecision.SESSION
        if answer.allow_turn
        else CallDecision.GRANT
        if grant_for
        else CallDecision.APPROVE
    )
    decided = {"decision": decision, "decided_by": who, "decided_at": now, **edit}
    prompt = call.is_permission_prompt
    with transaction.atomic():
        if prompt:
            ended = {"status": CallStatus.DONE, "result": json.dumps(allow_answer(call)), "ended_at": now}
            changed = pending.update(**ended, **decided)
        else:
            changed = pending.update(status=CallStatus.RUNNING, **decided)
        if changed and answer.allow_turn:
            allow_session(call, who, by)
        if changed and prompt and answer.remember:
            remember_permission(call.token, call.tool_name, who, by)
        if changed and grant_for:
            grant(call.token, call.kind, call.tool_name, who, grant_for, by)
    if changed and call.repeated:
        guards.forget_repeats(call)  # approved: that call's count starts again (SPEC 25.2)
    if changed and answer.remember and not prompt:
        try:
            files.add_allow_entry(call.tool_name, repin=True, by=by)
        except files.ConfigFileError as exc:
            # The approval stands; only remembering it failed, and the log says why.
            log.warning("could not remember %s in allow_tool: %s", call.tool_name, exc)
    return changed


def extended_expiry(created_at: datetime.datetime, now: datetime.datetime) -> datetime.datetime:
    """The expiry an extension sets (SPEC 24.4): now plus AGENVOY_CONFIRM_TIMEOUT; 400 when that
    is more than 24 hours after the item was made."""
    until = now + datetime.timedelta(seconds=settings.AGENVOY_CONFIRM_TIMEOUT)
    if until > created_at + EXTEND_LIMIT:
        raise ReplyError("cannot extend past 24 hours", 400)
    return until


def extend_confirmation(confirm_id, who: "str | routing.Replier", authorize=None) -> ToolCall | None:
    """Extend a pending confirmation (SPEC 24.4), refused as a reply is (12.1: `authorize(call)`
    raises to refuse the replier, then 24.1's group, before the 410), and 400 past 24 hours. The
    row's, so every waiter and the supervisor's sweep read the new one. Returns the call with
    its new expiry; None when no confirmation has this id (it may name a server's question)."""
    try:
        cid = uuid.UUID(str(confirm_id))
    except ValueError:
        raise ReplyError(NOT_FOUND, 404) from None
    call = ToolCall.objects.filter(confirm_id=cid).first()
    if call is None:
        return None
    if authorize is not None:
        authorize(call)
    refuse_routed(call, who)
    now = timezone.now()
    if call.status == CallStatus.PENDING and call.expires_at and call.expires_at <= now:
        expire(call.id)
        raise ReplyError(GONE, 410)
    if call.status != CallStatus.PENDING:
        raise ReplyError(GONE, 410)
    until = extended_expiry(call.created_at, now)
    live = Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    if not ToolCall.objects.filter(live, id=call.id, status=CallStatus.PENDING).update(expires_at=until):
        raise ReplyError(GONE, 410)
    call.expires_at = until
    return call


def expire(call_id) -> bool:
    """End a pending confirmation past its expiry as the row holds it (`expired`): one extended
    meanwhile (SPEC 24.4) stays pending, whatever expiry the caller last read."""
    now = timezone.now()
    expired = (
        ToolCall.objects.filter(id=call_id, status=CallStatus.PENDING, expires_at__lte=now).update(
            status=CallStatus.EXPIRED,
            decision=CallDecision.EXPIRED,
            decided_by="timeout",
            decided_at=now,
            reason="confirmation expired",
            result=gate.skipped_text("confirmation expired"),
            ended_at=now,
        )
        == 1
    )
    if expired:
        count_end_of(call_id)
    return expired


def expire_due() -> list[str]:
    """Expire every pending confirmation past its time; returns the call ids expired."""
    due = ToolCall.objects.filter(status=CallStatus.PENDING, expires_at__lte=timezone.now())
    return [str(cid) for cid in due.values_list("id", flat=True) if expire(cid)]
