"""Test server that returns very large results, for fault-injection tests.

    python tests/servers/huge.py
stdio by default; HUGE_PORT=N serves streamable HTTP on http://127.0.0.1:N/mcp instead.
Tools (all unstructured, so the wire carries the payload once, not twice):
- `text(n)`: one text item of n bytes ("x" * n);
- `image(n)`: a PNG-typed image item whose base64 data is n bytes, then a short text item;
- `echo(text)`: the text unchanged.
"""

import os

from mcp.server.mcpserver import MCPServer
from mcp_types import ImageContent, TextContent

mcp = MCPServer("huge", log_level="WARNING")


@mcp.tool(structured_output=False)
def text(n: int) -> list[TextContent]:
    """Return n bytes of text."""
    return [TextContent(type="text", text="x" * n)]


@mcp.tool(structured_output=False)
def image(n: int) -> list:
    """Return an image with n bytes of base64 data, then a text item."""
    return [
        ImageContent(type="image", data="A" * n, mime_type="image/png"),
        TextContent(type="text", text="caption"),
    ]


@mcp.tool(structured_output=False)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


if __name__ == "__main__":
    port = os.environ.get("HUGE_PORT")
    if port:
        mcp.run("streamable-http", host="127.0.0.1", port=int(port))
    else:
        mcp.run()
