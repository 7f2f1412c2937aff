"""Database work from async code, with group commit for a call's writes.

Django's `sync_to_async` runs each request's database work on a thread of that request, so a
call through `/v1` paid for new threads and connections several times over. Here the work goes
to long-lived threads whose connections stay open: one thread for SQLite (a single writer
avoids lock waits and busy retries), a pool for PostgreSQL plus one writer thread; and a few
threads for the bodies of sync `/v1` views (`run_view`).

`run(fn)` is one trip: the job goes to the thread, its result comes back in one hand-off.
`write(fn)` is a trip whose job shares one transaction with the other writes queued behind
the same one: under load many calls' rows are committed by one commit, and each caller is
answered only after that commit.

With SQLite, `write` first tries the event loop's own thread (`_LoopSQLite`): the writes queued
in one turn of the loop run there in one transaction on a connection of the loop's, which never
waits for a lock. A hand-off to a thread and back costs more than the statements of a call, and
most calls need nothing else: their token, tool and pin come from `mcpcore.db.cache`, and their
statements go through `sql()`. A write that needs the ORM (Django refuses it on the loop's
thread), or finds another connection writing, goes to the database thread as before.
"""

import asyncio
import collections
import contextlib
import contextvars
import functools
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import SynchronousOnlyOperation
from django.db import DatabaseError, connection, transaction

_executor: ThreadPoolExecutor | None = None
_writer: "_Lane | None" = None
_views: ThreadPoolExecutor | None = None
_on_loop: "_LoopSQLite | None" = None
# The loop's SQLite connection while a write runs on the loop (`sql()` uses it), else None.
_here: contextvars.ContextVar["sqlite3.Connection | None"] = contextvars.ContextVar(
    "agenvoy_db_here", default=None
)
# What to run once the loop's write transaction commits (`on_commit`), while one runs there.
_after: contextvars.ContextVar["list | None"] = contextvars.ContextVar("agenvoy_db_after", default=None)


def on_commit(fn: Callable[[], Any]) -> None:
    """Run `fn` once the write that is running now is committed, never if it is rolled back
    (a write job can run twice: see `write`). Outside any transaction it runs at once."""
    after = _after.get()
    if after is not None:
        after.append(fn)
    else:
        transaction.on_commit(fn)


def sql(statement: str, params: Sequence = ()) -> tuple[int, tuple | None]:
    """Run one statement (`%s` placeholders) on the connection of the job running it: the
    loop's own inside a write run there, Django's anywhere else. Returns the number of rows it
    changed and its first row (None when it returns none)."""
    here = _here.get()
    if here is not None:
        rows = here.execute(_qmark(statement), params)
        return rows.rowcount, rows.fetchone()
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.rowcount, cursor.fetchone() if cursor.description else None


@functools.cache
def _qmark(statement: str) -> str:
    # The few statements sent through sql() carry no literal "%" (Django's backend converts the
    # same way for its own SQLite cursors).
    return statement.replace("%s", "?")


class _Lane:
    """One database thread fed by a queue. What was queued while it worked runs next as one
    batch, in order; consecutive `write` jobs of a batch share one transaction. The batch's
    results go back to each event loop in one `call_soon_threadsafe`."""

    def __init__(self, name: str) -> None:
        self._jobs: collections.deque = collections.deque()
        self._ready = threading.Condition()
        threading.Thread(target=self._main, name=name, daemon=True).start()

    def submit(self, fn: Callable[[], Any], grouped: bool) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._ready:
            self._jobs.append((fn, grouped, future, loop))
            self._ready.notify()
        return future

    def _main(self) -> None:
        while True:
            with self._ready:
                while not self._jobs:
                    self._ready.wait()
                batch = list(self._jobs)
                self._jobs.clear()
            outcomes: list = []
            i = 0
            while i < len(batch):
                j = i
                while j < len(batch) and batch[j][1] == batch[i][1]:
                    j += 1
                jobs = [job[0] for job in batch[i:j]]
                outcomes += _together(jobs) if batch[i][1] else [_outcome(fn) for fn in jobs]
                i = j
            by_loop: dict = {}
            for (_fn, _g, future, loop), outcome in zip(batch, outcomes, strict=True):
                by_loop.setdefault(loop, []).append((future, outcome))
            for loop, settled in by_loop.items():
                try:
                    loop.call_soon_threadsafe(_settle, settled)
                except RuntimeError:
                    pass  # that loop is closed: nobody is waiting any more


