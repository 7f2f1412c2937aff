"""Test server with a tool that never answers, for fault-injection tests.

    python tests/servers/stall.py
Tools: `stall` (never returns; the server itself stays responsive; writes "stall cancelled" to
stderr when the client cancels it) and `echo(text)`. stdio only.
"""

import asyncio
import sys

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("stall", instructions="Stall server instructions.", log_level="WARNING")


@mcp.tool()
async def stall() -> str:
    """Never returns: once cancelled, it writes "stall cancelled" to stderr."""
    try:
        await asyncio.Event().wait()  # ends only by cancellation
    finally:
        print("stall cancelled", file=sys.stderr, flush=True)
    return "unreachable"


@mcp.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


if __name__ == "__main__":
    mcp.run()
