"""Who is told when a call changes: its waiters always, the browsers' pending lists only when
the set of pending confirmations changed (each open page re-reads them on that message)."""

import asyncio
import types

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.utils import timezone

from mcpcore import control
from mcpcore.supervisor import runner
from tests.rows import make_call


async def _messages(channel: str) -> list[dict]:
    layer = get_channel_layer()
    out = []
    while True:
        try:
            out.append(await asyncio.wait_for(layer.receive(channel), 0.2))
        except TimeoutError:
            return out


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_tells_only_the_waiters_when_a_running_call_ends():
    call = await sync_to_async(make_call)(
        "running", "t", "gone", session_id="s", arguments={}, started_at=timezone.now()
    )
    layer = get_channel_layer()
    pending_channel, call_channel = await layer.new_channel(), await layer.new_channel()
    await layer.group_add(control.PENDING, pending_channel)
    await layer.group_add(control.call_group(str(call.id)), call_channel)
    # A supervisor (a session.SessionHost) that holds no session: the call ends at once with
    # an error.
    sup = types.SimpleNamespace(session=lambda _name: None, stopping=False, name="w")
    final = await runner.run_claimed(sup, call)
    assert final.status == "error"
    assert [m["type"] for m in await _messages(call_channel)] == ["call.changed"]
    assert await _messages(pending_channel) == []


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_tells_the_pending_lists_when_a_confirmation_comes_or_goes():
    from mcpcore import calls

    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(control.PENDING, channel)
    await calls.announce("some-call")
    assert [m["type"] for m in await _messages(channel)] == ["pending.changed"]
