"""History at scale (SPEC 18.4): the History page with 1,000,000 calls, unfiltered and filtered
by each of its filters, p50 of 20 requests with the test client, in-process on a temporary
SQLite database; the sign-in page as baseline. Also a deep page (a cursor far back) and the
Servers page, whose footer counts every call kept."""

import datetime
import sqlite3
import time

from bench.common import Figure, django_setup, ms, percentile

NAME = "history"
CALLS = 1_000_000
REQUESTS = 20
TARGET_MS = 150.0
SERVERS = [f"srv{i}" for i in range(10)]


def make_calls(db_path: str, calls: int = CALLS, start: datetime.datetime | None = None) -> None:
    """`calls` calls over 10 servers x 100 tools, 20 calls a session, one every 3 s from
    `start` (default: so that the last is now), written by SQLite itself (a recursive CTE:
    Python would take minutes for a million rows). Statuses as a busy console has them: 85%
    done, 8% error, 4% skipped, 1% each expired, cancelled, interrupted. Columns and values as
    tests.live writes them."""
    from tests.live import CALL_COLUMNS, call_row

    start = start or datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=3 * calls)
    values = {
        "id": "printf('%08x%04x7%03x8%015x', i / 65536, i % 65536, i % 4096, i)",
        "session_id": "'session-' || (i / 20)",
        "server_name": "'srv' || (i % 10)",
        "tool": "printf('tool_%03d', (i * 7) % 100)",
        "tool_name": "'mcp__srv' || (i % 10) || '__' || printf('tool_%03d', (i * 7) % 100)",
        "arguments": "json_object('text', 'input ' || i)",
        "status": (
            "CASE WHEN (i * 37) % 100 < 85 THEN 'done' WHEN (i * 37) % 100 < 93 THEN 'error' "
            "WHEN (i * 37) % 100 < 97 THEN 'skipped' WHEN (i * 37) % 100 = 97 THEN 'expired' "
            "WHEN (i * 37) % 100 = 98 THEN 'cancelled' ELSE 'interrupted' END"
        ),
        "created_at": f"strftime('%Y-%m-%d %H:%M:%f', {start.timestamp():.3f} + 3 * i, 'unixepoch')",
        "started_at": f"strftime('%Y-%m-%d %H:%M:%f', {start.timestamp():.3f} + 3 * i, 'unixepoch')",
        "ended_at": f"strftime('%Y-%m-%d %H:%M:%f', {start.timestamp():.3f} + 3 * i + 0.005, 'unixepoch')",
        "result": "'result ' || i || ': ' || substr('lorem ipsum dolor sit amet consectetur ', 1, 10 + i % 30)",
    }
    defaults = dict(zip(CALL_COLUMNS, call_row(start), strict=True))
    select = ", ".join(
        values.get(c) or ("NULL" if defaults[c] is None else repr(defaults[c])) for c in CALL_COLUMNS
    )
    conn = sqlite3.connect(db_path)
    try:
        with conn:
            conn.execute(
                f"INSERT INTO mcpcore_toolcall ({', '.join(CALL_COLUMNS)}) "
                f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {calls}) "
                f"SELECT {select} FROM n"
            )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def timed(client, path: str, expect: bytes = b"", db_times: list | None = None) -> list[float]:
    """Seconds per request; `db_times`, when given, gets each request's time in the database
    (the part that grows with the history: the rest is rendering 50 rows)."""
    from django.db import connection

    spent = [0.0]

    def clock(execute, sql, params, many, context):
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            spent[0] += time.perf_counter() - t

    for _ in range(3):
        client.get(path)
    times = []
    with connection.execute_wrapper(clock):
        for _ in range(REQUESTS):
            spent[0] = 0.0
            t = time.perf_counter()
            r = client.get(path)
            times.append(time.perf_counter() - t)
            if db_times is not None:
                db_times.append(spent[0])
            if r.status_code != 200 or expect not in r.content:
                raise RuntimeError(f"GET {path}: {r.status_code}")
    return times


def page_figures(
    bench: str, page: str, size: str, pages: list, client, empty: float, note: str
) -> list[Figure]:
    """For each (label, path, expected bytes) of `pages`: its p50 against TARGET_MS and the
    sign-in page's p50 `empty`, and the p50 of its queries' time."""
    figures = []
    for label, path, expect in pages:
        db_times: list[float] = []
        p50 = percentile(timed(client, path, expect, db_times), 50)
        figures.append(
            Figure(
                bench,
                f"{page} {label}, {size}, p50",
                ms(p50),
                "ms",
                ms(empty),
                "sign-in page p50",
                f"< {TARGET_MS:.0f} ms",
                ms(p50) < TARGET_MS,
                note,
                extra={"database_ms_p50": ms(percentile(db_times, 50))},
            )
        )
        figures.append(
            Figure(bench, f"{page} {label}: its queries (execute), p50", ms(percentile(db_times, 50)), "ms")
        )
    return figures


def run() -> list[Figure]:
    django_setup()
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    from mcpcore.models import Server

    for name in SERVERS:
        Server.objects.get_or_create(name=name, defaults={"config": {"command": "x"}, "state": "connected"})
    t = time.perf_counter()
    make_calls(str(settings.DATABASES["default"]["NAME"]))
    setup_s = time.perf_counter() - t
    user = User.objects.create_user("bench-history", password="bench-history-password")
    signed_in = Client()
    signed_in.force_login(user)
    empty = percentile(timed(Client(), "/login/", b"Sign in"), 50)
    pages = [
        ("unfiltered", "/history/", f"input {CALLS - 1}".encode()),
        ("by server", "/history/?server=srv3", b"srv3"),
        ("by status (rare: interrupted)", "/history/?status=interrupted", b"interrupted"),
        ("by status (common: done)", "/history/?status=done", b"done"),
        ("by session", f"/history/?session=session-{CALLS // 40}", b"session-"),
        ("by tool (one name)", "/history/?tool=mcp__srv3__tool_021", b"tool_021"),
        ("by tool (a part of many names)", "/history/?tool=tool_00", b"tool_00"),
        ("by tool matching nothing", "/history/?tool=no_such_tool", b""),
        ("by server and status", "/history/?server=srv5&status=error", b"srv5"),
        ("by kind (common: tool)", "/history/?kind=tool", b"tool_"),
        ("by kind (rare: prompt, none here)", "/history/?kind=prompt", b""),
        (
            "a page far back",
            "/history/?before=2000-01-01T00:00:00.000000Z~00000000-0000-0000-0000-000000000000",
            b"",
        ),
    ]
    note = f"test Client, {REQUESTS} requests each; {CALLS:,} calls made in {setup_s:.0f} s"
    figures = page_figures(NAME, "history", f"{CALLS:,} calls", pages, signed_in, empty, note)
    servers = percentile(timed(signed_in, "/", b'id="storage"'), 50)
    figures.append(
        Figure(
            NAME,
            f"servers page with the storage footer, {CALLS:,} calls, p50",
            ms(servers),
            "ms",
            ms(empty),
            "sign-in page p50",
            note="the footer counts every call kept (COUNT over the smallest index)",
        )
    )
    return figures
