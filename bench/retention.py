"""Retention at scale (SPEC 18.1): a real `serve` handed 1,000,000 calls past
AGENVOY_HISTORY_DAYS prunes them while a client makes calls. The figures: how long the pass
takes, and the calls' p50/p99 while it runs against the same client's after it (same run,
same console)."""

import datetime
import sqlite3
import threading
import time

import httpx2

from bench.common import ECHO_ARGS, ECHO_TOOL, Figure, console, echo_servers, ms, percentile
from bench.history import make_calls

NAME = "retention"
CALLS = 1_000_000
AFTER_CALLS = 1000  # calls timed after the pass, at least


class Oldest(threading.Thread):
    """Watches the oldest call's created_at (an index lookup) in serve's database: the pass
    deletes oldest first, so it moves once the pass starts and jumps to today when it ends."""

    def __init__(self, path, initial: str, today: str) -> None:
        super().__init__(daemon=True)
        self.path, self.initial, self.today = path, initial, today
        self.started = self.ended = None
        self.stop = threading.Event()

    def run(self) -> None:
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            while not self.stop.wait(0.05):
                oldest = conn.execute("SELECT MIN(created_at) FROM mcpcore_toolcall").fetchone()[0]
                now = time.perf_counter()
                if self.started is None and oldest != self.initial:
                    self.started = now
                if oldest is None or oldest >= self.today:
                    self.ended = now
                    return
        finally:
            conn.close()


def run() -> list[Figure]:
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=200)
    with console(echo_servers(), {"AGENVOY_LOG_LEVEL": "INFO"}, start=False) as con:
        db_path = con.data / "db.sqlite3"
        t = time.perf_counter()
        make_calls(str(db_path), CALLS, start)
        setup_s = time.perf_counter() - t
        conn = sqlite3.connect(db_path)
        initial = conn.execute("SELECT MIN(created_at) FROM mcpcore_toolcall").fetchone()[0]
        conn.close()
        today = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)).strftime("%Y-%m-%d")
        con.start()
        watch = Oldest(db_path, initial, today)
        watch.start()
        timings: list[tuple[float, float]] = []  # (sent at, seconds)
        body = {"name": ECHO_TOOL, "arguments": ECHO_ARGS, "mode": "auto"}
        headers = {"Authorization": f"Bearer {con.token}"}
        with httpx2.Client(base_url=con.url, headers=headers, timeout=60) as http:
            con.wait_connected("echo", timeout=60)
            deadline = time.perf_counter() + 900
            after = 0
            while time.perf_counter() < deadline:
                sent = time.perf_counter()
                r = http.post("/v1/mcp/call", json=body)
                took = time.perf_counter() - sent
                if r.status_code != 200:
                    raise RuntimeError(f"call failed: {r.status_code} {r.text[:200]}")
                timings.append((sent, took))
                if watch.ended is not None and sent > watch.ended:
                    after += 1
                    if after >= AFTER_CALLS:
                        break
        watch.stop.set()
        watch.join(5)
        log = con.log_text()
    if watch.started is None or watch.ended is None:
        raise RuntimeError("the pass was not seen to start and end")
    during = [s for sent, s in timings if watch.started <= sent < watch.ended]
    baseline = [s for sent, s in timings if sent >= watch.ended]
    pass_s = watch.ended - watch.started
    note = f"{CALLS:,} calls made in {setup_s:.0f} s; {len(during)} calls during, {len(baseline)} after"
    deleted = "retention: deleted" in log
    return [
        Figure(NAME, f"pruning {CALLS:,} expired calls", pass_s, "s", note=note, valid=deleted),
        Figure(NAME, "rate", CALLS / pass_s, "calls/s", note="500 a transaction, then as long a rest", valid=deleted),
        Figure(NAME, "call p50 during the pass", ms(percentile(during, 50)), "ms",
               ms(percentile(baseline, 50)), "p50 after it"),
        Figure(NAME, "call p99 during the pass", ms(percentile(during, 99)), "ms",
               ms(percentile(baseline, 99)), "p99 after it"),
    ]  # fmt: skip
