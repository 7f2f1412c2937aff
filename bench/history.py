"""History at scale (SPEC 18.4): the History page with 1,000,000 calls, unfiltered and filtered
by each of its filters, p50 of 20 requests with the test client, in-process on a temporary
SQLite database; the sign-in page as baseline. Also a deep page (a cursor far back) and the
Servers page, whose footer counts every call kept."""

import datetime
import random
import sqlite3
import time

from .common import Figure, django_setup, ms, percentile

NAME = "history"
CALLS = 1_000_000
REQUESTS = 20
TARGET_MS = 150.0
SERVERS = [f"srv{i}" for i in range(10)]


def make_calls(db_path: str, calls: int = CALLS, start: datetime.datetime | None = None) -> None:
    """`calls` calls over 10 servers x 100 tools, 20 calls a session, one every 3 s from
    `start` (default: so that the last is now), in raw SQL (tests.rows). Statuses as a busy
    console has them: mostly done."""
    from tests import rows

    rng = random.Random(22)
    statuses = ["done"] * 85 + ["error"] * 8 + ["skipped"] * 4 + ["expired", "cancelled", "interrupted"]
    start = start or datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=3 * calls)
    conn = sqlite3.connect(db_path)
    try:
        for first in range(0, calls, 50_000):
            batch = []
            for i in range(first, min(first + 50_000, calls)):
                server = SERVERS[i % 10]
                tool = f"tool_{rng.randrange(100):03d}"
                batch.append(
                    rows.row(
                        start + datetime.timedelta(seconds=3 * i),
                        session_id=f"session-{i // 20}",
                        tool_name=f"mcp__{server}__{tool}",
                        server_name=server,
                        tool=tool,
                        arguments={"text": f"input {i}"},
                        status=rng.choice(statuses),
                        result=f"result {i}: " + "lorem ipsum " * rng.randrange(1, 12),
                    )
                )
            with conn:
                conn.executemany(rows.INSERT, batch)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def timed(client, path: str, expect: bytes = b"") -> list[float]:
    for _ in range(3):
        client.get(path)
    times = []
    for _ in range(REQUESTS):
        t = time.perf_counter()
        r = client.get(path)
        times.append(time.perf_counter() - t)
        if r.status_code != 200 or expect not in r.content:
            raise RuntimeError(f"GET {path}: {r.status_code}")
    return times


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
        ("by tool (one name)", "/history/?tool=mcp__srv3__tool_007", b"tool_007"),
        ("by tool (a part of many names)", "/history/?tool=tool_00", b"tool_00"),
        ("by tool matching nothing", "/history/?tool=no_such_tool", b""),
        ("by server and status", "/history/?server=srv5&status=error", b"srv5"),
        (
            "a page far back",
            "/history/?before=2000-01-01T00:00:00.000000Z~00000000-0000-0000-0000-000000000000",
            b"",
        ),
    ]
    note = f"test Client, {REQUESTS} requests each; {CALLS:,} calls made in {setup_s:.0f} s"
    figures = []
    for label, path, expect in pages:
        p50 = percentile(timed(signed_in, path, expect), 50)
        figures.append(
            Figure(
                NAME,
                f"history {label}, {CALLS:,} calls, p50",
                ms(p50),
                "ms",
                ms(empty),
                "sign-in page p50",
                f"< {TARGET_MS:.0f} ms",
                ms(p50) < TARGET_MS,
                note,
            )
        )
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
