"""Echo test server.

    python tests/servers/echo.py [--name NAME]
stdio by default. MCP_ECHO_PORT=N: streamable HTTP on http://127.0.0.1:N/mcp instead, or, with
MCP_ECHO_TRANSPORT=sse as well, the legacy SSE transport on http://127.0.0.1:N/sse.
"""

import argparse
import asyncio
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

parser = argparse.ArgumentParser()
parser.add_argument("--name", default="echo")
args = parser.parse_args()

mcp = MCPServer(args.name, instructions="Echo server instructions.", log_level="WARNING")


@mcp.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@mcp.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then answer "slept". Writes "sleep started" to stderr on entry (a test can wait
    for the call to be in the server's hands) and "sleep cancelled" if cancelled."""
    print("sleep started", file=sys.stderr, flush=True)
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        print("sleep cancelled", file=sys.stderr, flush=True)
        raise
    return "slept"


@mcp.tool()
def big(n: int) -> str:
    """Return n times "x"."""
    return "x" * n


@mcp.tool()
def header(name: str, ctx: Context) -> str:
    """Return the value of HTTP request header `name` ("" on stdio or if absent)."""
    return (ctx.headers or {}).get(name.lower(), "")


@mcp.tool()
def fail() -> str:
    """Always fails: the client gets a result with is_error=True and this message."""
    raise ToolError("fail was called")


if __name__ == "__main__":
    port = os.environ.get("MCP_ECHO_PORT")
    if port and os.environ.get("MCP_ECHO_TRANSPORT") == "sse":
        mcp.run("sse", host="127.0.0.1", port=int(port))
    elif port:
        mcp.run("streamable-http", host="127.0.0.1", port=int(port))
    else:
        mcp.run()
