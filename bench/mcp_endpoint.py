"""8. `/mcp` against a direct MCP server over streamable HTTP (issue 25's table, in one run).

The same `echo` call, allow-listed, by two clients in both protocol eras (2026-07-28 and
2025-11-25): the `mcp` SDK's `Client` over its streamable-HTTP transport, and a raw JSON-RPC
client (bench/rawhttp.py: hand-written POSTs on keep-alive connections) whose own cost is
small enough to leave the server's visible. Each goes to three places: the echo server itself
over streamable HTTP (the SDK's server; the baseline), the console's `/mcp` (name
`echo__echo`) and its `/mcp/echo` (name `echo`), where the console reaches the same script
over stdio.

Per row: p50 of one client's calls (all rows interleaved in blocks), calls/s with 32 concurrent
callers on one client (two passes, the second in reverse order), the gateway's CPU per call at
32 (the serve process's own CPU time over the calls it answered, its MCP server excluded; for
the direct rows the echo server's), and the client's own CPU per call (this process)."""

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager

from bench.common import (
    ECHO,
    Figure,
    console,
    cpu_seconds,
    echo_servers,
    for_seconds,
    ms,
    percentile,
    wait_until,
)
from bench.rawhttp import LEGACY, MODERN, RawMcp, client_cpu

NAME = "mcp_endpoint"
CALLS = 300
BLOCK = 50
WARMUP = 30
SECONDS = 3.0  # per pass and row at 32 callers
CONCURRENCY = 32
P50_TARGET_MS = 2.0
SHARE = 0.6
CPU_TARGET_MS = 2.5
ARGS = {"text": "hello"}
PLACES = ("direct", "/mcp", "/mcp/echo")
ERAS = (MODERN, LEGACY)
CLIENTS = ("sdk", "raw")


@contextlib.contextmanager
def echo_over_http():
    """tests/servers/echo.py on streamable HTTP (the SDK's server under uvicorn)."""
    from tests.live import free_port

    port = free_port()
    env = {**os.environ, "MCP_ECHO_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, str(ECHO)], env=env, stderr=subprocess.DEVNULL)
    try:

        def up() -> bool:
            import socket

            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return True
            return False

        wait_until(up, 30, what="echo over HTTP")
        yield f"http://127.0.0.1:{port}/mcp", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


class Row:
    def __init__(self, place: str, era: str, kind: str) -> None:
        self.place, self.era, self.kind = place, era, kind
        self.latencies: list[float] = []
        self.latency_cpu = 0.0
        self.done = self.errors = 0
        self.wall = self.gateway_cpu = self.load_cpu = 0.0
        self.client = None

    @property
    def key(self) -> tuple[str, str, str]:
        return self.place, self.era, self.kind

    @property
    def tool(self) -> str:
        return "echo__echo" if self.place == "/mcp" else "echo"


@asynccontextmanager
async def sdk_client(url: str, era: str, token: str | None):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    limits = httpx2.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(30, read=300), limits=limits
    ) as http:
        mode = "auto" if era == MODERN else "legacy"
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            if client.protocol_version != era:
                raise RuntimeError(f"{url}: {mode} spoke {client.protocol_version}, not {era}")
            yield client


async def one_call(row: Row) -> None:
    if row.kind == "sdk":
        result = await row.client.call_tool(row.tool, ARGS)
        failed = result.is_error
    else:
        failed = (await row.client.call(row.tool, ARGS)).get("isError")
    if failed:
        raise RuntimeError(f"{row.key}: the call failed")


async def sequential(row: Row, n: int, keep: bool = True) -> None:
    cpu = client_cpu()
    for _ in range(n):
        t = time.perf_counter()
        await one_call(row)
        if keep:
            row.latencies.append(time.perf_counter() - t)
    if keep:
        row.latency_cpu += client_cpu() - cpu


async def concurrent(row: Row, seconds: float, gateway_pid: int, keep: bool = True) -> None:
    async def once() -> bool:
        await one_call(row)
        return True

    gw, cpu = cpu_seconds(gateway_pid), client_cpu()
    done, errors, wall = await for_seconds(seconds, CONCURRENCY, once)
    if keep:
        row.wall += wall
        row.gateway_cpu += cpu_seconds(gateway_pid) - gw
        row.load_cpu += client_cpu() - cpu
        row.done += done
        row.errors += errors


