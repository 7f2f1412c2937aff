"""The call path's own statements (`mcpcore.db.callsql`) store exactly what the ORM would, on
Django's connection and on the event loop's own SQLite connection alike."""

import datetime
import uuid

import pytest
from django.db import connection
from django.utils import timezone

from mcpcore import db
from mcpcore.db import callsql
from mcpcore.models import ApiToken, ToolCall

WHEN = datetime.datetime(2026, 12, 1, 10, 30, 15, 123456, tzinfo=datetime.UTC)


def _fields(token: ApiToken | None) -> dict:
    return {
        "session_id": "s-1",
        "tool_name": "mcp__echo__echo",
        "server_name": "echo",
        "tool": " echo ",
        "arguments": {"text": "héllo", "n": [1, 2.5, None, True]},
        "mode": "auto",
        "token": token,
        "requested_by": "agent",
        "created_at": WHEN,
        "status": "running",
        "decided_at": WHEN,
        "started_at": WHEN,
        "definition_changed": True,
        "via": "mcp",
    }


def _row(call_id) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM mcpcore_toolcall WHERE id = %s", [call_id.hex])
        return cursor.fetchone()


def _values(call: ToolCall) -> dict:
    return {f.attname: getattr(call, f.attname) for f in ToolCall._meta.concrete_fields}


@pytest.mark.django_db
def test_it_makes_the_same_object_as_the_keyword_constructor():
    token = ApiToken.objects.create(name="a", token_hash="h", role="agent")
    fixed = {"id": uuid.uuid4(), **_fields(token)}
    made, expected = callsql.new(**fixed), ToolCall(**fixed)
    assert _values(made) == _values(expected)
    assert made.token is token  # the related object is kept: no query to reach it
    assert made._state.adding
    with pytest.raises(TypeError):
        callsql.new(nonsense=1)


@pytest.mark.django_db
def test_it_stores_and_ends_a_call_exactly_as_the_orm_would():
    token = ApiToken.objects.create(name="a", token_hash="h", role="agent")
    ours, theirs = callsql.new(**_fields(token)), ToolCall(**_fields(token))
    callsql.insert(ours)
    theirs.save(force_insert=True)
    assert _row(ours.id)[1:] == _row(theirs.id)[1:]

    ended = {"status": "done", "result": "ok", "ended_at": WHEN, "is_error": False, "native_result": None}
    assert callsql.end(ours.id, ended)
    ToolCall.objects.filter(id=theirs.id).update(**ended)
    assert _row(ours.id)[1:] == _row(theirs.id)[1:]
    assert not callsql.end(ours.id, ended)  # ended already: nothing is overwritten
    assert ToolCall.objects.get(id=ours.id).arguments == _fields(None)["arguments"]


@pytest.mark.django_db
def test_it_reads_a_calls_status_as_stored_and_none_for_no_call():
    call = callsql.new(**_fields(None))
    callsql.insert(call)
    assert callsql.status(call.id) == "running"
    assert callsql.end(call.id, {"status": "done", "result": "ok", "ended_at": WHEN})
    assert callsql.status(call.id) == "done"
    assert callsql.status(uuid.uuid4()) is None


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_stores_the_same_row_through_the_loops_own_connection():
    token = await ApiToken.objects.acreate(name="a", token_hash="h", role="agent")
    writes = db._loop.LoopSQLite(str(connection.settings_dict["NAME"]), db._lane.Lane("test-db"))
    ours, theirs = callsql.new(**_fields(token)), ToolCall(**_fields(token))
    ended = {"status": "error", "result": "no", "ended_at": timezone.now(), "is_error": True}

    def on_the_loop():
        assert db._loop.connection_here.get() is not None  # this job did run on the loop's connection
        callsql.insert(ours)
        return callsql.end(ours.id, ended)

    assert await writes.submit(on_the_loop)
    await theirs.asave(force_insert=True)
    await ToolCall.objects.filter(id=theirs.id).aupdate(**ended)
    mine, orm = await db.run(_row, ours.id), await db.run(_row, theirs.id)
    assert mine[1:] == orm[1:]


@pytest.mark.django_db
def test_it_keeps_confirmations_unique_while_calls_without_one_skip_the_index():
    from django.db import IntegrityError, transaction

    shared = uuid.uuid4()
    for _ in range(3):  # calls that ran at once have no confirmation id
        callsql.insert(callsql.new(**_fields(None)))
    callsql.insert(callsql.new(**_fields(None), confirm_id=shared))
    with pytest.raises(IntegrityError), transaction.atomic():
        callsql.insert(callsql.new(**_fields(None), confirm_id=shared))
    assert ToolCall.objects.filter(confirm_id=shared).count() == 1
    assert ToolCall.objects.filter(confirm_id__isnull=True).count() == 3


def test_it_gives_calls_time_ordered_ids():
    from mcpcore.models import time_ordered_uuid

    ids = [time_ordered_uuid() for _ in range(200)]
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
    assert len(set(ids)) == 200
    now_ms = timezone.now().timestamp() * 1000
    assert abs((ids[0].int >> 80) - now_ms) < 5000  # its first 48 bits are the time in ms
    # Made in different milliseconds, they sort in the order they were made.
    assert all((a.int >> 80) <= (b.int >> 80) for a, b in zip(ids, ids[1:], strict=False))
