"""10. Servers in a sandbox (SPEC 26): what bubblewrap costs a server's connect and its calls.

One console, the same echo script twice over stdio: `echo` unsandboxed and `walled` with
`"sandbox": true`. Connect: `POST /v1/mcp/reconnect` of each (it answers once the server is
connected again: the old process ended, a new one started and its handshake done), alternating,
p50 of each (target: sandboxed within 150 ms of unsandboxed). Calls: `POST /v1/mcp/call` (auto)
of each server's echo, interleaved in blocks, p50 difference (target: under 0.2 ms)."""

import asyncio
import time

from bench.common import Figure, console, echo_body, ms, our_server, percentile
from bench.overhead import console_calls
from bench.rawhttp import RawHttp

NAME = "sandbox"
RECONNECTS = 12
CALLS = 1000
BLOCK = 100
WARMUP = 50
CONNECT_TARGET_MS = 150.0
CALL_TARGET_MS = 0.2
SERVERS = ("echo", "walled")


async def reconnect(http, name: str) -> float:
    t = time.perf_counter()
    r = await http.post("/v1/mcp/reconnect", json={"name": name})
    took = time.perf_counter() - t
    if r.status_code != 200 or r.json()["servers"].get(name) != "connected":
        raise RuntimeError(f"reconnect of {name} failed: {r.status_code} {r.text[:300]}")
    return took


async def measure(con) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    connects: dict[str, list[float]] = {n: [] for n in SERVERS}
    called: dict[str, list[float]] = {n: [] for n in SERVERS}
    async with RawHttp(con.url, con.token) as http:
        for name in SERVERS:  # the first sandboxed start also probes bubblewrap once
            await reconnect(http, name)
        for i in range(RECONNECTS):  # alternating, and each starting first in turn
            for name in SERVERS if i % 2 == 0 else SERVERS[::-1]:
                connects[name].append(await reconnect(http, name))
        for name in SERVERS:
            await console_calls(http, WARMUP, echo_body(name=f"mcp__{name}__echo"))
        for _ in range(CALLS // BLOCK):  # interleaved, so drift hits both alike
            for name in SERVERS:
                called[name] += await console_calls(http, BLOCK, echo_body(name=f"mcp__{name}__echo"))
    return connects, called


def run() -> list[Figure]:
    servers = {"echo": our_server("echo.py"), "walled": {**our_server("echo.py"), "sandbox": True}}
    with console(servers) as con:
        con.wait_connected(*SERVERS)
        connects, called = asyncio.run(measure(con))
    c_plain, c_walled = (ms(percentile(connects[n], 50)) for n in SERVERS)
    k_plain, k_walled = (ms(percentile(called[n], 50)) for n in SERVERS)
    return [
        Figure(
            NAME,
            "reconnect p50, sandboxed over unsandboxed",
            c_walled - c_plain,
            "ms",
            c_plain,
            "unsandboxed reconnect p50",
            f"< {CONNECT_TARGET_MS:g} ms",
            c_walled - c_plain < CONNECT_TARGET_MS,
            f"sandboxed {c_walled:.1f} ms, unsandboxed {c_plain:.1f} ms ({RECONNECTS} each, alternating)",
        ),
        Figure(
            NAME,
            "call p50, sandboxed over unsandboxed",
            k_walled - k_plain,
            "ms",
            k_plain,
            "unsandboxed call p50",
            f"< {CALL_TARGET_MS} ms",
            k_walled - k_plain < CALL_TARGET_MS,
            f"sandboxed {k_walled:.3f} ms, unsandboxed {k_plain:.3f} ms ({CALLS} calls each, interleaved)",
        ),
    ]
