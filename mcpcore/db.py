"""Database work from async code, on threads kept for it.

Django's `sync_to_async` runs each request's database work on a thread of that request, so a
call through `/v1` paid for new threads and connections several times over. Here the work goes
to long-lived threads whose connections stay open: one thread for SQLite (a single writer
avoids lock waits and busy retries), a few for PostgreSQL.
"""

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

_executor: ThreadPoolExecutor | None = None


def use_dedicated_threads() -> None:
    """Called by the servers (the ASGI application, mcpworker). Elsewhere, in tests under
    Django's test client for one, database work stays on asgiref's thread, which shares the
    test's transaction."""
    global _executor
    if _executor is None:
        sqlite = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")
        _executor = ThreadPoolExecutor(max_workers=1 if sqlite else 8, thread_name_prefix="agenvoy-db")


async def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run `fn(*args, **kwargs)` on a database thread and return its result."""
    call = functools.partial(fn, *args, **kwargs)
    if _executor is None:
        return await sync_to_async(call)()
    return await asyncio.get_running_loop().run_in_executor(_executor, call)
