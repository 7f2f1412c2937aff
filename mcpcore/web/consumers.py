"""The browser's live socket (status and pending pushes). The supervisor's own consumer is
`supervisor/consumer.py`."""

import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from .. import control
from . import live, roles, signin

log = logging.getLogger("mcpcore.live")


class LiveConsumer(AsyncWebsocketConsumer):
    """Pushes server status and pending confirmations to a signed-in browser as htmx
    out-of-band fragments (the hx-ws extension swaps them in by id). The socket's query string
    names the page it serves (see `live.render_push`).

    Only a person who may see the pages holds one (AGENVOY_REQUIRE_2FA's hold included), and it
    lives as long as its session: the socket joins its session's group, and a sign-out closes
    it there (`live.end_sockets`). A group, not a check before each push: the push path stays
    the queries it renders, and a signed-out page is closed at once, not at its next push."""

    groups = [control.STATUS, control.PENDING]

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not await _may_see_pages(user):
            await self.close()
            return
        # What its pushes offer (SPEC 23.1); a change of role closes the socket (live.end_sockets_of).
        self.scope[live.ROLE] = await database_sync_to_async(roles.role_of)(user)
        # A signed-in browser's scope always has its session (AuthMiddlewareStack).
        session = self.scope.get("session")
        if session is not None and session.session_key:
            self.session_group = live.session_group(session.session_key)
            await self.channel_layer.group_add(self.session_group, self.channel_name)
        await self.accept()

    async def disconnect(self, code) -> None:
        if getattr(self, "session_group", None):
            await self.channel_layer.group_discard(self.session_group, self.channel_name)

    async def session_ended(self, event: dict) -> None:
        await self.close()

    async def status_changed(self, event: dict) -> None:
        await self._push(event)

    async def pending_changed(self, event: dict) -> None:
        await self._push(event)

    async def _push(self, event: dict) -> None:
        try:
            html = await live.render_push(event, self.scope)
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


@database_sync_to_async
def _may_see_pages(user) -> bool:
    """What `signin.RequireSecondFactor` lets through to the pages the socket serves."""
    return not settings.AGENVOY_REQUIRE_2FA or signin.has_second_factor(user)
