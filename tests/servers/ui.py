"""Test server with the rest of MCP (SPEC 20): prompts, resources, templates, completions,
subscriptions and an MCP App, in both protocol eras, over stdio or streamable HTTP.

    python tests/servers/ui.py [--name NAME] [--shared URI]
stdio by default. MCP_UI_PORT=N: streamable HTTP on http://127.0.0.1:N/mcp instead.

What it offers (URIs carry NAME so that two instances collide only on purpose):
- tools: `bump` (adds 1 to the counter resource and tells its subscribers), `add_prompt(name)`
  and `add_resource(name)` (grow the lists and announce the change), `whoami` (answers NAME: two
  instances share this own name), `show_app` (`_meta.ui.resourceUri` = ui://NAME/app.html),
  `app_refresh` (the same app, `_meta.ui.visibility` = ["app"]: app-only), `legacy_app` (the
  legacy flat `_meta` key `ui/resourceUri`);
- prompts: `greet` (required argument `who`, completed from a fixed list; optional `style`) and
  `hello` (no argument);
- resources: `test://NAME/counter` (changes on `bump`), `test://NAME/kib` (1 KiB of text),
  URI `--shared` (default `test://shared`: a second instance lists it too), and `ui://NAME/app.html`
  (`text/html;profile=mcp-app`), readable but NOT listed: only the tools' `_meta` name it;
- template `test://NAME/items/{item}`, its `item` completed from a fixed list.

2025-11-25 sessions get `notifications/resources/updated` for URIs they subscribed to with
`resources/subscribe`, and list changes on their own stream; 2026-07-28 sessions get both only
on `subscriptions/listen` streams, fed by the subscription bus. We do both every time.
"""

import argparse
import os
from typing import Any

from mcp import MCPError
from mcp.server.apps import Apps
from mcp.server.lowlevel import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import Prompt
from mcp.server.mcpserver.resources import TextResource
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ResourceUpdated
from mcp_types import (
    INVALID_PARAMS,
    Completion,
    EmptyResult,
    PromptReference,
    ResourceTemplateReference,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

parser = argparse.ArgumentParser()
parser.add_argument("--name", default="apps")
parser.add_argument("--shared", default="test://shared", help="the URI another instance may list too")
args = parser.parse_args()
NAME: str = args.name

APP_URI = f"ui://{NAME}/app.html"
COUNTER_URI = f"test://{NAME}/counter"
KIB_URI = f"test://{NAME}/kib"
TEMPLATE = f"test://{NAME}/items/{{item}}"
HIDDEN = {APP_URI}  # readable, never listed: routed by the tools' _meta.ui.resourceUri only
WHO = ["Ada", "Alan", "Grace", "Guido"]
ITEMS = ["apple", "apricot", "banana", "cherry"]
APP_HTML = f"<!doctype html><html><body><h1>{NAME} app</h1></body></html>"


class AppsServer(MCPServer):
    """MCPServer whose `resources/list` leaves out the app's `ui://` page."""

    async def list_resources(self):  # type: ignore[override]
        return [r for r in await super().list_resources() if str(r.uri) not in HIDDEN]

    async def get_prompt(self, name, arguments=None, context=None):  # type: ignore[override]
        # The server's own, recognisable error for a missing argument (the SDK's own is an
        # anonymous -32603), so a test can see it passed on unchanged.
        if name == "greet" and "who" not in (arguments or {}):
            raise MCPError(code=INVALID_PARAMS, message=f"{NAME}: greet needs the argument who")
        return await super().get_prompt(name, arguments, context)


apps = Apps()
apps.add_html_resource(APP_URI, APP_HTML, name="app", title=f"{NAME} app")
bus = InMemorySubscriptionBus()
counter = 0
sessions: dict[int, Any] = {}  # every 2025-era session seen, for its list_changed notifications
subscribed: dict[int, tuple[Any, set[str]]] = {}  # id(session) -> (session, URIs it subscribed to)


@apps.tool(resource_uri=APP_URI, description="Show the app.")
def show_app() -> str:
    return f"{NAME} app shown"


@apps.tool(resource_uri=APP_URI, visibility=["app"], description="Refresh the app (called by the app only).")
def app_refresh() -> str:
    return f"{NAME} app refreshed"


mcp = AppsServer(
    NAME, instructions="Apps test server.", extensions=[apps], subscriptions=bus, log_level="WARNING"
)


async def remember_session(ctx, call_next):
    # Only 2025-era sessions: a 2026-07-28 request's session ends with the request (that era's
    # changes go out on the subscription bus), and a bench's thousands of them are not kept.
    if getattr(ctx, "protocol_version", None) not in MODERN_PROTOCOL_VERSIONS:
        sessions[id(ctx.session)] = ctx.session
    return await call_next(ctx)


mcp.middleware.append(remember_session)


async def to_sessions(method: str, *a: Any) -> None:
    """Send a 2025-era notification to every session seen; a closed one is forgotten."""
    for key, session in list(sessions.items()):
        try:
            await getattr(session, method)(*a)
        except Exception:  # the session went away
            sessions.pop(key, None)
            subscribed.pop(key, None)


async def subscribe(ctx, params: SubscribeRequestParams) -> EmptyResult:
    subscribed.setdefault(id(ctx.session), (ctx.session, set()))[1].add(str(params.uri))
    return EmptyResult()


async def unsubscribe(ctx, params: UnsubscribeRequestParams) -> EmptyResult:
    if id(ctx.session) in subscribed:
        subscribed[id(ctx.session)][1].discard(str(params.uri))
    return EmptyResult()


low = mcp._lowlevel_server
low.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)
_options = low.create_initialization_options
# The 2025 handshake's listChanged flags come only from NotificationOptions (2026 derives them
# from subscriptions/listen being served): every transport asks this method for them.
low.create_initialization_options = lambda *a, **k: _options(  # type: ignore[method-assign]
    NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True)
)


