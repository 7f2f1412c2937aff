"""The subscriptions part of a server's session (SPEC 20.2): the server's `ResourceSubscription`
rows followed upstream (2025: `resources/subscribe` and `resources/unsubscribe`; 2026-07-28:
the `listen()` stream, which also carries list changes), and each resource update told to every
web process. The session owns one (`ServerSession.subscriptions`) and runs its loops while a
session is up."""

import asyncio
import logging
from typing import Protocol

import anyio
import mcp_types as types
from channels.layers import get_channel_layer
from django.conf import settings
from mcp import Client
from mcp.shared.subscriptions import ResourceUpdated

from .. import control, db
from ..models import ResourceSubscription
from .errors import is_session_lost, not_supported

log = logging.getLogger("mcpcore.supervisor")


class Owner(Protocol):
    """What this part needs of the session that owns it (`session.ServerSession`)."""

    name: str
    protocol: str

    def describe(self, exc: BaseException) -> str: ...

    def session_lost(self) -> None: ...

    def list_changed(self) -> None: ...

    async def unanswered(self, client: Client, timeout: float) -> str: ...


class Subscriptions:
    """The URIs subscribed on the current session, a wake-up to re-read `ResourceSubscription`
    rows, and one to open the 2026-07-28 stream again with the new set."""

    def __init__(self, session: Owner) -> None:
        self.session = session
        self.subscribed: set[str] = set()
        self._changed = asyncio.Event()
        self._listen_again = asyncio.Event()
        # Reply channels of `resource.subscribe` requests, told once the set is followed
        # upstream (an update published before that would be lost: listen has no replay).
        self._replies: list[str] = []

    def resubscribe(self, reply: str | None = None) -> None:
        """Re-read the server's `ResourceSubscription` rows and follow them upstream; `reply`
        (a channel) is told `subscribe.done` once they are followed."""
        if reply:
            self._replies.append(reply)
        self._changed.set()

    def connected(self) -> None:
        """A new session has nothing subscribed: every (re)connect subscribes to all rows."""
        self.subscribed = set()
        self._changed.set()

    async def _subscribed_now(self) -> None:
        """Tell whoever asked that the subscriptions they wrote are followed upstream."""
        replies, self._replies = self._replies, []
        if replies:
            layer = get_channel_layer()
            for reply in replies:
                await layer.send(reply, {"type": "subscribe.done"})

    async def listen(self, client: Client) -> None:
        """2026-07-28 sessions deliver list changes and resource updates only inside
        `listen()`; the stream is opened again with the new set when the subscriptions change."""
        session = self.session
        while True:
            self._listen_again.clear()
            try:
                await self._listen_once(client)
            except Exception as exc:
                if is_session_lost(exc):
                    session.session_lost()
                    return
                if not_supported(exc):
                    # Servers without subscriptions are covered by the poll alone.
                    log.info(
                        "server %s: no listen support (%s); polling only", session.name, session.describe(exc)
                    )
                    return
                log.info("server %s: listen ended: %s", session.name, session.describe(exc))
            if self._listen_again.is_set():
                continue
            await anyio.sleep(1)
            # The stream can end when the server dies: a ping tells loss from a quiet close.
            if await session.unanswered(client, settings.AGENVOY_LIST_TIMEOUT):
                session.session_lost()
                return

    async def _listen_once(self, client: Client) -> None:
        uris = sorted(self.subscribed)
        async with anyio.create_task_group() as tg:

            async def reopen() -> None:
                await self._listen_again.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(reopen)
            async with client.listen(
                tools_list_changed=True,
                prompts_list_changed=True,
                resources_list_changed=True,
                resource_subscriptions=uris,
            ) as sub:
                if not self._changed.is_set():
                    await self._subscribed_now()  # the stream is acknowledged with every URI
                async for event in sub:
                    if isinstance(event, ResourceUpdated):
                        await self.updated(event.uri)
                    else:
                        self.session.list_changed()
            tg.cancel_scope.cancel()

    async def follow(self, client: Client) -> None:
        """Follow the server's `ResourceSubscription` rows upstream: at connect, and whenever
        told (`resubscribe`). 2025-era servers get `resources/subscribe` and
        `resources/unsubscribe`; 2026-07-28 servers get the listen stream opened again."""
        name = self.session.name
        while True:
            await self._changed.wait()
            self._changed.clear()
            wanted = set(
                await db.run(
                    lambda: list(
                        ResourceSubscription.objects.filter(server_name=name).values_list("uri", flat=True)
                    )
                )
            )
            if wanted == self.subscribed:
                await self._subscribed_now()
                continue
            if self.session.protocol >= "2026":
                self.subscribed = wanted
                self._listen_again.set()  # `_listen_once` tells the askers once it is back
                continue
            capability = client.server_capabilities.resources
            if capability is not None and capability.subscribe:
                await self._follow_2025(client, wanted)
            await self._subscribed_now()

    async def _follow_2025(self, client: Client, wanted: set[str]) -> None:
        """Subscribe to the new URIs and unsubscribe from the dropped ones (2025 era)."""
        session = self.session
        for uri in sorted(wanted ^ self.subscribed):
            adding = uri in wanted
            request = (
                types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
                if adding
                else types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))
            )
            try:
                with anyio.fail_after(settings.AGENVOY_LIST_TIMEOUT):
                    # The session's own request: its `subscribe_resource` wrapper warns that the
                    # method is gone in 2026-07-28, which this branch has ruled out.
                    await client.session.send_request(request, types.EmptyResult)
            except Exception as exc:
                if is_session_lost(exc):
                    session.session_lost()
                    return
                log.warning(
                    "server %s: subscription to %s failed: %s", session.name, uri, session.describe(exc)
                )
                continue
            if adding:
                self.subscribed.add(uri)
            else:
                self.subscribed.discard(uri)

    async def updated(self, uri: str) -> None:
        """An upstream resource changed: every web process tells its subscribed clients."""
        await control.asend_group(
            control.RESOURCES, {"type": "resource.updated", "server": self.session.name, "uri": uri}
        )