async def measure(con, direct_url: str, direct_pid: int) -> list[Row]:
    rows = [Row(p, e, k) for e in ERAS for k in CLIENTS for p in PLACES]
    async with contextlib.AsyncExitStack() as stack:
        for row in rows:
            url = direct_url if row.place == "direct" else con.url + row.place
            token = None if row.place == "direct" else con.token
            if row.kind == "sdk":
                row.client = await stack.enter_async_context(sdk_client(url, row.era, token))
            else:
                row.client = await stack.enter_async_context(RawMcp(url, row.era, token))
            await sequential(row, WARMUP, keep=False)
        for _ in range(CALLS // BLOCK):  # interleaved, so drift hits every row alike
            for row in rows:
                await sequential(row, BLOCK)
        for order in (rows, rows[::-1]):
            for row in order:
                pid = direct_pid if row.place == "direct" else con.proc.pid
                await concurrent(row, 0.3, pid, keep=False)
                await concurrent(row, SECONDS, pid)
    return rows


def table(rows: list[Row]) -> str:
    """Issue 25's table, in markdown."""
    by = {r.key: r for r in rows}
    out = [
        "| through | protocol | client | p50 | over direct | calls/s at 32 | x direct | gateway CPU/call "
        "| client CPU/call (1 / 32) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = by["direct", r.era, r.kind]
        p50, rate = ms(percentile(r.latencies, 50)), r.done / r.wall
        over = "-" if r is d else f"+{p50 - ms(percentile(d.latencies, 50)):.2f} ms"
        share = rate / (d.done / d.wall)
        where = "echo over streamable HTTP (SDK server)" if r.place == "direct" else f"console `{r.place}`"
        out.append(
            f"| {where} | {r.era} | {r.kind} | {p50:.2f} ms | {over} | {rate:.0f} | {share:.2f} "
            f"| {ms(r.gateway_cpu / r.done):.2f} ms | {ms(r.latency_cpu / len(r.latencies)):.2f} / "
            f"{ms(r.load_cpu / r.done):.2f} ms |"
        )
    return "\n".join(out)


def figures(rows: list[Row]) -> list[Figure]:
    by = {r.key: r for r in rows}
    out = []
    for r in rows:
        d = by["direct", r.era, r.kind]
        p50, rate = ms(percentile(r.latencies, 50)), r.done / r.wall
        d50, d_rate = ms(percentile(d.latencies, 50)), d.done / d.wall
        gw = ms(r.gateway_cpu / r.done)
        label = f"{r.place} {r.era} {r.kind}"
        note = (
            f"p50 {p50:.2f} ms; {rate:.0f} calls/s at 32 ({r.errors} errors); gateway CPU {gw:.2f} ms/call; "
            f"client CPU {ms(r.latency_cpu / len(r.latencies)):.2f} ms/call at 1, {ms(r.load_cpu / r.done):.2f} at 32"
        )
        if r is d:
            out.append(Figure(NAME, f"{label}: p50", p50, "ms", note=note, extra={"calls_per_s": rate}))
            continue
        base = f"direct, {r.era} {r.kind}"
        out += [
            Figure(
                NAME, f"{label}: p50 over direct", p50 - d50, "ms", d50, base + " p50",
                f"< {P50_TARGET_MS} ms", p50 - d50 < P50_TARGET_MS, note,
            ),
            Figure(
                NAME, f"{label}: calls/s at 32", rate, "/s", d_rate, base, f">= {SHARE} x direct, 0 errors",
                rate >= SHARE * d_rate and r.errors == 0, f"{rate / d_rate:.2f} x direct",
            ),
            Figure(NAME, f"{label}: gateway CPU/call at 32", gw, "ms", None, "", f"< {CPU_TARGET_MS} ms",
                   gw < CPU_TARGET_MS),
        ]  # fmt: skip
    return out


def run() -> list[Figure]:
    with echo_over_http() as (direct_url, direct_pid), console(echo_servers(), start=False) as con:
        (con.home / "allow_tool").write_text("mcp__echo__echo\n")
        con.start()
        con.wait_connected("echo")
        rows = asyncio.run(measure(con, direct_url, direct_pid))
    text = table(rows)
    print(text, flush=True)
    out = figures(rows)
    out[0].extra["table"] = text
    return out