@mcp.tool(meta={"ui/resourceUri": APP_URI}, description="The app, named by the legacy flat _meta key.")
def legacy_app() -> str:
    return f"{NAME} legacy app"


@mcp.tool()
def whoami() -> str:
    """Answer this server's name (every instance has this tool)."""
    return NAME


@mcp.tool()
async def bump() -> int:
    """Add 1 to the counter resource and tell its subscribers it changed."""
    global counter
    counter += 1
    await bus.publish(ResourceUpdated(uri=COUNTER_URI))  # 2026-07-28 listen streams
    for key, (session, uris) in list(subscribed.items()):  # 2025-11-25 resources/subscribe
        if COUNTER_URI in uris:
            try:
                await session.send_resource_updated(COUNTER_URI)
            except Exception:
                subscribed.pop(key, None)
    return counter


@mcp.tool()
async def add_prompt(name: str, ctx: Context) -> str:
    """Register a prompt `name` (no arguments) and announce the change."""

    def fn() -> str:
        return f"prompt {name} of {NAME}"

    mcp.add_prompt(Prompt.from_function(fn, name=name, description=f"Prompt {name}, added at runtime."))
    await bus.publish(PromptsListChanged())
    await to_sessions("send_prompt_list_changed")
    return f"added prompt {name}"


@mcp.tool()
async def add_resource(name: str, ctx: Context) -> str:
    """Register a text resource test://NAME/extra/<name> and announce the change."""
    uri = f"test://{NAME}/extra/{name}"
    mcp.add_resource(TextResource(uri=uri, name=name, text=f"extra {name} of {NAME}"))
    await bus.publish(ResourcesListChanged())
    await to_sessions("send_resource_list_changed")
    return uri


@mcp.prompt(title="Greeting", description="Greet someone.")
def greet(who: str, style: str = "plain") -> str:
    return f"Hello {who}, from {NAME} ({style})."


@mcp.prompt(description="Say hello.")
def hello() -> str:
    return f"Hello from {NAME}."


@mcp.resource(COUNTER_URI, name="counter", description="Changes on each bump.", mime_type="text/plain")
def read_counter() -> str:
    return f"count={counter}"


@mcp.resource(KIB_URI, name="kib", description="1 KiB of text.", mime_type="text/plain")
def read_kib() -> str:
    return "k" * 1024


@mcp.resource(
    args.shared, name="shared", description="A URI another server may serve too.", mime_type="text/plain"
)
def read_shared() -> str:
    return f"shared from {NAME}"


@mcp.resource(TEMPLATE, name="item", description="One item.", mime_type="text/plain")
def read_item(item: str) -> str:
    return f"item {item} of {NAME}"


@mcp.completion()
async def complete(ref, argument, context):
    if isinstance(ref, PromptReference) and ref.name == "greet" and argument.name == "who":
        pool = WHO
    elif isinstance(ref, ResourceTemplateReference) and ref.uri == TEMPLATE and argument.name == "item":
        pool = ITEMS
    else:
        return None
    return Completion(values=[v for v in pool if v.lower().startswith(argument.value.lower())])


if __name__ == "__main__":
    port = os.environ.get("MCP_UI_PORT")
    if port:
        mcp.run("streamable-http", host="127.0.0.1", port=int(port))
    else:
        mcp.run()
