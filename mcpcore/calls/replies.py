"""A person's reply to a pending confirmation (SPEC 5), from any door, and the expiry of one
nobody answered in time. What an approval makes (an allowance, a grant, an allow_tool entry)
is written in the same transaction as the decision (`approvals`)."""

import json
import logging
import uuid

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from .. import audit, files, gate, schemas
from ..choices import CallDecision, CallStatus
from ..models import ToolCall
from . import guards
from .approvals import allow_answer, allow_session, grant, remember_permission
from .record import CallError, checked, count_end_of, count_reply

log = logging.getLogger("mcpcore.calls")


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
    call = _confirmation(session_id, confirm_id)
    if authorize is not None:
        authorize(call)
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
    now = timezone.now()
    if call.status == CallStatus.PENDING and call.expires_at and call.expires_at <= now:
        expire(call.id)
        raise ReplyError("confirmation already resolved or expired", 410)
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
        changed = _approve(call, pending, answer, who, by or audit.Actor(who), now)
    if not changed:
        raise ReplyError("confirmation already resolved or expired", 410)
    call.refresh_from_db()
    count_reply(call)
    return call


def _confirmation(session_id: str, confirm_id: str) -> ToolCall:
    """The call a reply names by its session and confirmation id; 404 when there is none."""
    try:
        cid = uuid.UUID(str(confirm_id))
    except ValueError:
        raise ReplyError("confirmation not found", 404) from None
    call = ToolCall.objects.filter(confirm_id=cid, session_id=session_id).first()
    if call is None:
        raise ReplyError("confirmation not found", 404)
    return call


def _grant_for(answer: schemas.Reply) -> int:
    return int(answer.remember_for or 0)


def _approve(
    call: ToolCall, pending: QuerySet[ToolCall], answer: schemas.Reply, who: str, by: audit.Actor, now
) -> int:
    """Record an approval and what it makes, in one transaction with it: an allowance for the
    session, a remembered permission, a grant for a time; then an allow_tool entry ("approve
    and remember" of a tool call). A permission prompt ends `done` here: nothing runs, the
    approval is the answer. Returns the rows changed (0: someone decided first)."""
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
    decided = {"decision": decision, "decided_by": who, "decided_at": now}
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
        count_end_of(call_id)
    return expired


def expire_due() -> list[str]:
    """Expire every pending confirmation past its time; returns the call ids expired."""
    due = ToolCall.objects.filter(status=CallStatus.PENDING, expires_at__lte=timezone.now())
    return [str(cid) for cid in due.values_list("id", flat=True) if expire(cid)]
