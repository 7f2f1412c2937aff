"""SPEC 25's counts in this process (`limits`' memory storage, mcpcore/calls/guards.py): no
thread started per call, and the library's expiry still running. The doors' tests are in
tests/test_guards.py."""

import threading
import time

from limits import RateLimitItemPerHour, RateLimitItemPerSecond
from limits.storage import MemoryStorage

from mcpcore.calls import guards
from tests.live import wait_until


def test_it_counts_in_memory_without_starting_a_thread_per_call(monkeypatch, settings):
    settings.REDIS_URL = ""
    assert hasattr(MemoryStorage, guards._EXPIRE)  # the library's expiry pass the sweeper runs
    limiter = guards.limiter()
    started = []
    monkeypatch.setattr(threading.Thread, "start", lambda self: started.append(self.name))
    item = RateLimitItemPerHour(1000)
    for _ in range(5):
        limiter.hit(item, "thread-test", "key")
        # Calls a few ms apart: the library's own 10 ms timer would have ended between them.
        time.sleep(0.015)
    assert started == []
    # Its expiry still runs: a 1/s count is gone once the sweeper passed after it expired.
    monkeypatch.undo()
    second = RateLimitItemPerSecond(1)
    assert limiter.hit(second, "thread-test", "expiring")
    key = second.key_for("thread-test", "expiring")
    wait_until(lambda: not limiter.storage.events.get(key), 5, what="the expiry pass")
