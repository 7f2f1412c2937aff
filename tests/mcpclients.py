"""The MCP SDK's own client and the TypeScript SDK's (tests/mcp_ts_client.mjs) against a live
console's MCP endpoints, and the inbox reads the tests that drive them share
(tests/mcpserver/test_endpoint.py, tests/mcpserver/test_approval_doors.py, tests/mcpserver/test_toolviews_live.py)."""

import json
import queue
import subprocess
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import mcp_types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from tests.live import await_until

TS_CLIENT = Path(__file__).resolve().parent / "mcp_ts_client.mjs"


@asynccontextmanager
async def mcp_client(c, path="/mcp", mode="auto", message_handler=None, token=None):
    """An SDK `Client` on `c.url + path` with `token` (else the console's own), in `mode`."""
    headers = {"Authorization": f"Bearer {token or c.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        transport = streamable_http_client(c.url + path, http_client=http)
        async with Client(transport, mode=mode, message_handler=message_handler) as client:
            assert (client.protocol_version in MODERN_PROTOCOL_VERSIONS) == (mode != "legacy")
            yield client


async def until_told(url: str, token: str, mode: str, change) -> tuple[set[str], float, set[str]]:
    """Open an SDK `Client` on `url` in `mode`, listening for list_changed (the 2026 era by its
    `listen` stream, the 2025 era by its session's), make `change` (a blocking function, run in a
    thread) and return the tool names before, how long after `change` the client heard
    list_changed (bounded at 5 s), and the names it then lists."""
    seen = anyio.Event()

    async def on_message(message):
        if isinstance(message, mcp_types.ToolListChangedNotification):
            seen.set()

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, message_handler=on_message) as client:
            assert (client.protocol_version in MODERN_PROTOCOL_VERSIONS) == (mode != "legacy")
            async with anyio.create_task_group() as tg:
                if mode != "legacy":
                    ready = anyio.Event()

                    async def listen():
                        async with client.listen(tools_list_changed=True):
                            ready.set()
                            await anyio.sleep_forever()

                    tg.start_soon(listen)
                    await ready.wait()
                # A round trip: the 2025 notification stream is open by now.
                before = {t.name for t in (await client.list_tools()).tools}
                await in_thread(change)
                asked = time.monotonic()
                with anyio.fail_after(5):
                    await seen.wait()
                took = time.monotonic() - asked
                after = {t.name for t in (await client.list_tools(cache_mode="refresh")).tools}
                tg.cancel_scope.cancel()
    return before, took, after


def grow_tool(c, name: str) -> None:
    """Have the `dyn` test server (tests/servers/dynamic.py) register a tool `name` now."""
    r = c.call("mcp__dyn__add_tool", {"name": name}, mode="auto")
    assert r.status_code == 200 and r.json()["status"] == "done", r.text


async def in_thread(fn, *args):
    return await anyio.to_thread.run_sync(fn, *args)


def pending_for(c, tool_name: str) -> list[dict]:
    """The inbox's pending items for `tool_name`."""
    return [p for p in c.get("/v1/pending").json()["pending"] if p["tool_name"] == tool_name]


async def wait_pending(c, tool_name: str, timeout: float = 10) -> dict:
    """The first pending item for `tool_name`, polled for until `timeout` seconds."""
    items = await await_until(lambda: pending_for(c, tool_name), timeout, what=f"{tool_name} pending")
    return items[0]


class TsClient:
    """tests/mcp_ts_client.mjs in a subprocess, one JSON line per command and per event."""

    def __init__(self, c, path="/mcp", token=None, capabilities: dict | None = None) -> None:
        extra = [json.dumps(capabilities)] if capabilities is not None else []
        self.proc = subprocess.Popen(
            ["node", str(TS_CLIENT), c.url + path, token or c.token, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: queue.Queue = queue.Queue()
        self.seen: list[dict] = []
        self._next = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.connected = self.wait(lambda e: e.get("event") == "connected", 20)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def send(self, op: str, **fields) -> int:
        self._next += 1
        self.proc.stdin.write(json.dumps({"id": self._next, "op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        return self._next

    def wait(self, predicate, timeout: float) -> dict:
        for event in self.seen:
            if predicate(event):
                return event
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no such event within {timeout}s; seen {self.seen[-5:]}")
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(event)
            if predicate(event):
                return event

    def answer(self, request_id: int, timeout: float) -> dict:
        return self.wait(lambda e: e.get("id") == request_id and ("result" in e or "error" in e), timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)
        self._reader.join(5)  # it reads to the end of the dead process's output
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            pipe.close()
