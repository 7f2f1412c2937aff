"""The MCP supervisor, the console's MCP client side (with `mcpserver/`, the server side, the
only code that imports `mcp`). One per process that hosts it (the embedded `serve`, or each
`mcpworker`, wired by `mcpcore.runtime`); it owns the sessions of the servers it holds a lease
on.
"""

from .core import Supervisor

__all__ = ["Supervisor"]
