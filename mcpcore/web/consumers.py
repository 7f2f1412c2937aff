"""The browser's live socket (status and pending pushes). The supervisor's own consumer is
`supervisor/consumer.py`."""

import logging

from channels.generic.websocket import AsyncWebsocketConsumer

from .. import control

log = logging.getLogger("mcpcore.live")


class LiveConsumer(AsyncWebsocketConsumer):
    """Pushes server status and pending confirmations to a signed-in browser as htmx
    out-of-band fragments (the hx-ws extension swaps them in by id). The socket's query string
    names the page it serves (see `live.render_push`)."""

    groups = [control.STATUS, control.PENDING]

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        await self.accept()

    async def status_changed(self, event: dict) -> None:
        await self._push(event)

    async def pending_changed(self, event: dict) -> None:
        await self._push(event)

    async def _push(self, event: dict) -> None:
        from .live import render_push

        try:
            html = await render_push(event, self.scope)
        except Exception:
            # A push that can't be rendered must not close the socket: the page's next
            # resync (or its polling fallback) catches up.
            log.exception("live push failed for %s", event.get("type"))
            return
        if not html:
            return
        try:
            await self.send(text_data=html)
        except Exception as exc:
            # The page went away while its push was rendered: its disconnect, on its way,
            # ends this consumer. (Daphne raises autobahn's Disconnected; ASGI leaves the
            # exception to the server.)
            log.debug("live push to a closed socket dropped: %s", exc)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        """The browser only listens; anything it sends is ignored."""
