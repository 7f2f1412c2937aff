"""13. Views (SPEC 19): `tools/list` on `/mcp/v/<view>`, a view of 100 tools out of 10,000,
against `/mcp`'s list of all 10,000 in the same run (10 bench servers of 1,000 tools each);
and, for a token limited to that view, the p50 of a call to a tool that exists but is hidden
against one to a name that exists nowhere, on `/v1/mcp/call` and on MCP `tools/call` (the
no-oracle figure: the two should not be told apart by their time).

The lean raw JSON-RPC client (bench/rawhttp.py, 2026-07-28 era) makes every request, so the
figures are the console's, not a client library's. Rounds interleave the rows."""

import asyncio
import time

from bench.common import Figure, console, many_server, ms, percentile
from bench.rawhttp import MODERN, McpError, RawHttp, RawMcp

NAME = "toolviews"
SERVERS = 10
TOOLS = 1_000  # per server: tool_000 ... tool_998 and bump
VIEW = "hundred"
# tool_000 ... tool_009 of each server: 100 tools.
INCLUDE = [f"mcp__v{s}__tool_00*" for s in range(SERVERS)]
LISTS = 40  # per row
CALLS = 300  # per row
REGISTER_CAP = 180.0
HIDDEN, MISSING = "mcp__v0__tool_500", "mcp__v0__no_such_tool"


def _registered(con) -> bool:
    status = con.status()
    return len(status) == SERVERS and all(
        s["state"] == "connected" and s["tools"] == TOOLS for s in status.values()
    )


async def _lists(con, token: str) -> dict[str, list[float]]:
    rows = {"/mcp": [], f"/mcp/v/{VIEW}": []}
    clients = {path: RawMcp(con.url + path, MODERN, token) for path in rows}
    sizes = {}
    for client in clients.values():
        await client.__aenter__()
    try:
        for path, client in clients.items():  # warm, and check what each serves
            sizes[path] = len((await client.list_tools())["tools"])
        for _ in range(LISTS):
            for path, client in clients.items():
                t = time.perf_counter()
                await client.list_tools()
                rows[path].append(time.perf_counter() - t)
    finally:
        for client in clients.values():
            await client.__aexit__(None, None, None)
    assert sizes == {"/mcp": SERVERS * TOOLS, f"/mcp/v/{VIEW}": 100}, sizes
    return rows


async def _refusals(con, limited: str) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {
        f"{door} {kind}": [] for door in ("rest", "mcp") for kind in ("hidden", "missing")
    }
    async with RawHttp(con.url, limited) as http, RawMcp(con.url + "/mcp", MODERN, limited) as mcp:

        async def rest(name: str) -> None:
            r = await http.post("/v1/mcp/call", {"name": name, "arguments": {}, "wait": 0})
            assert r.status_code == 404 and r.json() == {"error": f"unknown tool: {name}"}, r.text

        async def over_mcp(name: str) -> None:
            exposed = name.removeprefix("mcp__")
            try:
                await mcp.call(exposed, {})
            except McpError as exc:  # a JSON-RPC error, in a 200 (2025) or a 400 (2026)
                assert "-32602" in str(exc) and f"unknown tool: {exposed}" in str(exc), exc
            else:
                raise AssertionError(f"{exposed} was not refused")

        for _ in range(20):  # warm
            for name in (HIDDEN, MISSING):
                await rest(name)
                await over_mcp(name)
        for _ in range(CALLS):
            for kind, name in (("hidden", HIDDEN), ("missing", MISSING)):
                for door, fn in (("rest", rest), ("mcp", over_mcp)):
                    t = time.perf_counter()
                    await fn(name)
                    rows[f"{door} {kind}"].append(time.perf_counter() - t)
    return rows


def run() -> list[Figure]:
    servers = {f"v{s}": many_server(f"v{s}", TOOLS) for s in range(SERVERS)}
    with console(servers) as con:
        deadline = time.perf_counter() + REGISTER_CAP
        while not _registered(con):
            if time.perf_counter() > deadline:
                raise RuntimeError(f"not all {SERVERS * TOOLS} tools registered: {con.status()}")
            time.sleep(0.5)
        r = con.post("/v1/views", {"name": VIEW, "description": "100 of 10,000.", "include": INCLUDE})
        assert r.status_code == 200 and len(r.json()["view"]["tools"]) == 100, r.text
        limited = con.manage("create_token", "bench-limited", "--view", VIEW).strip()
        lists = asyncio.run(_lists(con, con.token))
        refusals = asyncio.run(_refusals(con, limited))
    whole, view = (ms(percentile(lists[p], 50)) for p in ("/mcp", f"/mcp/v/{VIEW}"))
    p50 = {k: ms(percentile(v, 50)) for k, v in refusals.items()}
    figures = [
        Figure(
            NAME,
            f"tools/list p50, /mcp/v/{VIEW} (100 of {SERVERS * TOOLS:,} tools)",
            view,
            "ms",
            whole,
            f"/mcp ({SERVERS * TOOLS:,} tools)",
            "below /mcp's",
            view < whole,
            extra={
                "p90_view_ms": ms(percentile(lists[f"/mcp/v/{VIEW}"], 90)),
                "p90_all_ms": ms(percentile(lists["/mcp"], 90)),
            },
        )
    ]
    for door, label in (("rest", "POST /v1/mcp/call"), ("mcp", "MCP tools/call on /mcp")):
        hidden, missing = p50[f"{door} hidden"], p50[f"{door} missing"]
        figures.append(
            Figure(
                NAME,
                f"limited token, {label}: p50 of a hidden tool's refusal",
                hidden,
                "ms",
                missing,
                "a name that exists nowhere",
                "within 10% (no oracle)",
                abs(hidden - missing) <= 0.1 * missing,
            )
        )
    return figures
