"""Test server whose tools/list is paginated: 25 tools (tool_00..tool_24), pages of 10.

MCPServer's tools/list handler ignores the cursor, so this uses the low-level Server.
The cursor is the next start index as a string; a bad cursor is an INVALID_PARAMS error.
"""

import os

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

PAGE = 10
TOOLS = [
    types.Tool(name=f"tool_{i:02d}", description=f"Paged tool number {i}.", input_schema={"type": "object"})
    for i in range(25)
]


async def list_tools(ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    cursor = params.cursor if params is not None else None
    try:
        start = int(cursor) if cursor else 0
    except ValueError:
        raise MCPError(types.INVALID_PARAMS, f"bad cursor {cursor!r}") from None
    end = start + PAGE
    if os.environ.get("PAGED_LOOP"):
        # A broken server: every page points back at the second one.
        return types.ListToolsResult(tools=TOOLS[start:end], next_cursor="10")
    return types.ListToolsResult(tools=TOOLS[start:end], next_cursor=str(end) if end < len(TOOLS) else None)


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    if not any(t.name == params.name for t in TOOLS):
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="no such tool")], is_error=True
        )
    return types.CallToolResult(content=[types.TextContent(type="text", text=params.name)])


server = Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
