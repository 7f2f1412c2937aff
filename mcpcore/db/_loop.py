"""SQLite on the event loop's own thread, for `mcpcore.db`: the writes queued in one turn of
the loop commit together there, on a connection of the loop's that never waits for a lock."""

import asyncio
import contextlib
import contextvars
import functools
import logging
import sqlite3
from collections.abc import Callable
from typing import Any

from django.core.exceptions import SynchronousOnlyOperation

from ._lane import Lane, ignore, relay, settle

# The loop's SQLite connection while a write runs on the loop (`sql()` uses it), else None.
connection_here: contextvars.ContextVar["sqlite3.Connection | None"] = contextvars.ContextVar(
    "agenvoy_db_here", default=None
)
# What to run once the loop's write transaction commits (`on_commit`), while one runs there.
commit_hooks: contextvars.ContextVar["list | None"] = contextvars.ContextVar("agenvoy_db_after", default=None)


class LoopSQLite:
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

    def __init__(self, path: str, lane: Lane) -> None:
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
        mark = connection_here.set(self._conn)
        try:
            return True, fn()
        except SynchronousOnlyOperation:
            return False, None
        finally:
            connection_here.reset(mark)

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
        mark, after_mark = connection_here.set(conn), commit_hooks.set(after)
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
            connection_here.reset(mark)
            commit_hooks.reset(after_mark)
        for fn in after:
            try:
                fn()
            except Exception:
                logging.getLogger("mcpcore.db").exception("an on_commit callback failed")
        settle(settled)
        self._elsewhere(elsewhere)
        self._commits += 1
        if self._commits % self.CHECKPOINT_EVERY == 0:
            # Writes wait for it on the database thread: racing it from here, they could keep
            # it from ever finding the log free.
            self._checkpointing = True
            job = functools.partial(checkpoint, self._path)
            self._lane.submit(job, grouped=False).add_done_callback(self._checkpointed)

    def _checkpointed(self, done: asyncio.Future) -> None:
        self._checkpointing = False
        ignore(done)

    def _elsewhere(self, batch: list) -> None:
        """Hand writes to the database thread; each caller gets what it gives."""
        for fn, future in batch:
            self._lane.submit(fn, grouped=True).add_done_callback(functools.partial(relay, future))


class _WroteThenRaised(Exception):
    pass


def checkpoint(path: str) -> None:
    """RESTART: a passive checkpoint never catches up with a writer that keeps committing, and
    the log would grow without end. This one holds new writers off while it runs (the loop's
    writes go to the database thread meanwhile) and makes the next writer start the log from
    its beginning. On a connection of its own with a short busy timeout: a long read elsewhere
    makes it give up (having copied what it could, like a passive one) instead of holding
    every writer off until that read ends."""
    with contextlib.closing(sqlite3.connect(path, timeout=0.05, isolation_level=None)) as conn:
        conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
