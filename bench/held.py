"""9. 1,000 calls held at once through `/mcp` on one `serve` (SPEC 18.4).

1,000 `tools/call`s of the untrusted echo (so each waits for a person) by raw JSON-RPC clients
(bench/rawhttp.py, the 2026-07-28 era, one keep-alive connection per call, a progress token
each), from ten agent tokens of 100 calls each: AGENVOY_MAX_PENDING stays at its default of
100 per token. The calls are opened in waves of 100, each wave once the last one's calls are
all pending (Twisted listens with a backlog of 50). Then, with all of them held for HOLD
seconds:

- heartbeats: every call's progress notifications, from its first to its approval, never
  more than 10 s apart (SPEC 13.3), `progress` increasing, the message naming its Pending page;
- memory: serve's RSS (children excluded) with the 1,000 held minus before they were made,
  per held call; serve's CPU while they are only held;
- approval to client: one approve at a time (`POST /v1/session/<sid>/confirm/<cid>` with an
  approver token), from sending it to the waiting client holding its result (the echo call
  included), then the rest APPROVERS at a time; the baseline is the same with one call held
  (BASELINE of them, one after the other, before the 1,000)."""

import asyncio
import re
import time

from bench.common import Figure, console, cpu_seconds, echo_servers, ms, percentile, rss_mb
from bench.rawhttp import MODERN, RawHttp, RawMcp

NAME = "held"
CALLS = 1000
TOKENS = 10
WAVE = 100
HOLD = 25.0  # seconds with all of them held: at least four heartbeats each
ONE_AT_A_TIME = 300  # approvals sent one by one; the rest APPROVERS at a time
APPROVERS = 25
BASELINE = 20  # approvals of a call held alone, before the 1,000
BEAT_LIMIT = 10.0  # SPEC 13.3
LATENCY_TARGET_MS = 100.0
SESSION_META = "io.agenvoy/session"
PENDING_PAGE = re.compile(r"^waiting for approval: \S+/pending/([0-9a-zA-Z_-]+)/$")


class Held:
    """One call: its progress as it came, its confirmation, its end."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.session = f"held-{n}"
        self.beats: list[tuple[float, float, str]] = []  # (when, progress, message)
        self.pending = asyncio.Event()
        self.confirm_id: str | None = None
        self.approved_at: float | None = None
        self.ended_at: float | None = None
        self.result: dict | None = None
        self.error: str | None = None

    def on_progress(self, params: dict) -> None:
        self.beats.append((time.perf_counter(), params.get("progress"), params.get("message") or ""))
        if self.confirm_id is None:
            match = PENDING_PAGE.match(params.get("message") or "")
            if match:
                self.confirm_id = match.group(1)
                self.pending.set()

    async def run(self, client: RawMcp) -> None:
        try:
            self.result = await client.call(
                "echo__echo",
                {"text": self.session},
                progress_token=f"p{self.n}",
                on_progress=self.on_progress,
                meta={SESSION_META: self.session},
            )
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            self.pending.set()
        self.ended_at = time.perf_counter()

    def heartbeat_problem(self) -> str | None:
        """Why this call's heartbeats break SPEC 13.3, or None."""
        if not self.beats:
            return "no progress at all"
        times = [b[0] for b in self.beats] + [self.approved_at or self.ended_at]
        gap = max(b - a for a, b in zip(times, times[1:], strict=False))
        if gap > BEAT_LIMIT:
            return f"{gap:.1f} s without progress"
        values = [b[1] for b in self.beats]
        if any(b <= a for a, b in zip(values, values[1:], strict=False)):
            return f"progress not increasing: {values}"
        if not all(PENDING_PAGE.match(b[2]) for b in self.beats):
            return f"message: {self.beats[0][2]!r}"
        return None


async def approve(person: RawHttp, call: Held) -> None:
    call.approved_at = time.perf_counter()
    r = await person.post(f"/v1/session/mcp:{call.session}/confirm/{call.confirm_id}", {"approve": True})
    if r.status != 200:
        raise RuntimeError(f"approve {call.session}: HTTP {r.status} {r.body[:200]!r}")


async def ended(call: Held, timeout: float = 30) -> None:
    deadline = time.perf_counter() + timeout
    while call.ended_at is None:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{call.session} never got its result")
        await asyncio.sleep(0.001)


