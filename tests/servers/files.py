"""Test server that serves files under `/home` by a resource template, as a filesystem server
does (SPEC 20.3's example rule `deny resource:fs(uri:file:///home/*/.ssh/*)` names it), over
stdio:

    python tests/servers/files.py

Template `file:///home/{user}/{folder}/{name}`: every read answers `contents of
/home/<user>/<folder>/<name>` with the parts as the SDK's template match decodes them (so
`%2essh` is `.ssh` here), and nothing is read from disk.
"""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("files", log_level="WARNING")


@mcp.resource("file:///home/{user}/{folder}/{name}", name="file", mime_type="text/plain")
def home_file(user: str, folder: str, name: str) -> str:
    return f"contents of /home/{user}/{folder}/{name}"


@mcp.tool()
def hello() -> str:
    """A tool, so that the server has one."""
    return "hello"


if __name__ == "__main__":
    mcp.run()
