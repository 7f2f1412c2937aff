"""What every MCP handler of the console reads off its request, and how it answers a refusal.

The endpoint of a request is `""` (`/mcp`: every connected server, names `<server>__<tool>`),
a server name (`/mcp/<server>`: its own names), `v/<view>` (`/mcp/v/<view>`: the tools of
one view, named as on `/mcp`) or `_permission`; the ASGI app puts it and the caller's token
into the HTTP scope, where handlers read them back through `ctx.request`. What a client sees
is `catalog`'s to say. A refusal of the call path (`calls.CallError`) becomes the MCP answer
in one place, `answers_refusals`, as `api_view` makes it `/v1`'s.
"""

import functools
from collections.abc import Awaitable, Callable
from typing import cast

from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, SERVER_INFO_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import calls, db
from ..calls import traces
from ..models import ApiToken
from . import catalog, relay

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


def connection_of(ctx) -> Connection | None:
    """The client's `Connection` (2025 sessions: its `state` and `exit_stack` outlive the
    request). The SDK hands handlers a `ServerRequestContext` whose session keeps it private:
    its public `Context.connection` is built by nothing that serves requests (no SDK issue
    filed yet; missing: `ServerRequestContext.connection`, which the SDK's own migration guide
    shows, see the review of modelcontextprotocol/python-sdk#2928)."""
    return getattr(ctx.session, "_connection", None)


def is_modern(ctx) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def text_result(text: str, is_error: bool) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


async def offer_of(ctx) -> catalog.Offer:
    token, endpoint = caller(ctx)
    return await db.read(catalog.offer, endpoint, token)


async def on_list(ctx, params) -> dict:
    """`tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`, from memory
    (`catalog.offer`). Registered so the SDK declares each capability; on the endpoints
    `ConsoleMiddleware` answers them first with the result already shaped for the era."""
    return (await offer_of(ctx)).result(ctx.method)


def session_of(ctx, token: ApiToken) -> str:
    """`mcp:<own id>` from `_meta`, else `mcp:<Mcp-Session-Id>` (2025) or `mcp:<token name>`."""
    meta = (ctx.params or {}).get("_meta")
    own = meta.get(SESSION_META) if isinstance(meta, dict) else None
    if isinstance(own, str) and own.strip():
        return f"mcp:{own.strip()}"
    sid = None if is_modern(ctx) else ctx.request.headers.get("mcp-session-id")
    return f"mcp:{sid}" if sid else f"mcp:{token.name}"


def client_asks(ctx) -> str:
    """The elicitation modes this request's client can answer (`relay.asks_of`); none when a
    2025 request has no stream for the console's own requests."""
    if not is_modern(ctx) and not ctx.session.can_send_request:
        return ""
    return relay.asks_of(ctx.session.client_capabilities)


AMBIGUOUS = 409  # the CallError status of a bare name two servers' tools share (SPEC 20.5)


def answers_refusals[H: Callable[..., Awaitable[dict]]](handler: H) -> H:
    """A handler whose refusals by the call path (`calls.CallError`) become the MCP answer: on
    `tools/call`, a name the client cannot call (404 unknown; 409 an ambiguous own name, SPEC
    20.5) is the request's error (-32602), any other refusal the call's result, `isError`
    (SPEC 13.3); on a prompt get or a resource read, the request's error (-32603)."""

    @functools.wraps(handler)
    async def answering(ctx, params) -> dict:
        try:
            return await handler(ctx, params)
        except calls.CallError as exc:
            if ctx.method != "tools/call":
                raise MCPError(INTERNAL_ERROR, exc.message) from None
            if exc.status == 404:
                raise MCPError(INVALID_PARAMS, f"unknown tool: {params.name}") from None
            if exc.status == AMBIGUOUS:
                raise MCPError(INVALID_PARAMS, exc.message) from None
            return {"resultType": "complete", **text_result(exc.message, True)}

    return cast(H, answering)


# The requests that are calls (SPEC 27): each is a server span of its own.
TRACED = frozenset({"tools/call", "prompts/get", "resources/read"})


class TraceMiddleware:
    """A call's server span (SPEC 27), named after its method, continuing the client's trace
    from `_meta.traceparent` or else the HTTP request's `traceparent` header. It stands in for
    the SDK's own `OpenTelemetryMiddleware`, which would add a second server span per request
    and reads `_meta` alone."""

    async def __call__(self, ctx, call_next):
        if not traces.ON or ctx.method not in TRACED:
            return await call_next(ctx)
        meta = (ctx.params or {}).get("_meta")
        headers = ctx.request.headers if ctx.request is not None else None
        with traces.server_span(ctx.method, ctx.method, meta if isinstance(meta, dict) else None, headers):
            return await call_next(ctx)


class ConsoleMiddleware:
    """Per-endpoint instructions on `initialize` and `server/discover`; a 2025 session stays
    on the endpoint it was opened on, and is tracked for list_changed."""

    def __init__(self, changes, server) -> None:
        self.changes = changes
        self.server = server

    async def __call__(self, ctx, call_next):
        if ctx.request is None or ENDPOINT_KEY not in ctx.request.scope:
            return await call_next(ctx)
        token, endpoint = caller(ctx)
        connection = connection_of(ctx)
        if ctx.method in ("initialize", "server/discover"):
            result = dict(await call_next(ctx))
            text = await db.run(catalog.instructions_for, endpoint, token)
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
        if ctx.method in catalog.LISTS:
            return self._listed(await offer_of(ctx), ctx.method, ctx.protocol_version)
        return await call_next(ctx)

    def _listed(self, made: catalog.Offer, method: str, version: str) -> dict:
        """A list answered without `call_next`, which the SDK trusts as its wire result: shaped
        once per list and era (`Offer.wire`) instead of checked again on every request, with
        the `serverInfo` stamp the SDK puts on every 2026-07-28 result."""
        wire = made.wire(method, version)
        if version not in MODERN_PROTOCOL_VERSIONS:
            return wire
        return {**wire, "_meta": {SERVER_INFO_META_KEY: self.server.server_info_stamp}}
