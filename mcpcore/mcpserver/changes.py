"""Telling connected MCP clients that their tool, prompt or resource list changed (SPEC 13.2,
20.2), in both eras: `notifications/<kind>/list_changed` on each 2025 session's standalone
stream, and a `ToolsListChanged` (`PromptsListChanged`, `ResourcesListChanged`) event on the
audience's subscription bus for 2026-07-28 `subscriptions/listen` streams; and passing the
servers' `notifications/resources/updated` on to the clients subscribed to that URI
(`resources/subscribe` on 2025 sessions, `resourceSubscriptions` of a listen stream on
2026-07-28), after asking the server's holder to subscribe upstream (`control.subscribe`).

An audience is an endpoint (`/mcp`, `/mcp/<server>`, `/mcp/v/<view>`) as every unlimited
token sees it, or as one token limited to views sees it (SPEC 19): what its clients get
differs by token then.

What changed is learnt from the channel layer: the supervisor sends `status.changed` to the
group `control.STATUS` whenever a server is added, removed, connected, lost or re-registered,
and `toolviewstore` sends it (with `"views": true`) when a view is saved or removed, so every web
process (Redis in scale-out) hears it; and `resource.updated` to `control.RESOURCES`. An
audience is told only when the list its clients would get is really different.
"""

import asyncio
import hashlib
import json
import logging

from channels.layers import get_channel_layer
from mcp.server.connection import Connection
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError

from .. import control, db
from ..models import ApiToken
from . import catalog, reads
from .context import caller, connection_of, offer_of

log = logging.getLogger("mcpcore.mcpserver")

DEBOUNCE = 0.15
REJOIN = 600.0  # channel-layer group memberships expire (a day by default): renew them


Audience = tuple[str, int | None]  # (endpoint, the token's id when it is limited to views)

# What a list change is told as, per kind: the 2025 notification's sender, the 2026 event.
KINDS: dict[str, tuple[str, type[ToolsListChanged | PromptsListChanged | ResourcesListChanged]]] = {
    "tools": ("send_tool_list_changed", ToolsListChanged),
    "prompts": ("send_prompt_list_changed", PromptsListChanged),
    "resources": ("send_resource_list_changed", ResourcesListChanged),
}


def lists_of(made: catalog.Offer) -> dict[str, object]:
    """What each kind's list change is judged by (templates change with resources)."""
    return {"tools": made.tools, "prompts": made.prompts, "resources": [made.resources, made.templates]}


def audience(endpoint: str, token: ApiToken) -> Audience:
    return endpoint, (token.pk if token.view_limited else None)


