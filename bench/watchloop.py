"""4. Watch-loop scale: 100 connected stdio servers with 100 tools each (bench/servers/many.py).

- time from `serve` start to all 100 connected with 100 tools in /v1/mcp/status, against the
  same 100 servers started and listed by one direct SDK client process;
- CPU of the serve process (children excluded) over one whole poll interval with nothing
  changed (the default AGENVOY_POLL_SECONDS=60: every server is listed once in it), as % of
  one core, and the database commits in that window (`PRAGMA data_version` sampled by a
  connection of our own), with the rows they touched. A shorter interval would not do: the
  SDK's own parsing of 100 x 100 tools costs ~0.8 s of CPU per round (measured below), which
  alone is 17% of a core at 5 s;
- time from one server's tool list changing (its `bump` tool, which announces the change) to
  the new description being visible in /v1/mcp/tools.
"""

import asyncio
import contextlib
import sqlite3
import threading
import time
import uuid
from collections import Counter

import psutil

from bench.common import MANY, Figure, console, cpu_seconds, direct_client, many_server, ms, percentile

NAME = "watchloop"
SERVERS = 100
TOOLS = 100
POLL = 60.0  # the default interval; the window below is one whole interval
REGISTER_CAP = 120.0
BUMPS = 5
TARGET_CPU = 10.0


def names() -> list[str]:
    return [f"m{i:03d}" for i in range(SERVERS)]


# --- baseline: the same servers through the SDK alone -----------------------------------------


async def direct_baseline() -> dict:
    """Start and list all servers from this process; then CPU of one list round, and the
    latency of listing one server."""
    ready, done = asyncio.Event(), asyncio.Event()
    clients: dict[str, object] = {}
    started = time.perf_counter()
    listed_at: list[float] = []

    async def hold(name: str) -> None:
        async with direct_client(MANY, "--name", name, env={"MANY_TOOLS": str(TOOLS)}) as client:
            tools = (await client.list_tools(cache_mode="bypass")).tools
            assert len(tools) == TOOLS
            listed_at.append(time.perf_counter())
            clients[name] = client
            if len(clients) == SERVERS:
                ready.set()
            await done.wait()

    tasks = [asyncio.create_task(hold(n)) for n in names()]
    try:
        await asyncio.wait_for(ready.wait(), 300)
        start_s = max(listed_at) - started
        me = psutil.Process()
        cpu0 = sum(me.cpu_times()[:2])
        for client in clients.values():
            await client.list_tools(cache_mode="bypass")
        round_cpu = sum(me.cpu_times()[:2]) - cpu0
        one = clients["m000"]
        times = []
        for _ in range(30):
            t = time.perf_counter()
            await one.list_tools(cache_mode="bypass")
            times.append(time.perf_counter() - t)
    finally:
        done.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"start": start_s, "round_cpu": round_cpu, "list_one": percentile(times, 50)}


# --- the console --------------------------------------------------------------------------------


def all_registered(con) -> bool:
    status = con.status()
    return len(status) == SERVERS and all(
        s["state"] == "connected" and s["tools"] == TOOLS for s in status.values()
    )


class Commits:
    """Counts commits by other connections: `PRAGMA data_version` sampled at 50 Hz."""

    def __init__(self, db_path) -> None:
        self.conn = sqlite3.connect(db_path, check_same_thread=False)
        self.changes = 0
        self._stop = threading.Event()

    def _version(self) -> int:
        return self.conn.execute("PRAGMA data_version").fetchone()[0]

    def _loop(self) -> None:
        last = self._version()
        while not self._stop.wait(0.02):
            now = self._version()
            if now != last:
                self.changes += 1
                last = now

    def __enter__(self):
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def snapshot(db_path) -> dict:
    """What the unchanged-poll window could have written, to attribute the commits."""
    with contextlib.closing(sqlite3.connect(db_path)) as conn:
        q = conn.execute
        return {
            "servers": {
                r[0]: r[1:]
                for r in q(
                    "select name, last_refresh, signature, state, last_error, lease_expires"
                    " from mcpcore_server"
                )
            },
            "tools": q("select count(*), max(id) from mcpcore_tool").fetchone(),
            "workers": q("select name, heartbeat from mcpcore_worker").fetchall(),
            "files": q("select name, checked_at from mcpcore_filestate").fetchall(),
            "calls": q("select count(*) from mcpcore_toolcall").fetchone(),
        }


def what_changed(before: dict, after: dict) -> dict:
    def count(index: int) -> int:
        return sum(
            1
            for n, row in after["servers"].items()
            if before["servers"].get(n, (None,) * 5)[index] != row[index]
        )

    return {
        "servers with last_refresh/signature rewritten": max(count(0), count(1)),
        "servers with state/error rewritten": max(count(2), count(3)),
        "servers with lease_expires rewritten": count(4),
        "tool rows replaced": int(before["tools"] != after["tools"]),
        "worker heartbeat rewritten": int(before["workers"] != after["workers"]),
        "file state rewritten": int(before["files"] != after["files"]),
    }


