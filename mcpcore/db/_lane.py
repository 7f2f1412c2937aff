"""The database thread of `mcpcore.db`: one thread fed by a queue, whose batches of `write`
jobs share one transaction (group commit), and the hand-back of results to event loops."""

import asyncio
import collections
import functools
import threading
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, transaction


class Lane:
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
                    loop.call_soon_threadsafe(settle, settled)
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
    return [_outcome(functools.partial(atomic, fn)) for fn in jobs]


def atomic(fn: Callable[[], Any]) -> Any:
    with transaction.atomic():
        return fn()


def relay(future: asyncio.Future, done: asyncio.Future) -> None:
    if future.cancelled():
        return
    if done.cancelled():
        future.cancel()
    elif (exc := done.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(done.result())


def ignore(done: asyncio.Future) -> None:
    if not done.cancelled():
        done.exception()


def settle(settled: list) -> None:
    for future, (ok, value) in settled:
        if future.cancelled():
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
