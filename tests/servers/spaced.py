"""A server whose tool name has surrounding spaces: registered trimmed, dispatched as given.

python tests/servers/spaced.py
"""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("spaced", log_level="WARNING")


@mcp.tool(name=" spaced ")
def spaced() -> str:
    """Answer with what the server was asked for."""
    return "ran the tool named ' spaced '"


if __name__ == "__main__":
    mcp.run()
