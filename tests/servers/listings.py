"""Test server whose prompts and resources change on demand (SPEC 20.1), for list_changed,
polling and failed-listing cases, in process (`tests/supervisor/test_listings.py` imports
`make()`) or over stdio:

    python tests/servers/listings.py          (stdio)
    LISTINGS_LEGACY=1 ...                       speaks only the 2025-11-25 protocol
    LISTINGS_NO_COMPLETIONS=1 ...               built without a completion handler (-32601)

What a test can do to a server made by `make()` (`Listings`):
- `add_prompt(name)` / `add_resource(uri)`: a new prompt or resource, announced or not;
- `announce_prompts()` / `announce_resources()`: the list_changed of that kind (2026-07-28:
  on the `subscriptions/listen` bus; 2025-11-25: on the last session);
- `failing["prompts/list"] = "why"`: that listing answers a JSON-RPC error;
- `missing.add("resources/templates/list")`: that method is not found (-32601);
- `updated(uri)`: `ResourceUpdated` for listeners subscribed to that URI.
- `set_ping_meta(meta)`: tool `ping` listed again with that `_meta` (nothing else changed).
Its tool `client_extensions` answers the client's declared extensions as JSON; its tool
`change(kind, name)` adds a prompt (`kind` "prompt") or a resource and announces it, for a
client over stdio.
"""

import json
import os

import anyio
from mcp.server.lowlevel import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import Prompt
from mcp.server.mcpserver.resources.types import TextResource
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ResourceUpdated
from mcp_types import Completion, PromptReference


class Listings:
    """One listings server and the knobs a test turns."""

    def __init__(self, completions: bool = True) -> None:
        self.bus = InMemorySubscriptionBus()
        self.failing: dict[str, str] = {}
        self.missing: set[str] = set()
        self.last_session = None
        mcp = self.mcp = MCPServer("listings", subscriptions=self.bus, log_level="WARNING")
        mcp.middleware.append(self._middleware)

        self.set_ping_meta({"ui": {"resourceUri": "ui://listings/app.html", "visibility": ["app"]}})

        @mcp.tool()
        def client_extensions(ctx: Context) -> str:
            """The extensions the client declared, as JSON."""
            caps = ctx.client_capabilities
            return json.dumps((caps.extensions if caps else None) or {}, sort_keys=True)

        @mcp.tool()
        async def change(kind: str, name: str, ctx: Context) -> str:
            """Add a prompt (kind "prompt") or a resource listings://static/<name>, and announce it."""
            self.last_session = ctx.session
            if kind == "prompt":
                self.add_prompt(name)
                await self.announce_prompts()
            else:
                self.add_resource(f"listings://static/{name}")
                await self.announce_resources()
            return f"added {kind} {name}"

        @mcp.prompt(title="Greeting", description="Greets someone.")
        def greet(name: str, mood: str = "glad") -> str:
            return f"Hello {name}, I am {mood}."

        @mcp.resource("listings://static/readme", name="readme", title="Read me", mime_type="text/plain")
        def readme() -> str:
            return "the readme"

        @mcp.resource("listings://static/logo", name="logo", mime_type="image/png")
        def logo() -> bytes:
            return b"\x89PNG\r\n\x1a\n1234"

        @mcp.resource("listings://item/{item}", name="item", description="One item.", mime_type="text/plain")
        def item(item: str) -> str:
            return f"item {item}"

        if completions:

            @mcp.completion()
            async def complete(ref, argument, context):
                if isinstance(ref, PromptReference) and argument.name == "name":
                    names = ["alice", "albert", "bob"]
                    return Completion(values=[n for n in names if n.startswith(argument.value)])
                return None

    async def _middleware(self, ctx, call_next):
        if ctx.method in self.failing:
            raise MCPError(code=-32603, message=self.failing[ctx.method])
        if ctx.method in self.missing:
            raise MCPError(code=-32601, message="Method not found")
        return await call_next(ctx)

    def set_ping_meta(self, meta: dict) -> None:
        def ping() -> str:
            """A tool, so that a failed prompt listing has tools to keep."""
            return "pong"

        if "ping" in {t.name for t in self.mcp._tool_manager.list_tools()}:
            self.mcp.remove_tool("ping")
        self.mcp.add_tool(ping, meta=meta)

    def add_prompt(self, name: str) -> None:
        def fn() -> str:
            return f"I am {name}"

        self.mcp.add_prompt(Prompt.from_function(fn, name=name, description=f"Prompt {name}."))

    def add_resource(self, uri: str, text: str = "new") -> None:
        self.mcp.add_resource(
            TextResource(uri=uri, name=uri.rsplit("/", 1)[-1], text=text, mime_type="text/plain")
        )

    async def announce_prompts(self) -> None:
        await self.bus.publish(PromptsListChanged())
        if self.last_session is not None:
            await self.last_session.send_prompt_list_changed()

    async def announce_resources(self) -> None:
        await self.bus.publish(ResourcesListChanged())
        if self.last_session is not None:
            await self.last_session.send_resource_list_changed()

    def listening(self) -> int:
        """How many `subscriptions/listen` streams are open (a 2026-07-28 client's)."""
        return len(self.bus._listeners)

    async def updated(self, uri: str) -> None:
        await self.bus.publish(ResourceUpdated(uri=uri))


def make(completions: bool = True) -> Listings:
    return Listings(completions)


async def main() -> None:
    server = make(completions=not os.environ.get("LISTINGS_NO_COMPLETIONS"))
    low = server.mcp._lowlevel_server
    # listChanged advertised in the 2025 handshake, as servers that send it do.
    options = low.create_initialization_options(
        NotificationOptions(prompts_changed=True, resources_changed=True)
    )
    async with stdio_server() as (read, write):
        if os.environ.get("LISTINGS_LEGACY"):
            # Only the 2025-11-25 handshake, as `dynamic.py` does: the client's 2026 probe is
            # refused and it falls back to `initialize`.
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
        else:
            await low.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
