"""What the console answers as an MCP server (SPEC 13, 19): the tools a client sees, calls
through the one call path of the console (gate, inbox, history), held with progress heartbeats
while a person decides, and `approval_prompt` for agents that delegate their own prompts.

The endpoint of a request is `""` (`/mcp`: every connected server, names `<server>__<tool>`),
a server name (`/mcp/<server>`: its own names), `v/<view>` (`/mcp/v/<view>`: the tools of
one view, named as on `/mcp`) or `_permission`; the ASGI app puts it and the caller's token
into the HTTP scope, where handlers read them back through `ctx.request`. What a client sees
is the endpoint's tools narrowed by the token's views when it is limited to views (SPEC 19):
`visible_for` is the one place that says so for lists, lookups and calls.
"""

import json
import logging
import math
from collections.abc import Callable

import anyio
import mcp_types
from django.conf import settings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import calls, db, names, toolviewstore
from ..choices import CallStatus, Mode, ServerState, Via
from ..db import cache
from ..instructions import instructions_block
from ..models import ApiToken, Server, Tool, ToolCall
from ..schemas import PromptArguments, json_schema

log = logging.getLogger("mcpcore.mcpserver")

ALL = ""
PERMISSION = "_permission"
VIEW = "v/"  # `v/<view>`: no server name holds a `/`
PERMISSION_TOOL = "approval_prompt"
# The input contract's model of the tool's arguments, less its docstring (written for us).
PERMISSION_SCHEMA = {k: v for k, v in json_schema(PromptArguments).items() if k != "description"}
SESSION_META = "io.agenvoy/session"
ENDPOINT_KEY = "agenvoy.endpoint"
TOKEN_KEY = "agenvoy.token"


def caller(ctx) -> tuple[ApiToken, str]:
    """The token and the endpoint of the HTTP request this MCP request came in."""
    scope = ctx.request.scope
    return scope[TOKEN_KEY], scope[ENDPOINT_KEY]


def local_of(ctx) -> calls.LocalSupervisor | None:
    """The supervisor of this process, as the HTTP request this MCP request came in carries it."""
    return calls.local_supervisor(ctx.request)


