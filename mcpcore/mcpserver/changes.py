"""Telling connected MCP clients that their tool list changed (SPEC 13.2), in both eras:
`notifications/tools/list_changed` on each 2025 session's standalone stream, and a
`ToolsListChanged` event on the audience's subscription bus for 2026-07-28
`subscriptions/listen` streams.

An audience is an endpoint (`/mcp`, `/mcp/<server>`, `/mcp/v/<view>`) as every unlimited
token sees it, or as one token limited to views sees it (SPEC 19): what its clients get
differs by token then.

What changed is learnt from the channel layer: the supervisor sends `status.changed` to the
group `control.STATUS` whenever a server is added, removed, connected, lost or re-registered,
and `toolviewstore` sends it (with `"views": true`) when a view is saved or removed, so every web
process (Redis in scale-out) hears it. An audience is told only when the list its clients
would get is really different.
"""

import asyncio
import hashlib
import json
import logging

from channels.layers import get_channel_layer
from mcp.server.connection import Connection
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from .. import control, db
from ..models import ApiToken
from . import handlers

log = logging.getLogger("mcpcore.mcpserver")

DEBOUNCE = 0.15
REJOIN = 600.0  # channel-layer group memberships expire (a day by default): renew them


Audience = tuple[str, int | None]  # (endpoint, the token's id when it is limited to views)


def audience(endpoint: str, token: ApiToken) -> Audience:
    return endpoint, (token.pk if token.view_limited else None)


class Changes:
    """Who listens per audience, and the loop that tells them."""

    def __init__(self) -> None:
        self._legacy: dict[Audience, dict[int, Connection]] = {}
        self._listen: dict[Audience, tuple[InMemorySubscriptionBus, ListenHandler]] = {}
        self._signatures: dict[Audience, str] = {}
        self._tokens: dict[Audience, ApiToken] = {}  # a token each audience's lists are made for

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
        """`subscriptions/listen` (2026-07-28): one stream per call, fed by its audience's bus."""
        token, endpoint = handlers.caller(ctx)
        key = audience(endpoint, token)
        self._tokens.setdefault(key, token)
        return await self._bus(key)[1](ctx, params)

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
                    joined_at = loop.time()
                try:
                    message = await asyncio.wait_for(layer.receive(channel), REJOIN)
                except TimeoutError:
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
                    servers.add(more.get("server"))
                    views = views or bool(more.get("views"))
                try:
                    await self.notify({s for s in servers if isinstance(s, str)}, views)
                except Exception:
                    log.exception("list_changed fan-out failed")
        finally:
            await layer.group_discard(control.STATUS, channel)

    def _affected(self, key: Audience, servers: set[str], views: bool) -> bool:
        """Whether a change of these servers (or of the views) may change what `key` sees:
        `/mcp` and every view or limited token's list hold any server's tools."""
        endpoint, limited = key
        if endpoint == handlers.PERMISSION:
            return False
        return views or limited is not None or handlers.server_of(endpoint) in (None, *servers)

    async def notify(self, servers: set[str], views: bool = False) -> None:
        for key in {*self._legacy, *self._listen}:
            if not self._legacy.get(key) and key not in self._listen:
                continue
            if not self._affected(key, servers, views):
                continue
            listing = await db.run(handlers.tool_list, key[0], self._tokens.get(key))
            sig = hashlib.sha256(json.dumps(listing, sort_keys=True).encode()).hexdigest()
            if self._signatures.get(key) == sig:
                continue
            self._signatures[key] = sig
            await self._tell(key)

    async def _tell(self, key: Audience) -> None:
        if key in self._listen:
            await self._listen[key][0].publish(ToolsListChanged())
        for connection in list(self._legacy.get(key, {}).values()):
            try:
                with_timeout = asyncio.wait_for(connection.send_tool_list_changed(), 2)
                await with_timeout
            except Exception as exc:  # a session that is going away must not stop the others
                log.debug("list_changed to a session failed: %s", exc)
