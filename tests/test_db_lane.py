"""Group commit on the database thread (`mcpcore.db`): writes queued together share one
transaction and are answered after its commit; a database error in one of them costs the others
nothing (the batch runs again, each write alone); plain jobs stay out of the transaction."""

import asyncio
import threading

import pytest
from django.db import IntegrityError, connection

from mcpcore import db, store
from mcpcore.models import ToolCall


def _new_call(text: str) -> ToolCall:
    return ToolCall(session_id="s", tool_name="mcp__x__t", server_name="x", tool="t", arguments={"t": text})


def _insert(call: ToolCall) -> int:
    """Insert, and say which transaction it ran in (the outer atomic block's identity)."""
    store.insert(call)
    assert connection.in_atomic_block
    return id(connection.atomic_blocks[0])


async def _with_lane_held(lane, jobs):
    """Queue `jobs` (fn, grouped) while the lane is busy with a plain job, then let it go: they
    are all in the lane's next batch."""
    busy, release = threading.Event(), threading.Event()

    def hold():
        busy.set()
        release.wait(10)

    first = lane.submit(hold, grouped=False)
    await asyncio.to_thread(busy.wait, 10)
    futures = [lane.submit(fn, grouped) for fn, grouped in jobs]
    release.set()
    await first
    return await asyncio.gather(*futures, return_exceptions=True)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_commits_queued_writes_in_one_transaction_and_answers_after_the_commit():
    lane = db._Lane("test-db")
    made = [_new_call(f"n{i}") for i in range(20)]
    outcomes = await _with_lane_held(lane, [(lambda c=c: _insert(c), True) for c in made])
    assert len(set(outcomes)) == 1  # one transaction for the twenty
    stored = await ToolCall.objects.filter(id__in=[c.id for c in made]).acount()
    assert stored == 20  # committed by the time each was answered


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_runs_each_write_alone_when_one_of_a_batch_fails_with_a_database_error():
    lane = db._Lane("test-db")
    first, second = _new_call("a"), _new_call("b")
    twin = _new_call("twin")
    twin.id = first.id  # the same primary key: the INSERT fails
    plain = []
    outcomes = await _with_lane_held(
        lane,
        [
            (lambda: _insert(first), True),
            (lambda: _insert(twin), True),
            (lambda: plain.append(connection.in_atomic_block), False),
            (lambda: _insert(second), True),
        ],
    )
    assert isinstance(outcomes[1], IntegrityError)
    assert not isinstance(outcomes[0], Exception) and not isinstance(outcomes[3], Exception)
    assert plain == [False]  # a plain job never runs inside the shared transaction
    ids = {c.id async for c in ToolCall.objects.all()}
    assert ids == {first.id, second.id}
    assert (await ToolCall.objects.aget(id=first.id)).arguments == {"t": "a"}