async def measure(con, tokens: list[str]) -> dict:
    pid = con.proc.pid
    clients = [RawMcp(f"{con.url}/mcp", MODERN, t) for t in tokens]
    person = RawHttp(con.url, con.approver_token)
    calls = [Held(n) for n in range(CALLS)]
    # The baseline: calls held one at a time, each approved (the first warms the paths up).
    alone = []
    for n in range(-BASELINE - 1, 0):
        warm = Held(n)
        task = asyncio.ensure_future(warm.run(clients[0]))
        await asyncio.wait_for(warm.pending.wait(), 30)
        await asyncio.sleep(0.02)  # the call is now parked in its wait
        await approve(person, warm)
        await task
        if warm.error or warm.result.get("isError"):
            raise RuntimeError(f"baseline call failed: {warm.error or warm.result}")
        alone.append(warm.ended_at - warm.approved_at)
    await asyncio.sleep(1)
    rss_before = rss_mb(pid)
    tasks = []
    t_open = time.perf_counter()
    for start in range(0, CALLS, WAVE):
        wave = calls[start : start + WAVE]
        tasks += [asyncio.ensure_future(c.run(clients[c.n % TOKENS])) for c in wave]
        await asyncio.wait_for(asyncio.gather(*(c.pending.wait() for c in wave)), 120)
    opened = time.perf_counter() - t_open
    print(f"   {CALLS} calls pending after {opened:.1f} s; holding them {HOLD:.0f} s", flush=True)
    failed = [c for c in calls if c.error]
    if failed:
        raise RuntimeError(f"{len(failed)} calls failed while opening; first: {failed[0].error}")
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.sleep(HOLD)
    hold_cpu = (cpu_seconds(pid) - cpu0) / (time.perf_counter() - t0)
    rss_held = rss_mb(pid)
    fds = _fds(pid)
    latencies = []
    print(f"   approving {ONE_AT_A_TIME} one at a time", flush=True)
    for call in calls[:ONE_AT_A_TIME]:
        await approve(person, call)
        await ended(call)
        latencies.append(call.ended_at - call.approved_at)
    burst = []

    async def approver(queue: list[Held]) -> None:
        while queue:
            call = queue.pop()
            await approve(person, call)
            await ended(call)
            burst.append(call.ended_at - call.approved_at)

    rest = calls[ONE_AT_A_TIME:]
    await asyncio.gather(*(approver(rest) for _ in range(APPROVERS)))
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    for c in (*clients, person):
        await c.__aexit__(None, None, None)
    return {
        "calls": calls,
        "rss_before": rss_before,
        "rss_held": rss_held,
        "hold_cpu": hold_cpu,
        "fds": fds,
        "opened": opened,
        "latencies": latencies,
        "burst": burst,
        "alone": alone[1:],
    }


def _fds(pid: int) -> int | None:
    import psutil

    try:
        return psutil.Process(pid).num_fds()
    except psutil.Error:
        return None


def run() -> list[Figure]:
    env = {"AGENVOY_CONFIRM_TIMEOUT": "900"}  # the run takes minutes; none may expire meanwhile
    with console(echo_servers(), env, start=False) as con:
        tokens = [con._insert_token(f"held-{i}", "agent") for i in range(TOKENS)]
        con.start()
        con.wait_connected("echo")
        out = asyncio.run(measure(con, tokens))
    calls: list[Held] = out["calls"]
    wrong = [(c.session, why) for c in calls if (why := c.heartbeat_problem())]
    bad_results = [
        c.session
        for c in calls
        if c.result is None
        or c.result.get("isError")
        or c.result.get("content", [{}])[0].get("text") != c.session
    ]
    beats = [len(c.beats) for c in calls]
    gaps = [b[0] - a[0] for c in calls for a, b in zip(c.beats, c.beats[1:], strict=False)]
    per_call_kb = (out["rss_held"] - out["rss_before"]) * 1024 / CALLS
    p50 = ms(percentile(out["latencies"], 50))
    return [
        Figure(
            NAME,
            f"calls held at once, heartbeats kept ({len(wrong)} broken)",
            CALLS - len(wrong),
            "calls",
            CALLS,
            "calls held",
            f"all {CALLS}, progress <= {BEAT_LIMIT:.0f} s apart",
            not wrong and not bad_results,
            f"opened in {out['opened']:.1f} s, held {HOLD:.0f} s more; {min(beats)}-{max(beats)} progress each, "
            f"largest gap {max(gaps):.2f} s; {len(bad_results)} wrong results"
            + (f"; first broken: {wrong[0]}" if wrong else ""),
        ),
        Figure(
            NAME,
            "approve -> result held, p50 (one at a time, 1,000 held)",
            p50,
            "ms",
            ms(percentile(out["alone"], 50)),
            "the same with one call held",
            f"< {LATENCY_TARGET_MS:.0f} ms",
            p50 < LATENCY_TARGET_MS,
            f"{ONE_AT_A_TIME} approvals one by one, the echo call included; p99 "
            f"{ms(percentile(out['latencies'], 99)):.1f} ms",
        ),
        Figure(
            NAME,
            f"approve -> result held, p50 ({APPROVERS} approvals at a time)",
            ms(percentile(out["burst"], 50)),
            "ms",
            note=f"the other {len(out['burst'])}; p99 {ms(percentile(out['burst'], 99)):.1f} ms",
        ),
        Figure(
            NAME,
            "serve memory per held call",
            per_call_kb,
            "KiB",
            out["rss_before"],
            "serve RSS before, MB",
            note=f"RSS {out['rss_before']:.1f} MB before, {out['rss_held']:.1f} MB with {CALLS} held; "
            f"{out['fds']} open files in serve",
        ),
        Figure(
            NAME,
            "serve CPU while 1,000 calls are held",
            100 * out["hold_cpu"],
            "% of a core",
            note="heartbeats (one per call every 5 s) and each waiting call's re-read of its row",
        ),
    ]
