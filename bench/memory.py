"""7. Memory: resident size of the `serve` process (its MCP server children excluded) with 50
connected stdio servers (bench/servers/many.py, 100 tools each), against the same process
before any server was added."""

import time
from collections import Counter

from bench.common import Figure, console, many_server, rss_mb

NAME = "memory"
SERVERS = 50
TOOLS = 100
CAP = 120.0
SETTLE = 5.0
TARGET_MB = 200.0


def connected(con) -> int:
    return sum(1 for s in con.status().values() if s["state"] == "connected" and s["tools"] == TOOLS)


def run() -> list[Figure]:
    with console({}) as con:
        pid = con.proc.pid
        time.sleep(2)
        con.get("/v1/mcp/status")
        empty = rss_mb(pid)
        con.write_servers({f"r{i:02d}": many_server(f"r{i:02d}", TOOLS) for i in range(SERVERS)})
        started, peak, up = time.perf_counter(), empty, 0
        while time.perf_counter() - started < CAP:
            peak = max(peak, rss_mb(pid))
            up = connected(con)
            if up == SERVERS:
                break
            time.sleep(0.5)
        connect_s = time.perf_counter() - started
        time.sleep(SETTLE)
        steady = rss_mb(pid)
        peak = max(peak, steady)
        up = connected(con)
        states = Counter(s["state"] for s in con.status().values())
    note = (
        f"{up}/{SERVERS} connected when measured ({dict(states)}); all connected after {connect_s:.0f} s"
        if up == SERVERS
        else f"only {up}/{SERVERS} connected when measured: {dict(states)}"
    )
    return [
        Figure(
            NAME,
            f"serve RSS with {SERVERS} connected servers",
            steady,
            "MB",
            empty,
            "same serve, no servers",
            f"< {TARGET_MB:.0f} MB",
            steady < TARGET_MB and up == SERVERS,
            note,
        ),
        Figure(NAME, "serve RSS peak while connecting", peak, "MB", empty, "same serve, no servers"),
        Figure(NAME, "RSS per connected server", (steady - empty) / max(up, 1), "MB"),
    ]
