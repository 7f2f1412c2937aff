"""The one-process layout's channel layer (`mcpcore.channellayer`): Channels' in-memory layer
with its sweep for expired entries at most once a second (a sweep on every receive made
1,000 held calls starve the event loop)."""

import pytest
from django.conf import settings

from mcpcore.channellayer import InMemoryChannelLayer


def test_it_is_the_layer_of_the_one_process_layout():
    if settings.CHANNEL_LAYERS["default"]["BACKEND"].startswith("channels_redis"):
        pytest.skip("REDIS_URL is set: the scale-out layout's layer")
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "mcpcore.channellayer.InMemoryChannelLayer"


@pytest.mark.asyncio
async def test_it_delivers_to_a_group_and_sweeps_expired_messages_at_most_once_a_second():
    layer = InMemoryChannelLayer()
    await layer.group_add("g", "inbox")
    await layer.group_send("g", {"type": "hello"})
    assert await layer.receive("inbox") == {"type": "hello"}

    stale = InMemoryChannelLayer(expiry=-1)  # every message has expired once sent
    await stale.send("a", {"type": "old"})
    await stale.group_send("nobody", {"type": "sweep"})  # the first send sweeps
    assert "a" not in stale.channels
    await stale.send("a", {"type": "old"})
    await stale.group_send("nobody", {"type": "sweep"})  # within the same second: no sweep
    assert "a" in stale.channels
