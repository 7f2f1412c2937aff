"""18. Guard rails (SPEC 25): what 1,000 `limit` lines in the rules file add to a call, and what
a loop costs the console once a limit stops it.

- A/B in one run and one console: the auto echo call (`POST /v1/mcp/call`, raw keep-alive
  HTTP) with the rules file switched every 50 calls between 1,000 limit lines (999 on other
  servers' tools, one on the echo tool, high enough never to refuse) and none (two consoles
  side by side differed by a millisecond either way on this shared machine). Once with
  `limits`' memory storage (no REDIS_URL), once with its Redis storage (REDIS_URL set).
- The loop guard (AGENVOY_REPEAT_LIMIT, on by default) counting every call against it off:
  two consoles side by side, the same calls interleaved.
- A loop: one token sends 10,000 identical calls against `limit 100/h mcp__echo__echo`: 100
  run, the rest end at once (429); serve's own CPU time (psutil, its children excluded) over
  the loop, per refused call. Beside it, in the same console: the CPU per call of 2,000 calls a
  `deny` rule refuses (the same path, recorded `skipped` alike, no limit counted) and per
  authenticated 404 (the HTTP floor).
- In process, for context: the check's two parts, `RuleSet.limits` among the 1,000 lines and
  one moving-window hit of `limits` on each storage.
"""

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path

from bench.common import Figure, console, cpu_seconds, echo_body, echo_servers, ms, percentile
from bench.rawhttp import RawHttp

NAME = "guards"
LINES = 1_000
CALLS = 1_000
BLOCK = 50
SETTLE = 3  # calls after each switch of the rules file, not counted (they read it again)
WARMUP = 50
LOOP = 10_000
LOOP_LINE = "limit 100/h mcp__echo__echo"
DENY_LINE = "deny mcp__echo__add"
SIDE = 2_000
TARGET_MEMORY_MS = 0.1
TARGET_REDIS_MS = 0.5
TARGET_CPU_MS = 1.0
CHECKS = 5_000


def limit_lines() -> str:
    other = [f"limit {i % 50 + 1}/m mcp__srv{i:03d}__*" for i in range(LINES - 1)]
    return "\n".join([*other, "limit 1000000/h mcp__echo__echo"]) + "\n"


async def calls(http, n: int, body: dict, want: int = 200) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = await http.post("/v1/mcp/call", json=body)
        out.append(time.perf_counter() - t)
        if r.status_code != want:
            raise RuntimeError(f"call answered {r.status_code}: {r.body[:300]!r}")
    return out


# The loop guard on, counting every call, holding none of the benchmark's identical calls.
REPEAT_ON = {"AGENVOY_REPEAT_LIMIT": "100000000/5m"}


@contextlib.contextmanager
def pair(guard: dict):
    """A console with `guard` in its environment and one without, both started."""
    with contextlib.ExitStack() as stack:
        made = []
        for extra in (guard, {}):
            con = stack.enter_context(console(echo_servers(), extra))
            con.wait_connected("echo")
            made.append(con)
        yield made


