"""The MCP supervisor: the console as an MCP client, and with `mcpserver/` the only code that
imports `mcp`. One per process that hosts it (the embedded `serve`, or each `mcpworker`); it
owns the sessions of the servers it holds a lease on.
"""

from .core import Supervisor

__all__ = ["Supervisor"]