def _outcome(fn: Callable[[], Any]) -> tuple[bool, Any]:
    try:
        return True, fn()
    except BaseException as exc:  # the caller's exception, raised where it awaits
        return False, exc


def _together(jobs: list) -> list:
    """Run write jobs in one transaction. A job that raises anything but a database error
    (say a CallError) is answered with it and the others go on: such jobs raise before they
    write. A database error rolls the batch back, and each job runs again alone."""

    def attempt(fn):
        try:
            return True, fn()
        except DatabaseError:
            raise
        except BaseException as exc:
            return False, exc

    if len(jobs) > 1:
        try:
            with transaction.atomic():
                return [attempt(fn) for fn in jobs]
        except DatabaseError:
            pass
    return [_outcome(functools.partial(_atomic, fn)) for fn in jobs]


def _atomic(fn: Callable[[], Any]) -> Any:
    with transaction.atomic():
        return fn()


class _LoopSQLite:
    """SQLite on the event loop's thread. Writes: what `write` queued during one turn of the
    loop runs together right after it, in one transaction (group commit), each caller answered
    after the COMMIT. Reads (`read`) run at once, outside any transaction.

    The connection never waits: BEGIN IMMEDIATE fails at once when another connection (the
    database thread, another process) holds the write lock, and then the whole turn's writes go
    to the database thread, which waits its turn there. A job that reaches for the ORM raises
    SynchronousOnlyOperation (Django's own check) and goes to the database thread alone; one
    that raises after it wrote (jobs must raise before they write), or any SQLite error, sends
    the turn's writes there, rolled back. The connection leaves checkpoints to the database
    thread, so a checkpoint's fsync never stalls the loop; while one runs, writes queue behind
    it there."""

    CHECKPOINT_EVERY = 200  # commits

    def __init__(self, path: str, lane: _Lane) -> None:
        self._path = path
        self._lane = lane
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: sqlite3.Connection | None = None
        self._queued: list = []
        self._commits = 0
        self._checkpointing = False

    def submit(self, fn: Callable[[], Any]) -> asyncio.Future:
        loop = self._bound()
        future = loop.create_future()
        self._queued.append((fn, future))
        if len(self._queued) == 1:
            loop.call_soon(self._flush)
        return future

    def read(self, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """(True, what `fn` returned), or (False, None) when it needs the ORM."""
        self._bound()
        mark = _here.set(self._conn)
        try:
            return True, fn()
        except SynchronousOnlyOperation:
            return False, None
        finally:
            _here.reset(mark)

    def _bound(self) -> asyncio.AbstractEventLoop:
        """The running loop, with a connection of its own (a new loop, in tests, gets a new one)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._open(loop)
        return loop

    def _open(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._conn is not None:
            self._conn.close()
        # Used only by its loop's thread; check_same_thread would refuse the close of an old one.
        self._conn = sqlite3.connect(self._path, timeout=0, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        self._loop, self._queued = loop, []

    def _flush(self) -> None:
        batch, self._queued = self._queued, []
        if self._checkpointing:  # queue behind the checkpoint on the database thread
            self._elsewhere(batch)
            return
        conn = self._conn
        assert conn is not None  # submit() bound a connection before it scheduled this flush
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:  # another connection is writing: wait for it elsewhere
            self._elsewhere(batch)
            return
        settled: list = []
        elsewhere: list = []
        after: list[Callable[[], Any]] = []
        mark, after_mark = _here.set(conn), _after.set(after)
        try:
            for fn, future in batch:
                before, registered = conn.total_changes, len(after)
                try:
                    outcome = (True, fn())
                except sqlite3.Error:
                    raise
                except BaseException as exc:
                    if conn.total_changes != before:
                        raise _WroteThenRaised() from exc
                    del after[registered:]  # it runs again elsewhere, and says so again there
                    if isinstance(exc, SynchronousOnlyOperation):
                        elsewhere.append((fn, future))  # it needs the ORM
                        continue
                    outcome = (False, exc)
                settled.append((future, outcome))
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            self._elsewhere(batch)
            return
        finally:
            _here.reset(mark)
            _after.reset(after_mark)
        for fn in after:
            try:
                fn()
            except Exception:
                logging.getLogger("mcpcore.db").exception("an on_commit callback failed")
        _settle(settled)
        self._elsewhere(elsewhere)
        self._commits += 1
        if self._commits % self.CHECKPOINT_EVERY == 0:
            # Writes wait for it on the database thread: racing it from here, they could keep
            # it from ever finding the log free.
            self._checkpointing = True
            checkpoint = functools.partial(_checkpoint, self._path)
            self._lane.submit(checkpoint, grouped=False).add_done_callback(self._checkpointed)

    def _checkpointed(self, done: asyncio.Future) -> None:
        self._checkpointing = False
        _ignore(done)

    def _elsewhere(self, batch: list) -> None:
        """Hand writes to the database thread; each caller gets what it gives."""
        for fn, future in batch:
            self._lane.submit(fn, grouped=True).add_done_callback(functools.partial(_relay, future))


class _WroteThenRaised(Exception):
    pass


def _relay(future: asyncio.Future, done: asyncio.Future) -> None:
    if future.cancelled():
        return
    if done.cancelled():
        future.cancel()
    elif (exc := done.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(done.result())


def _ignore(done: asyncio.Future) -> None:
    if not done.cancelled():
        done.exception()


def _checkpoint(path: str) -> None:
    """RESTART: a passive checkpoint never catches up with a writer that keeps committing, and
    the log would grow without end. This one holds new writers off while it runs (the loop's
    writes go to the database thread meanwhile) and makes the next writer start the log from
    its beginning. On a connection of its own with a short busy timeout: a long read elsewhere
    makes it give up (having copied what it could, like a passive one) instead of holding
    every writer off until that read ends."""
    with contextlib.closing(sqlite3.connect(path, timeout=0.05, isolation_level=None)) as conn:
        conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()


def _settle(settled: list) -> None:
    for future, (ok, value) in settled:
        if future.cancelled():
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


def use_dedicated_threads() -> None:
    """Called by the process wiring of the servers (`mcpcore.runtime`: the ASGI application,
    serve, mcpworker). Elsewhere, in tests under Django's test client for one, database work
    stays on asgiref's thread, which shares the test's transaction."""
    global _executor, _writer, _views, _on_loop
    if _writer is None:
        database = settings.DATABASES["default"]
        _writer = _Lane("agenvoy-db")
        _views = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agenvoy-view")
        if database["ENGINE"].endswith("sqlite3"):
            # Django's refusal of the ORM on the loop's thread is what sends such a write to
            # the database thread; with the refusal switched off it would run outside the
            # loop's transaction.
            name = str(database["NAME"])
            in_memory = name == ":memory:" or "mode=memory" in name  # one database per connection
            if not os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE") and not in_memory:
                _on_loop = _LoopSQLite(name, _writer)
        else:
            _executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="agenvoy-db")


async def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run `fn(*args, **kwargs)` on a database thread and return its result."""
    call = functools.partial(fn, *args, **kwargs)
    if _writer is None:
        return await sync_to_async(call)()
    if _executor is None:
        return await _writer.submit(call, grouped=False)
    return await asyncio.get_running_loop().run_in_executor(_executor, call)


async def read(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`run` for a job that only reads and may run twice (nothing it does before a query needs
    undoing): with SQLite it runs at once on the event loop's own connection, and on a database
    thread only when it needs the ORM (Django refuses that on the loop's thread)."""
    call = functools.partial(fn, *args, **kwargs)
    if _on_loop is not None:
        done, value = _on_loop.read(call)
        if done:
            return value
    return await run(call)


async def run_view(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a sync `/v1` view's body on one of a few threads kept for views (their database
    connections stay open), so slow views don't queue behind each other or the call path."""
    call = functools.partial(fn, *args, **kwargs)
    if _views is None:
        return await sync_to_async(call)()
    return await asyncio.get_running_loop().run_in_executor(_views, call)


async def write(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run `fn(*args, **kwargs)` inside a transaction shared with the writes queued with it;
    return its result once that transaction is committed. `fn` must raise before it writes
    (an exception after a write would leave the write in the shared commit)."""
    call = functools.partial(fn, *args, **kwargs)
    if _writer is None:
        return await sync_to_async(functools.partial(_atomic, call))()
    if _on_loop is not None:
        return await _on_loop.submit(call)
    return await _writer.submit(call, grouped=True)
