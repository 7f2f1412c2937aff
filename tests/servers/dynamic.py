"""Test server whose tool list changes at runtime, and that says so in both protocol eras.

    python tests/servers/dynamic.py        (stdio)
    DYN_ADD_AFTER=2 ...                       also adds tool `later` by itself after 2 s
    DYN_LEGACY=1 ...                          speaks only the 2025-11-25 protocol

2025-11-25 sessions get `notifications/tools/list_changed` on the connection's standalone
channel (`session.send_tool_list_changed()`). 2026-07-28 sessions get it only on a
`subscriptions/listen` stream, fed by publishing `ToolsListChanged` on the subscription bus
(a direct send is dropped by the SDK at that era). We do both every time.
"""

import os

import anyio
from mcp.server.lowlevel import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import ToolsListChanged

bus = InMemorySubscriptionBus()
mcp = MCPServer("dynamic", instructions="Dynamic tools server.", subscriptions=bus, log_level="WARNING")
last_session = None  # the latest ServerSession seen; its standalone channel outlives the request


async def remember_session(ctx, call_next):
    global last_session
    last_session = ctx.session
    return await call_next(ctx)


mcp.middleware.append(remember_session)


async def notify_tools_changed() -> None:
    await bus.publish(ToolsListChanged())  # 2026-07-28: open subscriptions/listen streams
    if last_session is not None:
        await last_session.send_tool_list_changed()  # 2025-11-25: plain notification


def register(name: str) -> None:
    def fn() -> str:
        return f"I am {name}"

    mcp.add_tool(fn, name=name, description=f"Tool {name}, added at runtime.")


@mcp.tool()
def first() -> str:
    """The tool present from the start."""
    return "first"


@mcp.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Register a new tool called `name` and announce the change."""
    register(name)
    await ctx.notify_tools_changed()  # same as bus.publish(ToolsListChanged())
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


async def add_later(delay: float) -> None:
    await anyio.sleep(delay)
    register("later")
    await notify_tools_changed()


async def serve_legacy_only(low, read, write, options) -> None:
    """Serve only the 2025-11-25 handshake era, like servers built on older SDKs: a client's
    2026 probe is refused and it falls back to `initialize`."""
    from mcp.server.runner import _serve_legacy_stream

    async with low.lifespan(low) as state:
        await _serve_legacy_stream(
            low,
            read,
            write,
            lifespan_state=state,
            session_id=None,
            init_options=options,
            raise_exceptions=False,
        )


async def main() -> None:
    low = mcp._lowlevel_server  # to advertise tools.listChanged=true in the 2025 handshake
    async with anyio.create_task_group() as tg:
        if os.environ.get("DYN_ADD_AFTER"):
            tg.start_soon(add_later, float(os.environ["DYN_ADD_AFTER"]))
        options = low.create_initialization_options(NotificationOptions(tools_changed=True))
        async with stdio_server() as (read, write):
            if os.environ.get("DYN_LEGACY"):
                await serve_legacy_only(low, read, write, options)
            else:
                await low.run(read, write, options)
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
