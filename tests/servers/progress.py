"""Test server with a slow tool that reports progress every step."""

import anyio
from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("progress", log_level="WARNING")


@mcp.tool()
async def slow(steps: int, interval: float, ctx: Context) -> str:
    """Run `steps` steps of `interval` seconds, reporting progress after each."""
    for i in range(1, steps + 1):
        await anyio.sleep(interval)
        await ctx.report_progress(i, steps, f"step {i}/{steps}")
    return "finished"


if __name__ == "__main__":
    mcp.run()