async def ab(limited, plain) -> tuple[list[float], list[float]]:
    body = echo_body()
    got: dict[str, list[float]] = {"limited": [], "plain": []}
    async with RawHttp(limited.url, limited.token) as a, RawHttp(plain.url, plain.token) as b:
        await calls(a, WARMUP, body)
        await calls(b, WARMUP, body)
        for _ in range(CALLS // BLOCK):
            got["limited"] += await calls(a, BLOCK, body)
            got["plain"] += await calls(b, BLOCK, body)
    return got["limited"], got["plain"]


async def toggled(con) -> tuple[list[float], list[float]]:
    """One console, its rules file switched between the 1,000 limit lines and none between
    blocks: both sides of the A/B in the same process. The first calls of a block, which read
    the changed file again, are left out."""
    body, lines, rules_file = echo_body(), limit_lines(), con.home / "rules"
    got: dict[str, list[float]] = {"limits": [], "none": []}
    async with RawHttp(con.url, con.token) as http:
        await calls(http, WARMUP, body)
        for _ in range(CALLS // BLOCK):
            for side, text in (("limits", lines), ("none", "")):
                rules_file.write_text(text)
                await calls(http, SETTLE, body)
                got[side] += await calls(http, BLOCK, body)
    return got["limits"], got["none"]


def ab_figure(storage: str, redis_url: str, target: float) -> Figure:
    env = {"REDIS_URL": redis_url} if redis_url else {}
    with console(echo_servers(), env) as con:
        con.wait_connected("echo")
        with_limits, without = asyncio.run(toggled(con))
    p_with, p_without = ms(percentile(with_limits, 50)), ms(percentile(without, 50))
    added = p_with - p_without
    return Figure(
        NAME,
        f"p50 added by {LINES:,} limit lines ({storage})",
        added,
        "ms",
        p_without,
        "p50 of the same console with no rules",
        f"< {target:g} ms",
        added < target,
        f"p50 with limits {p_with:.3f} ms; {CALLS} calls each, the rules file switched every {BLOCK} calls",
    )


async def cpu_per_request(con, http, n: int, send) -> float:
    before = cpu_seconds(con.proc.pid)
    for _ in range(n):
        await send(http)
    return (cpu_seconds(con.proc.pid) - before) / n


async def loop(con) -> tuple[int, int, float, float, float, float]:
    body = echo_body()
    denied = {"name": "mcp__echo__add", "arguments": {"a": 1, "b": 2}, "mode": "auto"}
    async with RawHttp(con.url, con.token) as http:
        statuses = {200: 0, 429: 0}
        before, started = cpu_seconds(con.proc.pid), time.perf_counter()
        for _ in range(LOOP):
            r = await http.post("/v1/mcp/call", json=body)
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        cpu, wall = cpu_seconds(con.proc.pid) - before, time.perf_counter() - started
        deny = await cpu_per_request(con, http, SIDE, lambda h: h.post("/v1/mcp/call", json=denied))
        floor = await cpu_per_request(con, http, SIDE, lambda h: h.get("/v1/_bench"))
    return statuses[200], statuses[429], cpu, wall, deny, floor


def loop_figure() -> Figure:
    with console(echo_servers(), start=False) as con:
        (con.home / "rules").write_text(f"{LOOP_LINE}\n{DENY_LINE}\n")
        con.start()
        con.wait_connected("echo")
        ran, refused, cpu, wall, deny, floor = asyncio.run(loop(con))
    per_refused = ms(cpu / max(refused, 1))
    return Figure(
        NAME,
        f"serve CPU per refused call, a loop of {LOOP:,} identical calls",
        per_refused,
        "ms",
        ms(deny),
        "serve CPU per call a deny rule refuses",
        f"< {TARGET_CPU_MS:g} ms",
        per_refused < TARGET_CPU_MS,
        f"{ran} ran, {refused} refused (429) under `{LOOP_LINE}`; serve CPU {cpu:.2f} s over "
        f"{wall:.1f} s (the 100 calls that ran included); HTTP floor (authenticated 404) "
        f"{ms(floor):.3f} ms of serve CPU per request",
        valid=ran == 100 and refused == LOOP - 100,
    )


def per_op(fn, n: int = CHECKS) -> float:
    """Microseconds per `fn()` (best of 3 passes)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - started) / n * 1e6)
    return best


def check_figures(redis_url: str) -> list[Figure]:
    """The check's two parts, in this process: the limit lines matching a call among 1,000
    (`RuleSet.limits`), and one moving-window hit of PyPI `limits` on each storage."""
    from limits import RateLimitItemPerHour
    from limits.storage import MemoryStorage, RedisStorage
    from limits.strategies import MovingWindowRateLimiter

    from mcpcore import rules

    ruleset = rules.RuleSet(rules.parse(limit_lines()))
    assert [r.text for r in ruleset.limits("mcp__echo__echo", {"text": "x"})] == [
        limit_lines().splitlines()[-1]
    ]
    figures = [
        Figure(
            NAME,
            f"RuleSet.limits, {LINES:,} limit lines, one matching",
            per_op(lambda: ruleset.limits("mcp__echo__echo", {"text": "x"})),
            "µs",
            note="indexed by name and prefix like the deciding rules",
        )
    ]
    item = RateLimitItemPerHour(10_000_000)
    for label, storage in (("memory", MemoryStorage()), ("Redis", RedisStorage(redis_url))):
        limiter = MovingWindowRateLimiter(storage)
        figures.append(
            Figure(
                NAME,
                f"one moving-window hit, {label} storage",
                per_op(lambda limiter=limiter: limiter.hit(item, "bench", "key")),
                "µs",
                note="what a call pays per matching limit line (and once for the repeat count)",
            )
        )
    return figures


def repeat_figure() -> Figure:
    """The loop guard's cost per call (SPEC 25.2, on by default): one more count per call."""
    with pair(REPEAT_ON) as (guarded, plain):
        with_guard, without = asyncio.run(ab(guarded, plain))
    p_with, p_without = ms(percentile(with_guard, 50)), ms(percentile(without, 50))
    return Figure(
        NAME,
        "p50 added by the loop guard (memory storage, SQLite)",
        p_with - p_without,
        "ms",
        p_without,
        "p50 with AGENVOY_REPEAT_LIMIT=0",
        note=f"AGENVOY_REPEAT_LIMIT={REPEAT_ON['AGENVOY_REPEAT_LIMIT']} (counts every call, holds none); "
        f"p50 with it {p_with:.3f} ms",
    )


def run() -> list[Figure]:
    from tests.services import Redis

    figures = [ab_figure("memory storage, SQLite", "", TARGET_MEMORY_MS), repeat_figure()]
    redis = Redis(Path(tempfile.mkdtemp(prefix="agenvoy-bench-redis-")))
    try:
        figures.append(ab_figure("Redis storage, SQLite", redis.url, TARGET_REDIS_MS))
        figures += check_figures(redis.url.rsplit("/", 1)[0] + "/3")
    finally:
        redis.stop()
    figures.append(loop_figure())
    return figures
