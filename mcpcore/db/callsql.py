"""The few statements every tool call runs, as SQL built once from the model: record the call
(one INSERT) and end it (one conditional UPDATE), read its status, plus making the call's
object. The ORM would
build and compile the same statements on every call, and Django's keyword constructor weigh
each of the model's fields, which cost more than running them. Values go through each field's
own `get_db_prep_save`, except those a field would pass through unchanged (a `str` for a text
column, an `int` or `bool` for a number), so what is stored is exactly what `save()` would store.

Sync: run them in a database job (`mcpcore.db.write`); they go through `db.sql`, so they also
run on the event loop's own SQLite connection."""

import functools

from django.db import connections, models

from .. import db
from ..choices import CALL_LIVE
from ..models import ToolCall

_FIELDS = ToolCall._meta.concrete_fields
_BY_NAME = {f.name: f for f in _FIELDS} | {f.attname: f for f in _FIELDS}
# Fields whose get_db_prep_save returns a value of these types as it is.
_PLAIN = {
    models.CharField: (str,),
    models.TextField: (str,),
    models.BooleanField: (bool,),
    models.PositiveSmallIntegerField: (int,),
    models.PositiveBigIntegerField: (int,),
}


def new(**fields) -> ToolCall:
    """`ToolCall(**fields)`: the same object, made the way Django makes one from a row (one
    value per field, in order), with each missing field's default."""
    values = []
    for field in _FIELDS:
        if field.attname in fields:
            values.append(fields.pop(field.attname))
        elif field.name in fields:  # a related object (token=...): its id is the column
            related = fields[field.name]
            values.append(None if related is None else related.pk)
        else:
            values.append(field.get_default())
    # The Django plugin checks a star-args list against the first field (`id`) alone.
    call = ToolCall(*values)  # type: ignore[misc]
    for name, value in fields.items():  # related objects, so call.token needs no query
        if name not in _BY_NAME:
            raise TypeError(f"ToolCall has no field {name!r}")
        setattr(call, name, value)
    return call


@functools.cache
def _insert_sql() -> str:
    qn = _backend().ops.quote_name
    columns = ", ".join(qn(f.column) for f in _FIELDS)
    marks = ", ".join(["%s"] * len(_FIELDS))
    return f"INSERT INTO {qn(ToolCall._meta.db_table)} ({columns}) VALUES ({marks})"


@functools.cache
def _end_sql(names: tuple[str, ...]) -> str:
    qn = _backend().ops.quote_name
    sets = ", ".join(f"{qn(_BY_NAME[n].column)} = %s" for n in names)
    return (
        f"UPDATE {qn(ToolCall._meta.db_table)} SET {sets} "
        f"WHERE {qn('id')} = %s AND {qn('status')} IN ({', '.join(['%s'] * len(CALL_LIVE))})"
    )


@functools.cache
def _backend():
    """A database wrapper of our own that is never connected, for what values become and the
    SQL's quoting. Not `django.db.connection`: on the event loop's thread Django keeps one per
    task, and makes a new one for each."""
    return connections.create_connection("default")


def _prep(field, value):
    plain = _PLAIN.get(type(field), ())
    if value is None or type(value) in plain:
        return value
    if str in plain and isinstance(value, str):  # a `choices` member: its value is the text
        return str(value)
    return field.get_db_prep_save(value, _backend())


@functools.cache
def _status_sql() -> str:
    pk = ToolCall._meta.pk
    return f"SELECT status FROM {ToolCall._meta.db_table} WHERE {pk.column} = %s"


def status(call_id) -> str | None:
    """The call's stored status (one read by primary key), None when there is no such call."""
    _, row = db.sql(_status_sql(), [_prep(ToolCall._meta.pk, call_id)])
    return row[0] if row else None


def insert(call: ToolCall) -> None:
    """Store a new call, as `call.save()` would (defaults already set by the constructor)."""
    params = [_prep(f, getattr(call, f.attname)) for f in _FIELDS]
    db.sql(_insert_sql(), params)
    call._state.adding = False
    call._state.db = "default"


def end(call_id, fields: dict) -> bool:
    """Write `fields` onto the call if it is still pending or running; whether it was."""
    names = tuple(sorted(fields))
    params = [_prep(_BY_NAME[n], fields[n]) for n in names]
    params += [_prep(_BY_NAME["id"], call_id), *sorted(CALL_LIVE)]
    changed, _ = db.sql(_end_sql(names), params)
    return changed == 1


@functools.cache
def _ended_sql() -> str:
    qn = _backend().ops.quote_name
    names = ("server_name", "status", "decision", "started_at", "ended_at", "confirm_id")
    columns = ", ".join(qn(_BY_NAME[n].column) for n in names)
    return f"SELECT {columns} FROM {qn(ToolCall._meta.db_table)} WHERE {qn('id')} = %s"


def ended_row(call_id) -> tuple | None:
    """(server_name, status, decision, started_at, ended_at, confirm_id) of a call, as its
    metrics need them (times as datetimes or, on the loop's SQLite connection, text)."""
    _, row = db.sql(_ended_sql(), [_prep(_BY_NAME["id"], call_id)])
    return row
