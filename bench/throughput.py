"""2. Throughput: calls per second through one `serve` with 1, 8 and 32 concurrent clients
(echo, auto), errors counted; the direct SDK client with 32 concurrent tasks as baseline; the
gateway's CPU per call (serve's own CPU, its MCP server processes excluded). The clients are
keep-alive connections written by hand (bench/rawhttp.py), so that the machine's two cores go
to the gateway rather than to an HTTP client library; their CPU per call is reported beside."""

import asyncio
import time

import psutil

from bench.common import (
    ECHO_ARGS,
    Figure,
    console,
    direct_client,
    echo_body,
    echo_servers,
    for_seconds,
    ms,
    percentile,
)
from bench.rawhttp import RawHttp

NAME = "throughput"
LEVELS = (1, 8, 32)
SECONDS = 5.0
WARMUP = 1.0
TARGET = 400.0
SHARE = 0.6  # of the direct SDK's calls/s at 32 clients (issue 11)
CPU_TARGET_MS = 2.5  # serve CPU per call (issue 11)


async def load(http, clients: int, seconds: float) -> tuple[int, int, float, list[float]]:
    """`clients` loops posting calls until the time is up; (done, errors, elapsed, latencies)."""
    body = echo_body()
    latencies: list[float] = []

    async def once() -> bool:
        t = time.perf_counter()
        try:
            r = await http.post("/v1/mcp/call", json=body)
            return r.status_code == 200 and r.json().get("status") == "done"
        finally:
            latencies.append(time.perf_counter() - t)

    return *await for_seconds(seconds, clients, once), latencies


async def direct_load(client, tasks: int, seconds: float) -> tuple[int, int, float]:
    async def once() -> bool:
        return not (await client.call_tool("echo", ECHO_ARGS)).is_error

    return await for_seconds(seconds, tasks, once)


class CpuShare:
    """% of one core used, over a `with` block, by the serve process, its MCP servers (children
    alive at both ends) and this benchmark client process."""

    def __init__(self, serve_pid: int) -> None:
        self.serve = psutil.Process(serve_pid)

    def _sample(self) -> dict:
        def cpu(p):
            t = p.cpu_times()
            return t.user + t.system

        kids = {}
        for child in self.serve.children(recursive=True):
            try:
                kids[child.pid] = cpu(child)
            except psutil.Error:
                pass
        return {"serve": cpu(self.serve), "client": cpu(psutil.Process()), "kids": kids}

    def __enter__(self):
        self.t0, self.c0 = time.perf_counter(), self._sample()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t0
        c1 = self._sample()
        kids = sum(c1["kids"][p] - self.c0["kids"][p] for p in c1["kids"] if p in self.c0["kids"])
        self.serve_seconds = c1["serve"] - self.c0["serve"]
        self.client_seconds = c1["client"] - self.c0["client"]
        self.share = {
            "serve": round(100 * (c1["serve"] - self.c0["serve"]) / wall),
            "mcp servers": round(100 * kids / wall),
            "client": round(100 * (c1["client"] - self.c0["client"]) / wall),
        }


async def measure(con) -> tuple[dict, dict, tuple, dict]:
    results, shares = {}, {}
    async with RawHttp(con.url, con.token) as http:
        await load(http, max(LEVELS), WARMUP)
        for level in LEVELS:
            with CpuShare(con.proc.pid) as cpu:
                results[level] = await load(http, level, SECONDS)
            shares[level] = {
                **cpu.share,
                "serve_seconds": cpu.serve_seconds,
                "client_seconds": cpu.client_seconds,
            }
    async with direct_client() as client:
        await direct_load(client, max(LEVELS), WARMUP)
        before = psutil.Process().cpu_times()
        direct = await direct_load(client, max(LEVELS), SECONDS)
        after = psutil.Process().cpu_times()
        shares["direct_client_seconds"] = after.user + after.system - before.user - before.system
    return results, shares, direct, {}


def run() -> list[Figure]:
    with console(echo_servers()) as con:
        con.wait_connected("echo")
        results, shares, direct, _ = asyncio.run(measure(con))
    d_done, d_err, d_wall = direct
    d_rate = d_done / d_wall
    figures = []
    for level in LEVELS:
        done, errors, wall, latencies = results[level]
        rate = done / wall
        cpu = ", ".join(f"{k} {v}%" for k, v in shares[level].items() if not k.endswith("_seconds"))
        lat = "/".join(f"{ms(percentile(latencies, p)):.0f}" for p in (50, 99)) + f"/{ms(max(latencies)):.0f}"
        last = level == max(LEVELS)
        figures.append(
            Figure(
                NAME,
                f"calls/s, {level} client{'s' if level > 1 else ''} ({errors} errors)",
                rate,
                "/s",
                d_rate if last else None,
                f"direct SDK, {max(LEVELS)} tasks" if last else "",
                f">= {TARGET:.0f}/s and >= {SHARE} x direct, 0 errors" if last else "",
                (rate >= TARGET and rate >= SHARE * d_rate and errors == 0) if last else None,
                f"latency p50/p99/max {lat} ms; CPU, % of one core: {cpu}",
                {"done": done, "errors": errors, "seconds": wall, "cpu": shares[level]},
            )
        )
    for level in (1, max(LEVELS)):
        done = results[level][0]
        per_call = ms(shares[level]["serve_seconds"] / done) if done else None
        last = level == max(LEVELS)
        figures.append(
            Figure(
                NAME,
                f"gateway CPU per call, {level} client{'s' if level > 1 else ''}",
                per_call,
                "ms",
                None,
                "",
                f"< {CPU_TARGET_MS} ms" if last else "",
                (per_call is not None and per_call < CPU_TARGET_MS) if last else None,
                "serve's own CPU time (user + system) over the calls it answered; MCP servers excluded",
            )
        )
        figures.append(
            Figure(
                NAME,
                f"client CPU per call, {level} client{'s' if level > 1 else ''}",
                ms(shares[level]["client_seconds"] / done) if done else None,
                "ms",
                ms(shares["direct_client_seconds"] / d_done) if last and d_done else None,
                "direct SDK client, 32 tasks" if last else "",
                note="this process's CPU time over its calls (raw keep-alive HTTP)",
            )
        )
    figures.append(
        Figure(
            NAME,
            f"direct SDK calls/s, {max(LEVELS)} tasks ({d_err} errors)",
            d_rate,
            "/s",
            note="one mcp Client session, same echo server script",
        )
    )
    return figures
