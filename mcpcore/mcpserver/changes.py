"""Telling connected MCP clients that their tool list changed (SPEC 13.2), in both eras:
`notifications/tools/list_changed` on each 2025 session's standalone stream, and a
`ToolsListChanged` event on the view's subscription bus for 2026-07-28 `subscriptions/listen`
streams.

What changed is learnt from the channel layer: the supervisor sends `status.changed` to the
group `control.STATUS` whenever a server is added, removed, connected, lost or re-registered,
so every web process (Redis in scale-out) hears it. A view is told only when the list its
clients would get is really different.
"""

import asyncio
import hashlib
import json
import logging

from channels.layers import get_channel_layer
from mcp.server.connection import Connection
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from .. import control, db
from . import handlers

log = logging.getLogger("mcpcore.mcpserver")

DEBOUNCE = 0.15
REJOIN = 600.0  # channel-layer group memberships expire (a day by default): renew them


class Changes:
    """Who listens per view, and the loop that tells them."""

    def __init__(self) -> None:
        self._legacy: dict[str, dict[int, Connection]] = {}
        self._listen: dict[str, tuple[InMemorySubscriptionBus, ListenHandler]] = {}
        self._signatures: dict[str, str] = {}

    # --- who listens ---------------------------------------------------------------------------

    def track(self, connection: Connection, view: str) -> None:
        """A 2025 session opened on `view`; forgotten when the session ends."""
        conns = self._legacy.setdefault(view, {})
        conns[id(connection)] = connection
        connection.exit_stack.callback(conns.pop, id(connection), None)

    def _bus(self, view: str) -> tuple[InMemorySubscriptionBus, ListenHandler]:
        if view not in self._listen:
            bus = InMemorySubscriptionBus()
            self._listen[view] = (bus, ListenHandler(bus))
        return self._listen[view]

    async def on_listen(self, ctx, params):
        """`subscriptions/listen` (2026-07-28): one stream per call, fed by the view's bus."""
        _token, view = handlers.caller(ctx)
        return await self._bus(view)[1](ctx, params)

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
                # A connect sends a few in a row: gather them, then compare once.
                end = loop.time() + DEBOUNCE
                while (left := end - loop.time()) > 0:
                    try:
                        more = await asyncio.wait_for(layer.receive(channel), left)
                    except TimeoutError:
                        break
                    servers.add(more.get("server"))
                try:
                    await self.notify({s for s in servers if isinstance(s, str)})
                except Exception:
                    log.exception("list_changed fan-out failed")
        finally:
            await layer.group_discard(control.STATUS, channel)

    async def notify(self, servers: set[str]) -> None:
        for view in {handlers.ALL, *servers}:
            if not self._legacy.get(view) and view not in self._listen:
                continue
            listing = await db.run(handlers.tool_list, view)
            sig = hashlib.sha256(json.dumps(listing, sort_keys=True).encode()).hexdigest()
            if self._signatures.get(view) == sig:
                continue
            self._signatures[view] = sig
            await self._tell(view)

    async def _tell(self, view: str) -> None:
        if view in self._listen:
            await self._listen[view][0].publish(ToolsListChanged())
        for connection in list(self._legacy.get(view, {}).values()):
            try:
                with_timeout = asyncio.wait_for(connection.send_tool_list_changed(), 2)
                await with_timeout
            except Exception as exc:  # a session that is going away must not stop the others
                log.debug("list_changed to a session failed: %s", exc)
