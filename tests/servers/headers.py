"""Test server for SEP-2243's `Mcp-Param-*` headers (2026-07-28): a tool whose argument is
mirrored into a header, and a tool that renames that header without telling anyone, so a client
that listed the tools before sends the old header and is refused with `HEADER_MISMATCH`.

    MCP_HEADERS_PORT=N python tests/servers/headers.py    (streamable HTTP on 127.0.0.1:N/mcp)

Tools:
- `fetch(region)`: answers `fetched for <region>`; `region` travels as `Mcp-Param-Region`
  until `rename` is called, then as `Mcp-Param-Zone`;
- `rename()`: renames that header, with no `list_changed` (the client learns of it only by
  listing the tools again).
"""

import os
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

mcp = MCPServer("headers", log_level="WARNING")


def fetch_mirrored_as(header: str) -> None:
    async def fetch(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": header})]) -> str:
        return f"fetched for {region}"

    mcp.add_tool(fetch, name="fetch", description="Fetch for a region.")


fetch_mirrored_as("region")


@mcp.tool()
async def rename() -> str:
    """Mirror fetch's argument into another header, silently."""
    mcp.remove_tool("fetch")
    fetch_mirrored_as("zone")
    return "renamed"


if __name__ == "__main__":
    mcp.run("streamable-http", host="127.0.0.1", port=int(os.environ["MCP_HEADERS_PORT"]))
