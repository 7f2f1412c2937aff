"""8. `/mcp` overhead: a `tools/call` of the allow-listed echo through the console's MCP
endpoint (the `mcp` SDK client, both protocol eras) against a direct SDK call_tool to the same
server script over stdio, interleaved in blocks in the same run; `POST /v1/mcp/call` of the
same call alongside, since /mcp shares its path through the gate."""

import asyncio
import time
from contextlib import asynccontextmanager

from .common import (
    ECHO_ARGS,
    Figure,
    async_http,
    console,
    direct_client,
    echo_servers,
    ms,
    percentile,
)
from .overhead import console_calls

NAME = "mcp_endpoint"
CALLS = 300
BLOCK = 50
WARMUP = 30
TARGET_MS = 4.0


@asynccontextmanager
async def mcp_client(con, mode: str):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {con.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        async with Client(streamable_http_client(f"{con.url}/mcp", http_client=http), mode=mode) as client:
            yield client


async def calls(client, name: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        result = await client.call_tool(name, ECHO_ARGS)
        out.append(time.perf_counter() - t)
        if result.is_error:
            raise RuntimeError(f"call failed: {result.content}")
    return out


async def measure(con) -> dict[str, list[float]]:
    runs = {"2026": [], "2025": [], "direct": [], "rest": []}
    async with (
        mcp_client(con, "auto") as modern,
        mcp_client(con, "legacy") as legacy,
        direct_client() as direct,
        async_http(con, 1) as http,
    ):
        for client, name in ((modern, "echo__echo"), (legacy, "echo__echo"), (direct, "echo")):
            await calls(client, name, WARMUP)
        await console_calls(http, WARMUP)
        for _ in range(CALLS // BLOCK):  # interleaved, so drift hits all alike
            runs["2026"] += await calls(modern, "echo__echo", BLOCK)
            runs["2025"] += await calls(legacy, "echo__echo", BLOCK)
            runs["direct"] += await calls(direct, "echo", BLOCK)
            runs["rest"] += await console_calls(http, BLOCK)
    return runs


def run() -> list[Figure]:
    with console(echo_servers(), start=False) as con:
        (con.home / "allow_tool").write_text("mcp__echo__echo\n")
        con.start()
        con.wait_connected("echo")
        runs = asyncio.run(measure(con))
    d50 = ms(percentile(runs["direct"], 50))
    r50 = ms(percentile(runs["rest"], 50))
    figures = [Figure(NAME, "POST /v1/mcp/call p50 (same call, auto)", r50, "ms", d50, "direct SDK p50")]
    for era in ("2026", "2025"):
        c50 = ms(percentile(runs[era], 50))
        over = c50 - d50
        figures += [
            Figure(NAME, f"tools/call p50 via /mcp ({era})", c50, "ms", d50, "direct SDK p50"),
            Figure(
                NAME,
                f"p50 overhead of /mcp ({era}) over direct",
                over,
                "ms",
                d50,
                "direct SDK p50",
                f"< {TARGET_MS} ms",
                over < TARGET_MS,
                f"{CALLS} calls each, one client; /v1's path through the gate (token, the call row, "
                f"the supervisor's stdio call: /v1 p50 {r50:.2f} ms here) plus the SDK's HTTP "
                "transport on both ends",
            ),
        ]
    return figures
