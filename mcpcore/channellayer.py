"""The channel layer of the one-process layout: Channels' in-memory layer, whose sweep for
expired messages and group memberships runs at most once a second.

Channels runs that sweep on every `receive` and `group_send`, each a pass over every channel
and every group member. Each held call waits on a channel of its own and wakes at least once a
second (`calls.wait`), so 1,000 held calls made a million steps a second of it and the event
loop had no time left to answer an approval (bench/held.py). Messages expire after 60 s and
memberships after a day, so sweeping once a second changes nothing anyone can see.

Sync code (a page's view, a `/v1` view's body on a thread of `db.run_view`, a database job)
reaches the layer through `control.run_to_end`, which runs the operation on the process's loop,
where the layer's asyncio queues belong."""

import time

from channels.layers import InMemoryChannelLayer as _ChannelsInMemory


class InMemoryChannelLayer(_ChannelsInMemory):
    SWEEP_EVERY = 1.0  # seconds

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._next_sweep = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + self.SWEEP_EVERY
        super()._clean_expired()
