"""The one-process layout's channel layer (`mcpcore.channellayer`): Channels' in-memory layer
with its sweep for expired entries at most once a second (a sweep on every receive made
1,000 held calls starve the event loop)."""

import asyncio
import concurrent.futures
import threading
import time

import pytest
from asgiref.sync import async_to_sync
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


@pytest.mark.asyncio
async def test_a_send_from_another_thread_wakes_the_receiver_at_once():
    """Sync code (a `/v1` view's body on a thread of `db.run_view`, a database job) sends
    through `async_to_sync`, which there runs the send on a loop of its own: the receiver on
    the process's loop gets it at once, not at that loop's next timer (issue 29.3)."""
    layer = InMemoryChannelLayer()
    layer.settle(asyncio.get_running_loop())
    channel = await layer.new_channel()
    await layer.group_add("g", channel)
    sender = threading.Thread(target=async_to_sync(layer.group_send), args=("g", {"type": "hello"}))
    started = time.monotonic()
    sender.start()
    try:
        assert await asyncio.wait_for(layer.receive(channel), 10) == {"type": "hello"}
    finally:
        await asyncio.to_thread(sender.join, 10)
    assert time.monotonic() - started < 1.0


@pytest.mark.asyncio
async def test_a_receive_from_another_thread_is_served_by_the_process_loop():
    layer = InMemoryChannelLayer()
    layer.settle(asyncio.get_running_loop())
    channel = await layer.new_channel()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = asyncio.wrap_future(pool.submit(async_to_sync(layer.receive), channel))
        await layer.send(channel, {"type": "answer"})
        assert await asyncio.wait_for(waiting, 10) == {"type": "answer"}
