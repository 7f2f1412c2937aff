"""The MCP SDK's own client against a live console's MCP endpoints, and the inbox reads the
tests that drive it share (tests/test_mcp_endpoint.py, tests/test_approval_doors.py)."""

from contextlib import asynccontextmanager

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS


@asynccontextmanager
async def mcp_client(c, path="/mcp", mode="auto", message_handler=None, token=None):
    """An SDK `Client` on `c.url + path` with `token` (else the console's own), in `mode`."""
    headers = {"Authorization": f"Bearer {token or c.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        transport = streamable_http_client(c.url + path, http_client=http)
        async with Client(transport, mode=mode, message_handler=message_handler) as client:
            assert (client.protocol_version in MODERN_PROTOCOL_VERSIONS) == (mode != "legacy")
            yield client


async def in_thread(fn, *args):
    return await anyio.to_thread.run_sync(fn, *args)


def pending_for(c, tool_name: str) -> list[dict]:
    """The inbox's pending items for `tool_name`."""
    return [p for p in c.get("/v1/pending").json()["pending"] if p["tool_name"] == tool_name]


async def wait_pending(c, tool_name: str, timeout: float = 10) -> dict:
    """The first pending item for `tool_name`, polled for until `timeout` seconds."""
    with anyio.fail_after(timeout):
        while True:
            items = await in_thread(pending_for, c, tool_name)
            if items:
                return items[0]
            await anyio.sleep(0.05)
