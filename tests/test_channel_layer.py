"""The one-process layout's channel layer (`mcpcore.channellayer`): Channels' in-memory layer
with its sweep for expired entries at most once a second (a sweep on every receive made
1,000 held calls starve the event loop)."""

import asyncio
import concurrent.futures
import threading
import time

import pytest
import pytest_asyncio
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings

from mcpcore import control
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


@pytest_asyncio.fixture
async def settled(monkeypatch):
    """`control.run_to_end` runs on the test's loop, as on serve's (`Runtime.start`)."""
    monkeypatch.setattr(control, "_loop", None)
    control.settle(asyncio.get_running_loop())


@pytest.mark.asyncio
async def test_a_send_from_another_thread_wakes_the_receiver_at_once(settled):
    """Sync code (a page's view, a `/v1` view's body on a thread of `db.run_view`, a database
    job) sends through `control.run_to_end`: the receiver on the process's loop gets it at
    once, not at that loop's next timer (issue 29.3)."""
    layer = InMemoryChannelLayer()
    channel = await layer.new_channel()
    await layer.group_add("g", channel)
    sender = threading.Thread(target=control.run_to_end, args=(layer.group_send, "g", {"type": "hello"}))
    started = time.monotonic()
    sender.start()
    try:
        assert await asyncio.wait_for(layer.receive(channel), 10) == {"type": "hello"}
    finally:
        await asyncio.to_thread(sender.join, 10)
    assert time.monotonic() - started < 1.0


@pytest.mark.asyncio
async def test_a_receive_from_another_thread_is_served_by_the_process_loop(settled):
    layer = InMemoryChannelLayer()
    channel = await layer.new_channel()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = asyncio.wrap_future(pool.submit(control.run_to_end, layer.receive, channel))
        await layer.send(channel, {"type": "answer"})
        assert await asyncio.wait_for(waiting, 10) == {"type": "answer"}


class ClientGone(Exception):
    pass


@pytest.mark.asyncio
async def test_a_page_whose_browser_went_away_still_runs_its_reply_to_the_end(settled):
    """As Django's ASGI handler serves a sync view (inside a ThreadSensitiveContext, through a
    thread-sensitive `sync_to_async`, beside a task that raises once the client disconnects),
    a browser that went away cancels the view's await. A reply the view handed to
    `control.run_to_end` still runs to its end (under `async_to_sync` it was cancelled
    halfway: a recorded approval whose call never started); the request then sends Django's
    `request_finished` through a thread-sensitive `sync_to_async`, and a task the reply
    started (the approved call's run) does the same after the view is gone: neither finds
    the view thread's executor quit (a CI run's "CurrentThreadExecutor already quit or is
    broken")."""
    reply_started, release = asyncio.Event(), asyncio.Event()
    ended: list[str] = []
    later: list[asyncio.Task] = []

    async def after_the_view() -> int:
        await release.wait()
        return await sync_to_async(threading.get_ident)()

    async def reply() -> str:
        later.append(asyncio.ensure_future(after_the_view()))
        reply_started.set()
        await release.wait()
        ended.append("whole")
        return "approved"

    def view() -> str:
        return control.run_to_end(reply)

    async def browser_goes_away() -> None:
        await reply_started.wait()
        raise ClientGone

    async def request() -> None:
        async with ThreadSensitiveContext():
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(browser_goes_away())
                    await sync_to_async(view)()
            except* ClientGone:
                release.set()
            await sync_to_async(threading.get_ident)()  # request_finished

    await asyncio.wait_for(request(), 10)
    assert ended == ["whole"]
    assert isinstance(await asyncio.wait_for(later[0], 10), int)
