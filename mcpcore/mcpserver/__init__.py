"""The console as an MCP server (SPEC 13): `/mcp`, `/mcp/<server>` and `/mcp/_permission`,
served by the `mcp` SDK's server side. Besides `supervisor/`, the only code that imports `mcp`.
"""

from .app import McpEndpoint, McpRouter

__all__ = ["McpEndpoint", "McpRouter", "endpoint"]

# One per process: the ASGI application mounts it, and `serve` stops it on shutdown.
endpoint = McpEndpoint()
