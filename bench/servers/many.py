"""Bench server with many tools (and prompts and resources), on the SDK's MCPServer.

    MANY_TOOLS=100 [MANY_PROMPTS=0] [MANY_RESOURCES=0] [MANY_PORT=N] python bench/servers/many.py [--name NAME]

Registers MANY_TOOLS tools in all: `tool_000` ... (each echoes its `text`) and `bump`.
`bump(description)` gives `tool_000` a new description and announces the change in both
protocol eras (like tests/servers/dynamic.py), so a watcher re-lists this server.
MANY_PROMPTS prompts `prompt_000` ..., MANY_RESOURCES text resources `bench://<name>/r/000` ...,
and always `bench://<name>/kib`, 1 KiB of text. Stdio, or streamable HTTP on MANY_PORT.
"""

import argparse
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import Prompt
from mcp.server.mcpserver.resources.types import TextResource
from mcp.server.subscriptions import InMemorySubscriptionBus

parser = argparse.ArgumentParser()
parser.add_argument("--name", default="many")
args = parser.parse_args()
COUNT = max(1, int(os.environ.get("MANY_TOOLS", "100")))
PROMPTS = int(os.environ.get("MANY_PROMPTS", "0"))
RESOURCES = int(os.environ.get("MANY_RESOURCES", "0"))
PORT = int(os.environ.get("MANY_PORT", "0"))

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


def make_prompt(index: int) -> None:
    def prompt(topic: str = "tests") -> str:
        return f"Write about {topic}."

    mcp.add_prompt(
        Prompt.from_function(prompt, name=f"prompt_{index:03d}", description=f"Bench prompt {index}.")
    )


for i in range(PROMPTS):
    make_prompt(i)
for i in range(RESOURCES):
    mcp.add_resource(
        TextResource(
            uri=f"bench://{args.name}/r/{i:03d}",
            name=f"r_{i:03d}",
            description=f"Bench resource {i}.",
            mime_type="text/plain",
            text=f"resource {i}",
        )
    )
mcp.add_resource(
    TextResource(uri=f"bench://{args.name}/kib", name="kib", mime_type="text/plain", text="x" * 1024)
)


@mcp.tool()
async def bump(description: str, ctx: Context) -> str:
    """Give tool_000 a new description and announce that the tool list changed."""
    mcp.remove_tool("tool_000")
    make_tool(0, description)
    await ctx.notify_tools_changed()  # 2026-07-28 sessions: their subscriptions/listen stream
    await ctx.session.send_tool_list_changed()  # 2025-11-25 sessions
    return "bumped"


if __name__ == "__main__":
    if PORT:
        mcp.run("streamable-http", host="127.0.0.1", port=PORT)
    else:
        mcp.run()