def idle_window(con) -> dict:
    db = con.data / "db.sqlite3"
    pid = con.proc.pid
    before = snapshot(db)
    with Commits(db) as commits:
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        time.sleep(POLL)
        cpu, wall = cpu_seconds(pid) - cpu0, time.perf_counter() - t0
    return {
        "cpu": cpu,
        "wall": wall,
        "commits": commits.changes,
        "changed": what_changed(before, snapshot(db)),
    }


def bump(con) -> float:
    """Change m000's tool list once; seconds until /v1/mcp/tools shows it."""
    text = f"bumped {uuid.uuid4().hex[:8]}"
    before = con.status()["m000"]["last_refresh"]
    sent = time.perf_counter()
    r = con.call("mcp__m000__bump", {"description": text}, mode="auto")
    if r.status_code != 200 or r.json().get("status") != "done":
        raise RuntimeError(f"bump failed: {r.status_code} {r.text[:200]}")
    deadline = sent + 30
    while time.perf_counter() < deadline:
        if con.status()["m000"]["last_refresh"] != before:
            seen = time.perf_counter() - sent
            tools = con.tools()
            if tools["mcp__m000__tool_000"]["description"] == text:
                return seen
        time.sleep(0.01)
    raise RuntimeError("the changed tool list never showed up")


def states(con) -> str:
    counts = Counter(
        s["state"] + (f" ({s['Error'][:40]})" if s["Error"] else "") for s in con.status().values()
    )
    return ", ".join(f"{n} {k}" for k, n in counts.most_common())


def register(con) -> tuple[float, bool]:
    """Start serve; seconds until every server is connected with all its tools (or the cap)."""
    started = time.perf_counter()
    con.start()
    while time.perf_counter() - started < REGISTER_CAP:
        if all_registered(con):
            return time.perf_counter() - started, True
        time.sleep(0.25)
    return time.perf_counter() - started, False


def run() -> list[Figure]:
    base = asyncio.run(direct_baseline())
    servers = {n: many_server(n, TOOLS) for n in names()}
    with console(servers, env={"AGENVOY_POLL_SECONDS": str(POLL)}, start=False) as con:
        register_s, complete = register(con)
        at_start = states(con)
        time.sleep(3)
        idle = idle_window(con)
        at_end = states(con)
        bumps = [bump(con) for _ in range(BUMPS)] if con.status()["m000"]["state"] == "connected" else []
    share = 100 * idle["cpu"] / idle["wall"]
    poll_writes = (
        idle["changed"]["servers with last_refresh/signature rewritten"]
        + idle["changed"]["tool rows replaced"]
    )
    written = ", ".join(f"{k}: {v}" for k, v in idle["changed"].items() if v) or "nothing"
    window = f"servers at window start: {at_start}; at end: {at_end}"
    return [
        Figure(
            NAME,
            f"start to {SERVERS} servers x {TOOLS} tools registered",
            register_s,
            "s",
            base["start"],
            "direct SDK: same servers started + listed",
            "all registered",
            complete,
            "" if complete else f"not all registered after {REGISTER_CAP:.0f} s: {at_start}",
        ),
        Figure(
            NAME,
            "serve CPU over one unchanged poll interval",
            share,
            "% of a core",
            100 * base["round_cpu"] / POLL,
            f"direct SDK: one list round of {SERVERS} per {POLL:g} s",
            f"< {TARGET_CPU:.0f}%",
            share < TARGET_CPU,
            f"{idle['cpu']:.2f} s CPU in {idle['wall']:.1f} s (ticks, pings and leases included); {window}",
            valid=complete,
        ),
        Figure(
            NAME,
            "DB commits during one unchanged poll interval",
            idle["commits"],
            "",
            None,
            "",
            "0",
            idle["commits"] == 0,
            f"rows written: {written}",
            idle["changed"],
        ),
        Figure(
            NAME,
            "  of which poll writes (servers whose tools/last_refresh were rewritten)",
            poll_writes,
            "",
            None,
            "",
            "0",
            poll_writes == 0,
            valid=complete,
        ),
        Figure(
            NAME,
            "changed server: change -> visible in /v1/mcp/tools, p50",
            ms(percentile(bumps, 50)) if bumps else 0.0,
            "ms",
            ms(base["list_one"]),
            "direct SDK: list one server",
            note=f"{BUMPS} changes announced by list_changed; max {ms(max(bumps)):.0f} ms"
            if bumps
            else "m000 not connected: not measured",
            valid=bool(bumps),
        ),
    ]