class Changes:
    """Who listens per audience, and the loop that tells them."""

    def __init__(self) -> None:
        self._legacy: dict[Audience, dict[int, Connection]] = {}
        self._listen: dict[Audience, tuple[InMemorySubscriptionBus, ListenHandler]] = {}
        self._signatures: dict[tuple[Audience, str], str] = {}
        self._tokens: dict[Audience, ApiToken] = {}  # a token each audience's lists are made for
        # 2025 sessions' resource subscriptions: URI -> {id(connection): (connection, server)}
        self._subscribed: dict[str, dict[int, tuple[Connection, str]]] = {}

    # --- who listens ---------------------------------------------------------------------------

    def track(self, connection: Connection, endpoint: str, token: ApiToken) -> None:
        """A 2025 session opened on `endpoint`; forgotten when the session ends."""
        key = audience(endpoint, token)
        self._tokens.setdefault(key, token)
        conns = self._legacy.setdefault(key, {})
        conns[id(connection)] = connection
        connection.exit_stack.callback(conns.pop, id(connection), None)

    def _bus(self, key: Audience) -> tuple[InMemorySubscriptionBus, ListenHandler]:
        if key not in self._listen:
            bus = InMemorySubscriptionBus()
            self._listen[key] = (bus, ListenHandler(bus))
        return self._listen[key]

    async def on_listen(self, ctx, params):
        """`subscriptions/listen` (2026-07-28): one stream per call, fed by its audience's bus.
        The resources it asks to follow are subscribed upstream first (those the client may
        read; any other simply never fires)."""
        token, endpoint = caller(ctx)
        key = audience(endpoint, token)
        self._tokens.setdefault(key, token)
        made = await offer_of(ctx)
        for uri in params.notifications.resource_subscriptions or ():
            server = catalog.route(made, uri).server
            if server is not None:
                await control.subscribe(server, uri)
        return await self._bus(key)[1](ctx, params)

    async def on_subscribe(self, ctx, params) -> dict:
        """`resources/subscribe` (2025 sessions): a URI the client may read, followed upstream."""
        uri = str(params.uri)
        server = reads.routed(ctx, await offer_of(ctx), uri)
        connection = connection_of(ctx)
        if connection is None:
            raise MCPError(reads.INVALID_PARAMS, "resources/subscribe needs a session")
        await control.subscribe(server, uri)
        followers = self._subscribed.setdefault(uri, {})
        if id(connection) not in followers:
            followers[id(connection)] = (connection, server)
            connection.exit_stack.callback(followers.pop, id(connection), None)
        return {}

    async def on_unsubscribe(self, ctx, params) -> dict:
        connection = connection_of(ctx)
        self._subscribed.get(str(params.uri), {}).pop(id(connection), None)
        return {}

    def close(self) -> None:
        for _bus, handler in self._listen.values():
            handler.close()

    # --- telling them --------------------------------------------------------------------------

    async def watch(self) -> None:
        """Follow `status.changed` on the channel layer until cancelled."""
        layer = get_channel_layer()
        channel = await layer.new_channel()
        loop = asyncio.get_running_loop()
        joined_at = -REJOIN
        try:
            while True:
                if loop.time() - joined_at >= REJOIN:
                    await layer.group_add(control.STATUS, channel)
                    await layer.group_add(control.RESOURCES, channel)
                    joined_at = loop.time()
                try:
                    message = await asyncio.wait_for(layer.receive(channel), REJOIN)
                except TimeoutError:
                    continue
                if message.get("type") == "resource.updated":
                    await self._updated(message)
                    continue
                servers = {message.get("server")}
                views = bool(message.get("views"))
                # A connect sends a few in a row: gather them, then compare once.
                end = loop.time() + DEBOUNCE
                while (left := end - loop.time()) > 0:
                    try:
                        more = await asyncio.wait_for(layer.receive(channel), left)
                    except TimeoutError:
                        break
                    if more.get("type") == "resource.updated":
                        await self._updated(more)
                        continue
                    servers.add(more.get("server"))
                    views = views or bool(more.get("views"))
                try:
                    await self.notify({s for s in servers if isinstance(s, str)}, views)
                except Exception:
                    log.exception("list_changed fan-out failed")
        finally:
            await layer.group_discard(control.STATUS, channel)
            await layer.group_discard(control.RESOURCES, channel)

    def _affected(self, key: Audience, servers: set[str], views: bool) -> bool:
        """Whether a change of these servers (or of the views) may change what `key` sees:
        `/mcp` and every view or limited token's list hold any server's tools."""
        endpoint, limited = key
        if endpoint == catalog.PERMISSION:
            return False
        return views or limited is not None or catalog.server_of(endpoint) in (None, *servers)

    async def notify(self, servers: set[str], views: bool = False) -> None:
        for key in {*self._legacy, *self._listen}:
            if not self._legacy.get(key) and key not in self._listen:
                continue
            if not self._affected(key, servers, views):
                continue
            made = await db.read(catalog.offer, key[0], self._tokens.get(key))
            for kind, listing in lists_of(made).items():
                sig = hashlib.sha256(json.dumps(listing, sort_keys=True).encode()).hexdigest()
                if self._signatures.get((key, kind)) == sig:
                    continue
                self._signatures[(key, kind)] = sig
                await self._tell(key, kind)

    async def _tell(self, key: Audience, kind: str) -> None:
        sender, event = KINDS[kind]
        if key in self._listen:
            await self._listen[key][0].publish(event())
        for connection in list(self._legacy.get(key, {}).values()):
            await _send(getattr(connection, sender)())

    async def _updated(self, message: dict) -> None:
        """A server's resource changed: tell the 2025 sessions that subscribed to it, and the
        listen streams of the audiences that see its server (each stream keeps only the URIs
        it asked for)."""
        uri, server = message.get("uri"), message.get("server")
        if not isinstance(uri, str) or not isinstance(server, str):
            return
        for connection, owner in list(self._subscribed.get(uri, {}).values()):
            if owner == server:
                await _send(connection.send_resource_updated(uri))
        for key, (bus, _handler) in list(self._listen.items()):
            seen = await db.read(catalog.servers_seen, key[0], self._tokens.get(key))
            if seen(server):
                await bus.publish(ResourceUpdated(uri=uri))


async def _send(notification) -> None:
    try:
        await asyncio.wait_for(notification, 2)
    except Exception as exc:  # a session that is going away must not stop the others
        log.debug("a notification to a session failed: %s", exc)
