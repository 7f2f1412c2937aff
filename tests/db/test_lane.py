"""Group commit (`mcpcore.db`): writes queued together share one transaction and are answered
after its commit; a database error in one of them costs the others nothing (the batch runs
again, each write alone); plain jobs stay out of the transaction. With SQLite the writes of one
turn of the event loop run on the loop's own connection, and what can't (the ORM, another
writer holding the lock) runs on the database thread instead."""

import asyncio
import contextlib
import os
import sqlite3
import threading

import pytest
from django.db import IntegrityError, connection

from mcpcore import db
from mcpcore.db import callsql
from mcpcore.models import ToolCall


def _new_call(text: str) -> ToolCall:
    return ToolCall(session_id="s", tool_name="mcp__x__t", server_name="x", tool="t", arguments={"t": text})


def _insert(call: ToolCall) -> int:
    """Insert, and say which transaction it ran in (the outer atomic block's identity)."""
    callsql.insert(call)
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
    lane = db._lane.Lane("test-db")
    made = [_new_call(f"n{i}") for i in range(20)]
    outcomes = await _with_lane_held(lane, [(lambda c=c: _insert(c), True) for c in made])
    assert len(set(outcomes)) == 1  # one transaction for the twenty
    stored = await ToolCall.objects.filter(id__in=[c.id for c in made]).acount()
    assert stored == 20  # committed by the time each was answered


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_runs_each_write_alone_when_one_of_a_batch_fails_with_a_database_error():
    lane = db._lane.Lane("test-db")
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


# --- writes on the event loop's own SQLite connection (`db._loop.LoopSQLite`) ----------------------


def _loop_sqlite() -> tuple["db._loop.LoopSQLite", "db._lane.Lane"]:
    lane = db._lane.Lane("test-db")
    return db._loop.LoopSQLite(str(connection.settings_dict["NAME"]), lane), lane


def _stored_elsewhere(call_id) -> bool:
    """Whether another connection sees the row: it was committed."""
    with contextlib.closing(sqlite3.connect(connection.settings_dict["NAME"])) as other:
        return (
            other.execute("SELECT 1 FROM mcpcore_toolcall WHERE id = ?", [call_id.hex]).fetchone() is not None
        )


