"""A server for the trace tests (SPEC 27), on the SDK's `MCPServer`, over stdio: what a traced
call passed on in `_meta.traceparent`, a tool that echoes, one that fails, a prompt and a
resource; the tests allow every tool but `later`.

    python tests/servers/traced.py
"""

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

mcp = MCPServer("traced", log_level="WARNING")


@mcp.tool()
def traceparent(ctx: Context) -> str:
    """The `_meta.traceparent` of this call's request ("" without one)."""
    meta = ctx.request_context.meta or {}
    return str(meta.get("traceparent", ""))


@mcp.tool()
def later(ctx: Context) -> str:
    """As `traceparent`, for the tests to leave off the allow-list (a held call)."""
    return traceparent(ctx)


@mcp.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@mcp.tool()
def fail() -> str:
    """Always fails (a result with isError)."""
    raise ToolError("fail was called")


@mcp.prompt()
def greet(name: str) -> str:
    """A greeting for `name`."""
    return f"Hello {name}"


@mcp.resource("note://traced/readme")
def readme() -> str:
    """A fixed note."""
    return "the traced server's note"


if __name__ == "__main__":
    mcp.run()
