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

With SQLite, `write` first tries the event loop's own thread (`LoopSQLite`): the writes queued
in one turn of the loop run there in one transaction on a connection of the loop's, which never
waits for a lock. A hand-off to a thread and back costs more than the statements of a call, and
most calls need nothing else: their token, tool and pin come from `mcpcore.db.cache`, and their
statements go through `sql()`. A write that needs the ORM (Django refuses it on the loop's
thread), or finds another connection writing, goes to the database thread as before.
"""

import asyncio
import functools
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, transaction

from . import _lane, _loop

_executor: ThreadPoolExecutor | None = None
_writer: "_lane.Lane | None" = None
_views: ThreadPoolExecutor | None = None
_on_loop: "_loop.LoopSQLite | None" = None


def on_commit(fn: Callable[[], Any]) -> None:
    """Run `fn` once the write that is running now is committed, never if it is rolled back
    (a write job can run twice: see `write`). Outside any transaction it runs at once."""
    after = _loop.commit_hooks.get()
    if after is not None:
        after.append(fn)
    else:
        transaction.on_commit(fn)


def sql(statement: str, params: Sequence = ()) -> tuple[int, tuple | None]:
    """Run one statement (`%s` placeholders) on the connection of the job running it: the
    loop's own inside a write run there, Django's anywhere else. Returns the number of rows it
    changed and its first row (None when it returns none)."""
    here = _loop.connection_here.get()
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


def use_dedicated_threads() -> None:
    """Called by the process wiring of the servers (`mcpcore.runtime`: the ASGI application,
    serve, mcpworker). Elsewhere, in tests under Django's test client for one, database work
    stays on asgiref's thread, which shares the test's transaction."""
    global _executor, _writer, _views, _on_loop
    if _writer is None:
        database = settings.DATABASES["default"]
        _writer = _lane.Lane("agenvoy-db")
        _views = ThreadPoolExecutor(max_workers=4, thread_name_prefix="agenvoy-view")
        if database["ENGINE"].endswith("sqlite3"):
            # Django's refusal of the ORM on the loop's thread is what sends such a write to
            # the database thread; with the refusal switched off it would run outside the
            # loop's transaction.
            name = str(database["NAME"])
            in_memory = name == ":memory:" or "mode=memory" in name  # one database per connection
            if not os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE") and not in_memory:
                _on_loop = _loop.LoopSQLite(name, _writer)
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
        return await sync_to_async(functools.partial(_lane.atomic, call))()
    if _on_loop is not None:
        return await _on_loop.submit(call)
    return await _writer.submit(call, grouped=True)