def _insert_here(call: ToolCall) -> int:
    callsql.insert(call)
    return threading.get_ident()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_runs_the_writes_of_one_loop_turn_on_the_loop_in_one_commit():
    writes, _lane = _loop_sqlite()
    made = [_new_call(f"n{i}") for i in range(10)]
    threads = await asyncio.gather(*(writes.submit(lambda c=c: _insert_here(c)) for c in made))
    assert set(threads) == {threading.get_ident()}  # no hand-off to a thread
    assert writes._commits == 1  # the ten queued in one turn share one commit
    assert all(_stored_elsewhere(c.id) for c in made)  # answered after that commit

    one = _new_call("alone")
    await writes.submit(lambda: _insert_here(one))
    assert writes._commits == 2 and _stored_elsewhere(one.id)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_hands_a_write_that_needs_the_orm_to_the_database_thread():
    writes, _lane = _loop_sqlite()
    call = _new_call("orm")

    def with_orm():
        before = ToolCall.objects.count()  # Django refuses this on the loop's thread
        callsql.insert(call)
        return before, threading.current_thread().name

    before, thread = await writes.submit(with_orm)
    assert (before, thread) == (0, "test-db")
    assert _stored_elsewhere(call.id)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_never_waits_on_the_loop_for_another_writer():
    writes, _lane = _loop_sqlite()
    held, release = threading.Event(), threading.Event()

    def hold_the_write_lock():
        with contextlib.closing(
            sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
        ) as other:
            other.execute("BEGIN IMMEDIATE")
            held.set()
            release.wait(10)
            other.execute("COMMIT")

    holder = threading.Thread(target=hold_the_write_lock, daemon=True)
    holder.start()
    await asyncio.to_thread(held.wait, 10)
    call = _new_call("later")
    pending = asyncio.ensure_future(writes.submit(lambda: _insert_here(call)))
    ticks = 0
    for _ in range(5):  # the loop goes on turning while the lock is held elsewhere
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks == 5 and not pending.done()
    release.set()
    async with asyncio.timeout(10):
        thread = await pending
    holder.join(10)
    assert thread != threading.get_ident()  # it waited on the database thread
    assert _stored_elsewhere(call.id)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_keeps_nothing_of_a_write_that_raised_after_writing_and_loses_no_other():
    writes, _lane = _loop_sqlite()
    first, second, bad = _new_call("a"), _new_call("b"), _new_call("bad")
    twin = _new_call("twin")
    twin.id = first.id

    def wrote_then_failed():
        callsql.insert(bad)
        raise ValueError("after the write")

    outcomes = await asyncio.gather(
        writes.submit(lambda: _insert_here(first)),
        writes.submit(wrote_then_failed),
        writes.submit(lambda: _insert_here(twin)),
        writes.submit(lambda: _insert_here(second)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[1], ValueError)
    assert isinstance(outcomes[2], IntegrityError)  # Django's, as from any database job
    assert not isinstance(outcomes[0], Exception) and not isinstance(outcomes[3], Exception)
    ids = {c.id async for c in ToolCall.objects.all()}
    assert ids == {first.id, second.id}  # the raising write's row went with its transaction


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_reads_on_the_loop_and_on_the_database_thread_only_for_the_orm(monkeypatch):
    loop_sqlite, _lane = _loop_sqlite()
    monkeypatch.setattr(db, "_on_loop", loop_sqlite)
    monkeypatch.setattr(db, "_writer", _lane)
    call = _new_call("read")
    await loop_sqlite.submit(lambda: _insert_here(call))

    def plain():
        _, row = db.sql("SELECT tool FROM mcpcore_toolcall WHERE id = %s", [call.id.hex])
        return row[0], threading.get_ident()

    def with_orm():
        return ToolCall.objects.get(id=call.id).tool, threading.current_thread().name

    assert await db.read(plain) == ("t", threading.get_ident())
    assert await db.read(with_orm) == ("t", "test-db")


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_keeps_the_log_bounded_while_the_loop_keeps_writing(monkeypatch, tmp_path):
    # A database file of its own, so that no connection of another test holds the log.
    path = str(tmp_path / "own.sqlite3")
    with contextlib.closing(sqlite3.connect(connection.settings_dict["NAME"])) as source:
        schema = [
            row[0]
            for row in source.execute(
                "SELECT sql FROM sqlite_master WHERE tbl_name = 'mcpcore_toolcall' AND sql IS NOT NULL"
            )
        ]
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as own:
        own.execute("PRAGMA journal_mode=WAL")
        for statement in schema:
            own.execute(statement)
    loop_sqlite = db._loop.LoopSQLite(path, db._lane.Lane("test-db"))
    monkeypatch.setattr(db._loop.LoopSQLite, "CHECKPOINT_EVERY", 20)
    sizes = []
    for round_ in range(10):
        for i in range(30):  # one commit each: a turn of the loop apiece
            call = _new_call(f"{round_}-{i}")
            await loop_sqlite.submit(lambda c=call: _insert_here(c))
        sizes.append(os.path.getsize(f"{path}-wal"))
    with contextlib.closing(sqlite3.connect(path)) as own:
        (here,) = own.execute("SELECT count(*) FROM mcpcore_toolcall").fetchone()
    # The writes that met a checkpoint holding writers off went to the database thread, whose
    # connection is Django's (the test database here): none is lost.
    assert here + await ToolCall.objects.acount() == 300
    # The log starts again after each checkpoint: it never holds more than a few rounds.
    assert max(sizes) < 3 * sizes[0] + 256 * 1024, sizes


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_does_not_hold_writes_off_while_a_long_read_keeps_the_log_in_use(monkeypatch):
    loop_sqlite, _lane = _loop_sqlite()
    monkeypatch.setattr(db._loop.LoopSQLite, "CHECKPOINT_EVERY", 5)
    first = _new_call("first")
    await loop_sqlite.submit(lambda: _insert_here(first))
    with contextlib.closing(
        sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    ) as reader:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM mcpcore_toolcall").fetchone()  # a snapshot held open
        async with asyncio.timeout(5):  # the checkpoints give up on the reader; writes go on
            for i in range(40):
                call = _new_call(f"w{i}")
                await loop_sqlite.submit(lambda c=call: _insert_here(c))
        reader.execute("COMMIT")
    assert await ToolCall.objects.acount() == 41
