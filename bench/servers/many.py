"""Bench server with many tools, stdio, on the SDK's MCPServer.

    MANY_TOOLS=100 python bench/servers/many.py [--name NAME]

Registers MANY_TOOLS tools in all: `tool_000` ... (each echoes its `text`) and `bump`.
`bump(description)` gives `tool_000` a new description and announces the change in both
protocol eras (like tests/servers/dynamic.py), so a watcher re-lists this server.
"""

import argparse
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus

parser = argparse.ArgumentParser()
parser.add_argument("--name", default="many")
args = parser.parse_args()
COUNT = max(1, int(os.environ.get("MANY_TOOLS", "100")))

mcp = MCPServer(
    args.name,
    instructions=f"Bench server {args.name}.",
    subscriptions=InMemorySubscriptionBus(),
    log_level="WARNING",
)


def make_tool(index: int, description: str) -> None:
    def tool(text: str = "", count: int = 1) -> str:
        return text * count

    mcp.add_tool(tool, name=f"tool_{index:03d}", description=description)


for i in range(COUNT - 1):
    make_tool(i, f"Bench tool {i} of server {args.name}: returns `text` `count` times.")


@mcp.tool()
async def bump(description: str, ctx: Context) -> str:
    """Give tool_000 a new description and announce that the tool list changed."""
    mcp.remove_tool("tool_000")
    make_tool(0, description)
    await ctx.notify_tools_changed()  # 2026-07-28 sessions: their subscriptions/listen stream
    await ctx.session.send_tool_list_changed()  # 2025-11-25 sessions
    return "bumped"


if __name__ == "__main__":
    mcp.run()
