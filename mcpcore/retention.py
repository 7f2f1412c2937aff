"""Retention (SPEC 18.1, 22.2): old calls deleted, old results cut, old audit rows deleted, and
the storage figures.

`prune(now)` does one whole pass, in batches of at most BATCH rows, each batch its own short
transaction, so a call's own writes never wait for more than one batch:

- calls that ended (any status but pending and running) and were created more than
  AGENVOY_HISTORY_DAYS ago are deleted, with their notification deliveries and the questions
  their servers asked (SPEC 20.4);
- calls created more than AGENVOY_RESULT_DAYS ago keep the first RESULT_HEAD characters of a
  longer result, followed by `\\n[result removed after <N> days]`; their other copies of the
  result (`raw_result`, the full text; `native_result`, what an MCP client was sent) are
  dropped whatever their size, since they are the bulk a call weighs;
- audit rows (SPEC 22.2) older than AGENVOY_AUDIT_DAYS are deleted, oldest first: the one way
  a row of the audit trail ever goes.

Each statement is conditional (ended, older than the cut-off), so a pass that races another
process's, or a call that is still live, loses nothing. On PostgreSQL a batch also takes a
transaction-level advisory lock, so that in scale-out one process prunes at a time and the
others skip (they try again at their next pass).

`run()` is the background task the supervisor starts: a pass FIRST_PASS seconds after start-up,
then one every EVERY seconds, one batch per trip to the database thread and after each a rest
as long as the batch took.
"""

import asyncio
import datetime
import logging
import os
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, Value
from django.db.models.functions import Concat, Length, Substr
from django.db.models.lookups import GreaterThan
from django.utils import timezone

from . import db
from .choices import CALL_LIVE
from .models import AuditEntry, Delivery, Question, ToolCall

log = logging.getLogger("mcpcore.retention")

BATCH = 500  # rows per transaction (SPEC 18.1: at most 1,000)
RESULT_HEAD = 1024  # characters of a cut result that stay
FIRST_PASS = 5.0  # seconds after start-up
EVERY = 3600.0  # seconds between passes
PAUSE = 0.01  # seconds between batches at least, and at least as long as the batch took: a
# pass takes at most half the database's time, and the call path's writes go in between
LIVE = tuple(sorted(CALL_LIVE))  # never touched; "not live" rather than "one of the ended
# statuses", so the time index serves the passes (an IN on status would pick the status index
# and sort every old call for each batch)
_LOCK_KEY = 0x6167_656E_766F_79  # "agenvoy": the advisory lock of PostgreSQL passes


def marker(days: int) -> str:
    return f"\n[result removed after {days} days]"


def cut(result: str, days: int) -> str:
    """What a result older than `days` becomes (the rule `cut_batch` applies in SQL)."""
    return result if len(result) <= RESULT_HEAD else result[:RESULT_HEAD] + marker(days)


@dataclass
class Pruned:
    calls: int = 0
    deliveries: int = 0
    results: int = 0
    audit: int = 0
    questions: int = 0
    busy: bool = False  # another process held the lock: this pass stopped early

    def add(self, other: "Pruned") -> None:
        self.calls += other.calls
        self.deliveries += other.deliveries
        self.results += other.results
        self.audit += other.audit
        self.questions += other.questions
        self.busy = self.busy or other.busy


# --- one batch each ----------------------------------------------------------------------------


def _ours() -> bool:
    """Inside a batch's transaction: whether this process may prune now (always, but on
    PostgreSQL, where another process may hold the pass's lock)."""
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_LOCK_KEY])
        return bool(cursor.fetchone()[0])


def delete_batch(cutoff: datetime.datetime, limit: int = BATCH) -> Pruned:
    """Delete up to `limit` ended calls created before `cutoff`, oldest first, and their
    deliveries and questions, in one transaction."""
    with transaction.atomic():
        if not _ours():
            return Pruned(busy=True)
        old = ToolCall.objects.filter(created_at__lt=cutoff).exclude(status__in=LIVE)
        ids = list(old.order_by("created_at").values_list("id", flat=True)[:limit])
        if not ids:
            return Pruned()
        deliveries, _ = Delivery.objects.filter(call_id__in=ids).delete()
        # The questions go by the cascade of their foreign key (one DELETE); `only("id")`
        # keeps the cascade from loading the calls' results to delete them.
        _, deleted = old.filter(id__in=ids).only("id").delete()
        calls, questions = deleted.get(ToolCall._meta.label, 0), deleted.get(Question._meta.label, 0)
    return Pruned(calls=calls, deliveries=deliveries, questions=questions)


def delete_audit_batch(cutoff: datetime.datetime, limit: int = BATCH) -> Pruned:
    """Delete up to `limit` audit rows written before `cutoff`, oldest first, in one
    transaction."""
    with transaction.atomic():
        if not _ours():
            return Pruned(busy=True)
        ids = list(
            AuditEntry.objects.filter(at__lt=cutoff).order_by("at", "id").values_list("id", flat=True)[:limit]
        )
        if not ids:
            return Pruned()
        rows, _ = AuditEntry.objects.filter(id__in=ids).delete()
    return Pruned(audit=rows)