def is_modern(ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def text_result(text: str, is_error: bool) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def toolview_name(endpoint: str) -> str | None:
    """The view of a `v/<view>` endpoint, else None."""
    return endpoint[len(VIEW) :] if endpoint.startswith(VIEW) else None


def server_of(endpoint: str) -> str | None:
    """The server of a `/mcp/<server>` endpoint, else None."""
    return None if endpoint in (ALL, PERMISSION) or endpoint.startswith(VIEW) else endpoint


# --- what a client sees (SPEC 13.2, 19) ----------------------------------------------------------


def within(endpoint: str) -> Callable[[str], bool] | None:
    """The endpoint's own narrowing: its view's selection on `v/<view>` (nothing in it when the
    view is gone), else None."""
    view = toolview_name(endpoint)
    if view is None:
        return None
    return toolviewstore.selection_of(view) or (lambda registered: False)


def visible_for(endpoint: str, token: ApiToken | None) -> Callable[[str], bool] | None:
    """Which registered names a client of `endpoint` with `token` sees; None: every one."""
    scope, own = cache.scope(token), within(endpoint)
    if scope is None or own is None:
        return own if scope is None else scope
    return lambda registered: own(registered) and scope(registered)


def endpoint_tools(endpoint: str, token: ApiToken | None, connected_only: bool = True) -> list[Tool]:
    rows = Tool.objects.select_related("server")
    server = server_of(endpoint)
    if server is not None:
        rows = rows.filter(server__name=server)
    if connected_only:
        rows = rows.filter(server__enabled=True, server__state=ServerState.CONNECTED)
    view = toolview_name(endpoint)
    # A view's tools are read by its patterns, not picked out of every tool.
    rows = toolviewstore.prefilter(
        rows, cache.scope(token), toolviewstore.selection_of(view) if view else None
    )
    return toolviewstore.narrow(
        rows.order_by("server__name", "position", "tool_name"), visible_for(endpoint, token)
    )


def exposed(tool: Tool, endpoint: str) -> str:
    if server_of(endpoint) is not None:
        return tool.tool_name
    return names.exposed_name(tool.server.name, tool.tool_name)


def tool_entry(tool: Tool, endpoint: str) -> dict:
    entry = {
        "name": exposed(tool, endpoint),
        "description": tool.description,
        "inputSchema": tool.input_schema,
    }
    if tool.title:
        entry["title"] = tool.title
    if tool.annotations:
        entry["annotations"] = tool.annotations
    if tool.output_schema:
        entry["outputSchema"] = tool.output_schema
    return entry


def tool_list(endpoint: str, token: ApiToken | None) -> list[dict]:
    """The tools a client of `endpoint` with `token` sees (also what list_changed compares)."""
    if endpoint == PERMISSION:
        return [
            {
                "name": PERMISSION_TOOL,
                "description": "Ask a person in the Agenvoy console to approve or deny a tool call "
                "of yours; answers {behavior: allow, updatedInput} or {behavior: deny, message}.",
                "inputSchema": PERMISSION_SCHEMA,
            }
        ]
    return [tool_entry(t, endpoint) for t in endpoint_tools(endpoint, token)]


def find_tool(endpoint: str, name: str, token: ApiToken | None) -> Tool | None:
    """The registered tool behind an exposed name, among those the client sees; tools of
    servers that are down count too (a call to one gets the server's 503 message, not
    "unknown tool"). A name the client does not see is looked up no further than one it
    could see, so a hidden tool and a missing one take the same steps."""
    visible = visible_for(endpoint, token)
    rows = Tool.objects.select_related("server")
    server = server_of(endpoint)
    if server is not None:
        registered = names.registered_name(server, name)
        if not toolviewstore.holds(visible, registered):
            return None
        return rows.filter(server__name=server, tool_name=name).first()
    first, sep, tool = name.partition(names.SEP)
    if (
        sep
        and names.is_valid_server_name(first)
        and toolviewstore.holds(visible, names.registered_name(first, tool))
    ):
        hit = rows.filter(server__name=first, tool_name=tool).first()
        if hit is not None and exposed(hit, ALL) == name:
            return hit
    # A shortened name: only the shortening itself can say which tool it stands for.
    if not names.may_be_shortened(name):
        return None
    seen = endpoint_tools(endpoint, token, connected_only=False)
    return next((t for t in seen if exposed(t, ALL) == name), None)


def admits(endpoint: str | None, token: ApiToken) -> bool:
    """Whether `endpoint` is one this token may open: `/mcp/<server>` of a configured server
    (for a token limited to views, one with a tool in its views), `/mcp/v/<view>` of a view
    (of its own views, for a limited token). Anything else answers HTTP 404."""
    if endpoint is None:
        return False
    if endpoint in (ALL, PERMISSION):
        return True
    scope = cache.scope(token)
    view = toolview_name(endpoint)
    if view is not None:
        return cache.toolview(view) is not None and (scope is None or view in scope.views)
    if not cache.server_exists(endpoint):
        return False
    if scope is None:
        return True
    tools = Tool.objects.filter(server__name=endpoint).values_list("registered_name", flat=True)
    return any(scope(registered) for registered in tools)


def instructions_for(endpoint: str, token: ApiToken | None) -> str:
    """SPEC 13.1: the block of SPEC 6 for the servers the client sees; a server's own text on
    its path; on `/mcp/v/<view>` the view's description first (SPEC 19). For a token limited to
    views, and on a view's endpoint, only servers with a tool the client sees count."""
    if endpoint == PERMISSION:
        return ""
    server = server_of(endpoint)
    if server is not None:
        return Server.objects.filter(name=server).values_list("instructions", flat=True).first() or ""
    pairs = list(Server.objects.filter(enabled=True).values_list("name", "instructions"))
    visible = visible_for(endpoint, token)
    if visible is not None:
        rows = Tool.objects.filter(server__enabled=True).values_list("server__name", "registered_name")
        servers = {server for server, registered in rows if visible(registered)}
        pairs = [(n, t) for n, t in pairs if n in servers]
    block = instructions_block(pairs)
    view = cache.toolview(toolview_name(endpoint) or "") if endpoint.startswith(VIEW) else None
    description = view.description.strip() if view is not None else ""
    return "\n\n".join(part for part in (description, block) if part)


async def on_list_tools(ctx, params) -> mcp_types.ListToolsResult:
    token, endpoint = caller(ctx)
    # Typed, so each era's required fields (2026: resultType, ttlMs 0: never cached) are there.
    return mcp_types.ListToolsResult.model_validate({"tools": await db.run(tool_list, endpoint, token)})


# --- calls (SPEC 13.3) --------------------------------------------------------------------------


def session_of(ctx, token: ApiToken) -> str:
    """`mcp:<own id>` from `_meta`, else `mcp:<Mcp-Session-Id>` (2025) or `mcp:<token name>`."""
    meta = (ctx.params or {}).get("_meta")
    own = meta.get(SESSION_META) if isinstance(meta, dict) else None
    if isinstance(own, str) and own.strip():
        return f"mcp:{own.strip()}"
    sid = None if is_modern(ctx) else ctx.request.headers.get("mcp-session-id")
    return f"mcp:{sid}" if sid else f"mcp:{token.name}"


async def on_call_tool(ctx, params) -> dict:
    """The result as a plain dict: the SDK validates and shapes it for the request's era itself
    (typing it here first made it build and dump the model twice). `resultType`, which 2026
    requires and 2025 drops, is the typed model's default unless the upstream result has one."""
    return {"resultType": "complete", **await _call_tool(ctx, params)}


async def _call_tool(ctx, params) -> dict:
    token, endpoint = caller(ctx)
    if endpoint == PERMISSION:
        return await _permission_prompt(ctx, params, token)
    local = local_of(ctx)
    try:
        call = await db.write(
            _create, token, endpoint, params.name, params.arguments or {}, session_of(ctx, token), local
        )
    except calls.CallError as exc:
        if exc.status == 404:
            raise MCPError(INVALID_PARAMS, f"unknown tool: {params.name}") from None
        return text_result(exc.message, True)
    await calls.submit(call, local)
    call = await hold(ctx, call)
    return await call_result(call)


def registered_of(endpoint: str, name: str) -> str | None:
    """The registered name behind an exposed one, read off the name itself when it was not
    shortened (no query: `calls.create` looks the tool up anyway); None when it may have been."""
    if name != name.strip() or not name:
        return None
    server = server_of(endpoint)
    if server is not None:
        return names.registered_name(server, name)
    first, sep, tool = name.partition(names.SEP)
    if sep and tool and names.is_valid_server_name(first) and names.exposed_name(first, tool) == name:
        return names.registered_name(first, tool)
    return None


def _create(token, endpoint: str, name: str, arguments: dict, session_id: str, local=None) -> ToolCall:
    """The call of the tool behind the exposed name, through the gate (one database hop). The
    endpoint's view narrows it as the token's views do (`calls.create(within=...)`)."""
    own = within(endpoint)

    def create(registered: str) -> ToolCall:
        return calls.create(
            token, "", registered, arguments, session_id, Mode.CONFIRM, via=Via.MCP, local=local, within=own
        )

    registered = registered_of(endpoint, name)
    if registered is not None:
        try:
            return create(registered)
        except calls.CallError as exc:
            if exc.status != 404:
                raise
            # A shortened name looks like a plain one: only the shortening can tell.
    tool = find_tool(endpoint, name, token)
    if tool is None or tool.registered_name == registered:
        raise calls.CallError(f"unknown tool: {name}", 404)
    return create(tool.registered_name)


def _declares_output(registered: str) -> bool:
    return bool(
        Tool.objects.filter(registered_name=registered).values_list("output_schema", flat=True).first()
    )


async def call_result(call: ToolCall) -> dict:
    """The upstream result as it was when it fit under the cap; else the converted string."""
    if call.status in (CallStatus.DONE, CallStatus.ERROR) and call.native_result is not None:
        return call.native_result
    if call.status == CallStatus.DONE:
        # Cut to the cap: a tool with an outputSchema can no longer satisfy it, and clients
        # validate structured content unless the result is an error.
        return text_result(call.result, call.is_error or await db.run(_declares_output, call.tool_name))
    return text_result(call.result, True)


class Inflight:
    """Calls held for 2025 sessions, by (Mcp-Session-Id, JSON-RPC id): the ASGI app cancels
    one when the client closes the POST it came in (the SDK only acts on
    `notifications/cancelled`, and some clients just drop the connection)."""

    def __init__(self) -> None:
        self._scopes: dict[tuple[str, str], anyio.CancelScope] = {}

    @staticmethod
    def key(session_id: str, request_id) -> tuple[str, str]:
        return session_id, json.dumps(request_id)

    def add(self, key: tuple[str, str], scope: anyio.CancelScope) -> None:
        self._scopes[key] = scope

    def discard(self, key: tuple[str, str]) -> None:
        self._scopes.pop(key, None)

    def cancel(self, key: tuple[str, str]) -> None:
        scope = self._scopes.get(key)
        if scope is not None:
            scope.cancel()


INFLIGHT = Inflight()


async def hold(ctx, call: ToolCall) -> ToolCall:
    """Wait (`calls.wait`) until the call has ended, sending heartbeats while it is pending
    and passing on upstream progress while it runs, when the request asked for progress. The
    client going away (its request cancelled) cancels the call: out of the inbox at once if
    pending, cancelled upstream if running (SPEC 13.3)."""
    meta = (ctx.params or {}).get("_meta")
    wants_progress = isinstance(meta, dict) and meta.get("progressToken") is not None
    # The confirmation's own page, on the Pending page's address (SPEC 13.3, 15).
    waiting = f"waiting for approval: {settings.AGENVOY_PUBLIC_URL}/pending/{call.confirm_id}/"
    beats = 0

    async def heartbeat() -> None:
        nonlocal beats
        beats += 1
        await ctx.session.report_progress(beats, None, waiting)

    async def progress(value, total, message) -> None:
        # Progress of one request must increase: after n heartbeats the server's own
        # progress (and total) is passed on n higher; with none, exactly as it came.
        await ctx.session.report_progress(value + beats, None if total is None else total + beats, message)

    key = None
    sid = None if is_modern(ctx) else ctx.request.headers.get("mcp-session-id")
    local = local_of(ctx)
    done = False
    try:
        with anyio.CancelScope() as scope:
            if sid and ctx.request_id is not None:
                key = Inflight.key(sid, ctx.request_id)
                INFLIGHT.add(key, scope)
            call = await calls.wait(
                call,
                math.inf,
                on_progress=progress if wants_progress else None,
                on_heartbeat=heartbeat if wants_progress else None,
                local=local,
            )
            done = True
        if not done:
            log.info("call %s: the MCP client went away", call.id)
    finally:
        if key is not None:
            INFLIGHT.discard(key)
        if not done:
            with anyio.CancelScope(shield=True):
                await _abandon(call, local)
                call = await calls.get(call.id) or call
    return call


async def _abandon(call: ToolCall, local: calls.LocalSupervisor | None) -> None:
    """Nobody waits for this call any more: cancel it (SPEC 13.3)."""
    try:
        await calls.stop(call.id, local)
    except calls.CallError:
        return  # it ended meanwhile
    except Exception:
        log.exception("could not cancel abandoned call %s", call.id)


# --- approval_prompt (SPEC 13.5) ----------------------------------------------------------------


async def _permission_prompt(ctx, params, token: ApiToken) -> dict:
    if params.name != PERMISSION_TOOL:
        raise MCPError(INVALID_PARAMS, f"unknown tool: {params.name}")
    args = params.arguments or {}
    try:
        call = await db.write(
            calls.create_permission_prompt,
            token,
            args.get("tool_name"),
            args.get("input"),
            session_of(ctx, token),
            args.get("tool_use_id"),
        )
    except calls.CallError as exc:
        return text_result(exc.message, True)
    await calls.submit(call, local_of(ctx))
    # A reply ends a permission prompt at once (nothing runs): the answer is how it ended.
    call = await hold(ctx, call)
    return text_result(json.dumps(calls.permission_answer(call)), False)


# --- the handshake ------------------------------------------------------------------------------


class ConsoleMiddleware:
    """Per-endpoint instructions on `initialize` and `server/discover`; a 2025 session stays
    on the endpoint it was opened on, and is tracked for list_changed."""

    def __init__(self, changes) -> None:
        self.changes = changes

    async def __call__(self, ctx, call_next):
        if ctx.request is None or ENDPOINT_KEY not in ctx.request.scope:
            return await call_next(ctx)
        token, endpoint = caller(ctx)
        connection = getattr(ctx.session, "_connection", None)
        if ctx.method in ("initialize", "server/discover"):
            result = dict(await call_next(ctx))
            text = await db.run(instructions_for, endpoint, token)
            if text:
                result["instructions"] = text
            else:
                result.pop("instructions", None)
            if ctx.method == "initialize" and connection is not None:
                connection.state[ENDPOINT_KEY] = endpoint
                self.changes.track(connection, endpoint, token)
            return result
        if connection is not None and connection.state.get(ENDPOINT_KEY, endpoint) != endpoint:
            raise MCPError(INVALID_REQUEST, "this session was opened on another MCP endpoint")
        return await call_next(ctx)
