"""Hardening found with issue 10: static paths, oversized server messages, long polls whose
client left, and running behind a TLS proxy."""

import asyncio
import os
import sys

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

from mcpcore.staticserve import StaticFiles
from mcpcore.supervisor import stdio
from tests.live import SERVERS

# --- static files -------------------------------------------------------------------------------


async def _get(app, path: str) -> tuple[int, bytes]:
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    async def downstream(scope, receive, send):
        raise AssertionError("static paths must not reach Django")

    app.app = downstream
    await app({"type": "http", "method": "GET", "path": path, "headers": []}, receive, send)
    return sent[0]["status"], sent[1]["body"]


@pytest.mark.parametrize(
    "path",
    [
        "/static//etc/passwd",
        "/static/../../etc/passwd",
        "/static/mcpcore/../../../etc/passwd",
        "/static/%2e%2e/etc/passwd",
        "/static/\x00",
        "/static/a\\..\\..\\x",
        "/static/" + "x" * 5000,
        "/static/nope.css",
    ],
)
def test_it_answers_404_for_static_paths_outside_or_missing(path):
    app = StaticFiles(None)
    status, body = asyncio.run(_get(app, path))
    assert (status, body) == (404, b"not found")
    assert app._cache == {}  # misses are not remembered: no growth from random paths


def test_it_serves_and_caches_a_static_file_that_exists():
    app = StaticFiles(None)
    status, body = asyncio.run(_get(app, "/static/mcpcore/console.css"))
    assert status == 200 and body
    assert list(app._cache) == ["mcpcore/console.css"]


# --- an oversized stdio message -----------------------------------------------------------------


def test_it_ends_a_call_whose_answer_is_over_the_bound_and_keeps_the_session(monkeypatch):
    monkeypatch.setattr(stdio, "MAX_MESSAGE", 2**20)
    params = StdioServerParameters(command=sys.executable, args=[str(SERVERS / "huge.py")], env=dict(os.environ))

    async def scenario():
        with open(os.devnull, "w") as errlog, anyio.fail_after(60):
            async with Client(stdio.stdio_transport(params, errlog), mode="auto") as client:
                with pytest.raises(MCPError) as caught:
                    await client.call_tool("text", {"n": 3 * 2**20})
                assert "over the 1 MiB limit and was dropped" in str(caught.value)
                assert caught.value.error.code == -32603
                # The session goes on: the next answer arrives as usual.
                result = await client.call_tool("echo", {"text": "still here"})
                assert result.content[0].text == "still here"

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "line, request_id",
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"' + b"x" * 5000 + b'"}]}}', 7),
        (b'{"result":{"text":"' + b"x" * 5000 + b'","id":1},"jsonrpc":"2.0","id":"abc"}', "abc"),
        (b'{"jsonrpc":"2.0","result":{"text":"\\"id\\": 9, ' + b"x" * 5000 + b'"}}', None),
    ],
)
def test_it_finds_the_id_of_a_dropped_line_only_where_the_message_carries_it(line, request_id):
    async def feed():
        parts = _Line(limit=1000)
        for i in range(0, len(line), 333):
            parts.add(line[i : i + 333])
        assert parts.parts == [] and len(parts.tail) <= 4096
        return await parts.take()

    _Line = stdio._Line
    message = asyncio.run(feed())
    if request_id is None:
        assert isinstance(message, ValueError)
    else:
        assert message.message.id == request_id
        assert "over the" in message.message.error.message
