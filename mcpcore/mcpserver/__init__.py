"""The console as an MCP server (SPEC 13, 19): `/mcp`, `/mcp/<server>`, `/mcp/v/<view>` and
`/mcp/_permission`, served by the `mcp` SDK's server side. The process wiring
(`mcpcore.runtime`) makes one `McpEndpoint` per process, mounts it, and shuts it down when the
process stops.
"""

from .app import McpEndpoint, McpRouter

__all__ = ["McpEndpoint", "McpRouter"]
