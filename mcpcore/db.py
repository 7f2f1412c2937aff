"""Database work from async code, on threads kept for it, with group commit for a call's writes.

Django's `sync_to_async` runs each request's database work on a thread of that request, so a
call through `/v1` paid for new threads and connections several times over. Here the work goes
to long-lived threads whose connections stay open: one thread for SQLite (a single writer
avoids lock waits and busy retries), a pool for PostgreSQL plus one writer thread; and a few
threads for the bodies of sync `/v1` views (`run_view`).

`run(fn)` is one trip: the job goes to the thread, its result comes back in one hand-off.
`write(fn)` is a trip whose job shares one transaction with the other writes queued behind
the same one: under load many calls' rows are committed by one commit, and each caller is
answered only after that commit.
"""

import asyncio
import collections
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, transaction

_executor: ThreadPoolExecutor | None = None
_writer: "_Lane | None" = None
_views: ThreadPoolExecutor | None = None


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


def _settle(settled: list) -> None:
    for future, (ok, value) in settled:
        if future.cancelled():
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


def use_dedicated_threads() -> None:
    """Called by the servers (the ASGI application, mcpworker). Elsewhere, in tests under
    Django's test client for one, database work stays on asgiref's thread, which shares the
    test's transaction, and nothing is cached."""
    global _executor, _writer, _views
    from . import cache

    cache.enable()  # servers keep tokens and tools in memory (see mcpcore.cache)
    if _writer is None:
        sqlite = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")
        _writer = _Lane("agenvoy-db")
        _views = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agenvoy-view")
        if not sqlite:
            _executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="agenvoy-db")


async def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run `fn(*args, **kwargs)` on a database thread and return its result."""
    call = functools.partial(fn, *args, **kwargs)
    if _writer is None:
        return await sync_to_async(call)()
    if _executor is None:
        return await _writer.submit(call, grouped=False)
    return await asyncio.get_running_loop().run_in_executor(_executor, call)


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
    return await _writer.submit(call, grouped=True)
