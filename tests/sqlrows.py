"""Call rows written straight into a console's SQLite file, for tests and benchmarks that need
many calls, or calls of another time, faster than the ORM makes them. The columns and their
defaults are the model's; values are stored as Django stores them on SQLite."""

import datetime
import json
import sqlite3
import uuid
from pathlib import Path

COLUMNS = (
    "id", "kind", "confirm_id", "session_id", "tool_name", "server_name", "tool", "arguments",
    "mode", "token_id", "requested_by", "status", "decision", "decided_by", "decided_at", "reason",
    "created_at", "expires_at", "started_at", "ended_at", "worker", "result",
    "is_error", "truncated", "result_bytes", "raw_result", "raw_truncated", "rule",
    "definition_changed", "notified", "via", "cwd", "native_result",
)  # fmt: skip
DEFAULTS = {
    "kind": "tool_confirm", "confirm_id": None, "session_id": "s-1", "tool_name": "mcp__srv__tool",
    "server_name": "srv", "tool": "tool", "arguments": {}, "mode": "auto", "token_id": None,
    "requested_by": "tests", "status": "done", "decision": "auto", "decided_by": "", "decided_at": None,
    "reason": "", "expires_at": None, "started_at": None, "ended_at": None, "worker": "",
    "result": "", "is_error": False, "truncated": False, "result_bytes": 0, "raw_result": "",
    "raw_truncated": False, "rule": "", "definition_changed": False, "notified": 2, "via": "rest",
    "cwd": "", "native_result": None,
}  # fmt: skip
INSERT = f"INSERT INTO mcpcore_toolcall ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"


def _value(v):
    if isinstance(v, uuid.UUID):
        return v.hex
    if isinstance(v, datetime.datetime):
        return v.astimezone(datetime.UTC).replace(tzinfo=None).isoformat(" ")
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    if isinstance(v, bool):
        return int(v)
    return v


def row(created_at: datetime.datetime, **fields) -> tuple:
    """One call row created at `created_at`; an ended status gets its times filled in."""
    values = {**DEFAULTS, "id": uuid.uuid4(), "created_at": created_at, **fields}
    if values["status"] not in ("pending", "running"):
        values.setdefault("started_at", None)
        values["started_at"] = values["started_at"] or created_at
        values["ended_at"] = values["ended_at"] or created_at + datetime.timedelta(milliseconds=5)
    if values["status"] == "pending" and values["confirm_id"] is None:
        values["confirm_id"] = uuid.uuid4()
        values["decision"] = ""
    return tuple(_value(values[c]) for c in COLUMNS)


def insert(db_path: Path, rows) -> None:
    """Write rows (from `row`) in one transaction."""
    conn = sqlite3.connect(db_path)
    try:
        with conn:
            conn.executemany(INSERT, rows)
    finally:
        conn.close()
