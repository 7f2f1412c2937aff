"""15. The rest of MCP through `/mcp` (SPEC 20.2, issue 31): `tools/list`, `prompts/list` and
`resources/list` with 10,000 entries across 10 servers (10 bench servers of 1,000 tools, 1,000
prompts and 1,000 resources each), and with 1,000 (one of them, on `/mcp/<server>`); and a
`resources/read` of a 1 KiB text resource through `/mcp` against the same read from the server
itself over streamable HTTP, in the same run.

The lean raw JSON-RPC client (bench/rawhttp.py, 2026-07-28 era) makes every request, so the
figures are the console's, not a client library's. Rounds interleave the rows; the lists come
from memory kept by the cache generation (`mcpserver.catalog`), so the first list of a row,
which builds it, is left out as warm-up."""

import asyncio
import contextlib
import os
import subprocess
import sys
import time

from bench.common import MANY, PYTHON, Figure, console, many_server, ms, percentile, wait_until
from bench.rawhttp import MODERN, RawMcp

NAME = "mcp_lists"
SERVERS = 10
EACH = 1_000  # tools, prompts and resources per server (resources: 1,000 plus `kib`)
LISTS = 30  # per row
READS = 300  # per row, in blocks
BLOCK = 50
REGISTER_CAP = 300.0
LIST_TARGET_MS = {SERVERS * EACH: 100.0, EACH: 10.0}
READ_TARGET_MS = 2.0
METHODS = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources"}


def _registered(con) -> bool:
    status = con.status()
    return len(status) == SERVERS + 1 and all(
        s["state"] == "connected" and s["tools"] >= EACH and s.get("prompts", 0) >= min(EACH, 1)
        for name, s in status.items()
        if name != "kib"
    )


@contextlib.contextmanager
def kib_over_http():
    """bench/servers/many.py on streamable HTTP: the 1 KiB resource's server, read directly
    by the baseline row and by the console (an HTTP server of its configuration)."""
    from tests.live import free_port

    port = free_port()
    env = {**os.environ, "MANY_TOOLS": "1", "MANY_PORT": str(port)}
    proc = subprocess.Popen([PYTHON, str(MANY), "--name", "kib"], env=env, stderr=subprocess.DEVNULL)
    try:

        def up() -> bool:
            import socket

            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return True
            return False

        wait_until(up, 30, what="the kib server over HTTP")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def _lists(con) -> dict[str, list[float]]:
    places = {"/mcp": SERVERS * EACH, "/mcp/m0": EACH}
    rows: dict[str, list[float]] = {f"{m} {p}": [] for p in places for m in METHODS}
    clients = {p: RawMcp(con.url + p, MODERN, con.token) for p in places}
    for client in clients.values():
        await client.__aenter__()
    try:
        for place, client in clients.items():  # warm (builds the lists), and check the sizes
            for method, key in METHODS.items():
                got = len((await client.rpc(method))[key])
                assert got >= places[place], (method, place, got)  # resources: each server's `kib` too
        for _ in range(LISTS):
            for place, client in clients.items():
                for method in METHODS:
                    t = time.perf_counter()
                    await client.rpc(method)
                    rows[f"{method} {place}"].append(time.perf_counter() - t)
    finally:
        for client in clients.values():
            await client.__aexit__(None, None, None)
    return rows


async def _reads(con, direct: str) -> dict[str, list[float]]:
    uri = "bench://kib/kib"
    rows: dict[str, list[float]] = {"direct": [], "/mcp": []}
    async with RawMcp(direct, MODERN, None) as plain, RawMcp(con.url + "/mcp", MODERN, con.token) as gated:
        clients = {"direct": plain, "/mcp": gated}
        for client in clients.values():
            for _ in range(30):
                text = (await client.rpc("resources/read", {"uri": uri}, uri))["contents"][0]["text"]
                assert len(text) == 1024, text[:100]
        for _ in range(READS // BLOCK):
            for row, client in clients.items():
                for _ in range(BLOCK):
                    t = time.perf_counter()
                    await client.rpc("resources/read", {"uri": uri}, uri)
                    rows[row].append(time.perf_counter() - t)
    return rows


def run() -> list[Figure]:
    env = {"MANY_PROMPTS": str(EACH), "MANY_RESOURCES": str(EACH)}
    with kib_over_http() as direct:
        servers: dict = {"kib": {"url": direct}}
        for s in range(SERVERS):
            server = many_server(f"m{s}", EACH)
            servers[f"m{s}"] = {**server, "env": {**server["env"], **env}}
        with console(servers) as con:
            wait_until(lambda: _registered(con), REGISTER_CAP, what="10,000 tools, prompts and resources")
            lists = asyncio.run(_lists(con))
            reads = asyncio.run(_reads(con, direct))
    figures = []
    for key, values in lists.items():
        method, place = key.split(" ")
        size = SERVERS * EACH if place == "/mcp" else EACH
        p50 = ms(percentile(values, 50))
        target = LIST_TARGET_MS[size]
        figures.append(
            Figure(
                NAME,
                f"{method} p50, {place} ({size:,} entries)",
                p50,
                "ms",
                None,
                "",
                f"< {target:g} ms",
                p50 < target,
                extra={"p90_ms": ms(percentile(values, 90))},
            )
        )
    direct_p50, gated_p50 = (ms(percentile(reads[r], 50)) for r in ("direct", "/mcp"))
    figures.append(
        Figure(
            NAME,
            "resources/read of 1 KiB p50, /mcp",
            gated_p50,
            "ms",
            direct_p50,
            "the server directly over streamable HTTP",
            f"within {READ_TARGET_MS:g} ms",
            gated_p50 - direct_p50 <= READ_TARGET_MS,
            extra={
                "p90_ms": ms(percentile(reads["/mcp"], 90)),
                "p90_direct_ms": ms(percentile(reads["direct"], 90)),
            },
        )
    )
    return figures


if __name__ == "__main__":
    sys.exit("run it through bench/run.py mcp_lists")