def cut_batch(ids: list, days: int) -> Pruned:
    """Cut the results of these calls (all older than the result cut-off), in one transaction."""
    mark = marker(days)
    rows = ToolCall.objects.filter(id__in=ids).exclude(status__in=LIVE)
    with transaction.atomic():
        if not _ours():
            return Pruned(busy=True)
        results = (
            rows.filter(GreaterThan(Length("result"), RESULT_HEAD))
            .exclude(result__endswith=mark)
            .update(result=Concat(Substr("result", 1, RESULT_HEAD), Value(mark)), truncated=True)
        )
        rows.filter(~Q(raw_result="") | Q(native_result__isnull=False)).update(
            raw_result="", native_result=None
        )
    return Pruned(results=results)


def old_results(cutoff: datetime.datetime, after: tuple | None, limit: int = BATCH) -> list[tuple]:
    """The next `limit` (created_at, id) of ended calls created before `cutoff`, after the
    keyset position `after`, oldest first."""
    rows = ToolCall.objects.filter(created_at__lt=cutoff).exclude(status__in=LIVE)
    if after is not None:
        when, cid = after
        # One index range, not an OR of two (which sorts the whole rest of the table).
        rows = rows.filter(created_at__gte=when).filter(Q(created_at__gt=when) | Q(id__gt=cid))
    return list(rows.order_by("created_at", "id").values_list("created_at", "id")[:limit])


# --- a pass ------------------------------------------------------------------------------------


def cutoffs(now: datetime.datetime) -> tuple[datetime.datetime | None, datetime.datetime | None]:
    """(delete calls created before, cut results of calls created before); None: keep."""
    history, result = settings.AGENVOY_HISTORY_DAYS, settings.AGENVOY_RESULT_DAYS
    return (
        now - datetime.timedelta(days=history) if history else None,
        now - datetime.timedelta(days=result) if result else None,
    )


def audit_cutoff(now: datetime.datetime) -> datetime.datetime | None:
    """Delete audit rows written before this; None: keep them all."""
    days = settings.AGENVOY_AUDIT_DAYS
    return now - datetime.timedelta(days=days) if days else None


def prune(now: datetime.datetime | None = None) -> Pruned:
    """One whole pass as of `now` (default: the clock), sync, batch after batch."""
    return Pass().run_sync(now or timezone.now())


class Pass:
    """Passes of one process: remembers how far results were cut, so that the next pass reads
    only the calls that have aged past the cut-off since (a restart reads them all once)."""

    def __init__(self) -> None:
        self.results_done: tuple | None = None

    def _steps(self, now: datetime.datetime):
        delete_before, cut_before = cutoffs(now)
        if delete_before is not None:
            while True:
                done = yield lambda: delete_batch(delete_before)
                if done.busy or done.calls < BATCH:
                    break
        audit_before = audit_cutoff(now)
        if audit_before is not None:
            while True:
                done = yield lambda: delete_audit_batch(audit_before)
                if done.busy or done.audit < BATCH:
                    break
        if cut_before is None:
            return
        position = self.results_done
        while True:
            chunk = yield lambda p=position: old_results(cut_before, p)
            if not chunk:
                return
            ids = [cid for _, cid in chunk]
            done = yield lambda ids=ids: cut_batch(ids, settings.AGENVOY_RESULT_DAYS)
            if done.busy:
                return
            position = self.results_done = chunk[-1]
            if len(chunk) < BATCH:
                return

    def run_sync(self, now: datetime.datetime) -> Pruned:
        total, steps = Pruned(), self._steps(now)
        try:
            job = next(steps)
            while True:
                out = job()
                if isinstance(out, Pruned):
                    total.add(out)
                job = steps.send(out)
        except StopIteration:
            pass
        return total

    async def run_async(self, now: datetime.datetime, pause: float = PAUSE) -> Pruned:
        """The same pass with each batch a trip of its own to the database thread, and a rest
        after each batch as long as it took (at least `pause`)."""
        loop = asyncio.get_running_loop()
        total, steps = Pruned(), self._steps(now)
        try:
            job = next(steps)
            while True:
                began = loop.time()
                out = await db.run(job)
                if isinstance(out, Pruned):
                    total.add(out)
                    await asyncio.sleep(max(pause, loop.time() - began))
                job = steps.send(out)
        except StopIteration:
            pass
        return total


async def run() -> None:
    """The retention task: a pass soon after start-up, then every EVERY seconds; until
    cancelled. A pass that fails is logged and tried again at the next one."""
    passes = Pass()
    await asyncio.sleep(FIRST_PASS)
    while True:
        try:
            done = await passes.run_async(timezone.now())
            if done.calls or done.results:
                log.info(
                    "retention: deleted %d calls (%d deliveries), cut %d results",
                    done.calls,
                    done.deliveries,
                    done.results,
                )
            if done.audit:
                log.info("retention: deleted %d audit rows", done.audit)
        except Exception:
            log.exception("retention pass failed")
        await asyncio.sleep(EVERY)


# --- storage figures ---------------------------------------------------------------------------


def database_bytes() -> int:
    """The database's size: the SQLite file (and its write-ahead log), or PostgreSQL's
    `pg_database_size`."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_database_size(current_database())")
            return int(cursor.fetchone()[0])
    name = str(settings.DATABASES["default"]["NAME"])
    total = 0
    for path in (name, name + "-wal"):
        try:
            total += os.path.getsize(path)
        except OSError:
            pass
    return total


def storage() -> dict:
    """`{"calls", "oldest", "database_bytes"}` for the Servers page and `/v1/mcp/status`:
    every call row kept (pending included), the oldest one's created_at (a datetime, or None).
    Sync."""
    oldest = ToolCall.objects.order_by("created_at").values_list("created_at", flat=True).first()
    return {"calls": ToolCall.objects.count(), "oldest": oldest, "database_bytes": database_bytes()}
