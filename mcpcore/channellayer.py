"""The channel layer of the one-process layout: Channels' in-memory layer, whose sweep for
expired messages and group memberships runs at most once a second.

Channels runs that sweep on every `receive` and `group_send`, each a pass over every channel
and every group member. Each held call waits on a channel of its own and wakes at least once a
second (`calls.wait`), so 1,000 held calls made a million steps a second of it and the event
loop had no time left to answer an approval (bench/held.py). Messages expire after 60 s and
memberships after a day, so sweeping once a second changes nothing anyone can see.

The layer is also safe from other threads. Its queues are asyncio's, which belong to one event
loop, but sync code reaches the layer through `async_to_sync`: a `/v1` view's body on a thread of
`db.run_view`, a database job, a management command. Outside Django's own request threads,
`async_to_sync` runs the coroutine on a new loop in a new thread, and a message put from there
woke its receiver only at the receiving loop's next timer, or never. So once `settle(loop)` has
named the process's loop (`Runtime.start`), every operation from another loop is handed over to
it."""

import asyncio
import time

from channels.layers import InMemoryChannelLayer as _ChannelsInMemory


class InMemoryChannelLayer(_ChannelsInMemory):
    SWEEP_EVERY = 1.0  # seconds

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._next_sweep = 0.0
        self._home: asyncio.AbstractEventLoop | None = None

    def settle(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop this process's consumers, supervisor and MCP sessions run on."""
        self._home = loop

    async def _at_home(self, operation, *args):
        home = self._home
        if home is None or home is asyncio.get_running_loop() or not home.is_running():
            return await operation(*args)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(operation(*args), home))

    async def send(self, channel, message):
        return await self._at_home(super().send, channel, message)

    async def receive(self, channel):
        return await self._at_home(super().receive, channel)

    async def group_add(self, group, channel):
        return await self._at_home(super().group_add, group, channel)

    async def group_discard(self, group, channel):
        return await self._at_home(super().group_discard, group, channel)

    async def group_send(self, group, message):
        return await self._at_home(super().group_send, group, message)

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + self.SWEEP_EVERY
        super()._clean_expired()
