"""Recording a call and ending it: the gate's decision applied to a new call (deny, run, or wait
for a person), the one conditional UPDATE that ends a call (`finish`), and the metrics counted
where each end is written. The bottom of the call layer: the path (`calls`), approvals and
replies build on it."""

import datetime
import uuid
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from django.utils import timezone

from .. import db, gate, metrics, schemas
from ..choices import CallDecision, CallStatus, RuleDecision
from ..db import callsql
from ..models import ApiToken, ToolCall


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


WORKER_LOST = "interrupted: the worker running this call stopped; the call may or may not have run"


TOKEN_REVOKED = "token revoked"


def record(
    call: ToolCall,
    decision: gate.Decision,
    token: ApiToken | None,
    now: datetime.datetime,
    run: Callable[[ToolCall, str, datetime.datetime], None],
) -> ToolCall:
    """Apply the gate's decision to a new call and record it (one INSERT): a rule's deny, or a
    limit it goes over (SPEC 25.1: `call.retry_after` then says when one more fits), ends it
    with nobody asked and nothing run; `run(call, reason, now)` sets what running at once means
    for its kind (a tool call is recorded `running`, a permission prompt ends `done`); else it
    waits for a person."""
    if decision.reason == RuleDecision.DENY:
        call.status, call.decision = CallStatus.SKIPPED, CallDecision.RULE
        call.decided_at = call.ended_at = now
        call.decided_by, call.result = "rule", gate.denied_text(decision.rule)
    elif decision.reason == RuleDecision.LIMIT:
        call.status, call.decision = CallStatus.SKIPPED, CallDecision.RULE
        call.decided_at = call.ended_at = now
        call.decided_by, call.result = "rule", gate.limited_text(decision.rule, decision.retry_after)
        call.retry_after = decision.retry_after
    elif decision.run:
        run(call, decision.reason, now)
    else:
        wait_for_a_person(call, token, now)
        call.repeated = decision.repeated
        call.for_group, call.approvals_needed = decision.group, decision.approvals
    callsql.insert(call)
    if call.ended:  # denied by a rule, or a permission prompt allowed at once
        count_end(call)
    _count_guard(call, decision)
    if call.status == CallStatus.PENDING and token is not None and not _still_live(token):
        # Revoked between this request's auth and now: revoke_token's sweep may have missed it.
        finish(call.id, CallStatus.CANCELLED, TOKEN_REVOKED, decided_at=timezone.now())
        call.refresh_from_db()
    return call


def _still_live(token: ApiToken) -> bool:
    return ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).exists()


def wait_for_a_person(call: ToolCall, token: ApiToken | None, now: datetime.datetime) -> None:
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


def finish(call_id, status: str, result: str, **fields) -> bool:
    """End a call once: a conditional update from pending/running, so no end is overwritten."""
    ended = callsql.end(call_id, {"status": status, "result": result, "ended_at": timezone.now(), **fields})
    if ended:
        count_end_of(call_id)
    return ended


def finish_call(call: ToolCall, status: str, result: str, **fields) -> ToolCall | None:
    """`finish` for the object the call path holds: on success the same fields are set on it
    (it then is the row as stored), and it is returned; None when the call had already ended."""
    ended = {"status": status, "result": result, "ended_at": timezone.now(), **fields}
    if not callsql.end(call.id, ended):
        return None
    for key, value in ended.items():
        setattr(call, key, value)
    count_end(call)
    return call


# --- metrics (SPEC 18.3) ------------------------------------------------------------------------
# Each end of a call is counted where the write that ends it is made, once it is committed.


def count_end(call: ToolCall) -> None:
    labels = (call.server_name, call.status, call.decision, call.started_at, call.ended_at)
    db.on_commit(lambda: metrics.call_ended(*labels))


def _count_guard(call: ToolCall, decision: gate.Decision) -> None:
    """A call a limit refused, or one held as a repeat (SPEC 25), once it is committed."""
    labels = (call.server_name, call.tool)
    if decision.reason == RuleDecision.LIMIT:
        db.on_commit(lambda: metrics.rate_limited.labels(*labels).inc())
    elif call.repeated:
        db.on_commit(lambda: metrics.repeats_held.labels(*labels).inc())


def count_end_of(call_id) -> None:
    """`count_end` for a call ended by id: its labels read back from the row."""
    row = callsql.ended_row(call_id)
    if row is None:
        return
    server, status, decision, started_at, ended_at, confirm_id = row
    db.on_commit(lambda: metrics.call_ended(server, status, decision, started_at, ended_at))
    if confirm_id is not None and status in ("expired", "cancelled") and decision in ("", "expired"):
        # A confirmation that ended without a person's decision (a timeout, a cancel, a revoke).
        db.on_commit(lambda: metrics.confirmation_ended(status))


def count_reply(call: ToolCall) -> None:
    """A person's (or one tap's) decision: the confirmation, and the call if that ended it."""
    outcome = "approved" if call.decision in ("approve", "remember", "session", "grant") else "denied"
    created_at, decided_at = call.created_at, call.decided_at
    db.on_commit(lambda: metrics.confirmation_ended(outcome, created_at, decided_at))
    if call.ended:
        count_end(call)
