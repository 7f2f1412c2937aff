"""5. Pages, in-process with Django's test Client on a temporary SQLite database: the server
detail page of a server with 1,000 tools and the call history with 100,000 calls, against an
empty page (the sign-in page) as baseline."""

import datetime
import random
import time
import uuid

from bench.common import Figure, django_setup, ms, percentile

NAME = "pages"
TOOLS = 1_000
CALLS = 100_000
REQUESTS = 20
TARGET_MS = 150.0
SERVER = "big"


def schema(i: int) -> dict:
    return {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": f"What tool {i} works on."},
            "count": {"type": "integer", "minimum": 1, "default": 1},
            "mode": {"type": "string", "enum": ["fast", "careful"]},
        },
        "required": ["text"],
    }


def make_tools() -> None:
    from mcpcore.models import Server, Tool

    server = Server(
        name=SERVER,
        state="connected",
        protocol_version="2026-07-28",
        instructions="A server with many tools.",
    )
    server.apply_config({"command": "python", "args": ["many.py"], "env": {"TOKEN": "secret"}})
    server.save()
    Tool.objects.bulk_create(
        [
            Tool(
                server=server,
                tool_name=f"tool_{i:04d}",
                registered_name=f"mcp__{SERVER}__tool_{i:04d}",
                description=f"Bench tool {i}: does something useful with `text`, `count` times.",
                input_schema=schema(i),
                position=i,
            )
            for i in range(TOOLS)
        ],
        batch_size=500,
    )


def make_calls() -> None:
    """100,000 calls over 10 servers, written with one executemany (bulk_create of that many
    model objects takes half a minute)."""
    import json

    from django.db import connection, transaction

    from mcpcore.models import Server, ToolCall

    rng = random.Random(7)
    servers = [f"srv{i}" for i in range(10)]
    for name in servers:
        Server.objects.create(name=name, config={"command": "x"}, transport="stdio", state="connected")
    statuses = (
        ["done"] * 80
        + ["error"] * 10
        + ["skipped"] * 5
        + ["expired", "aborted", "cancelled", "interrupted", "pending"]
    )
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    fields = [f for f in ToolCall._meta.concrete_fields]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = f"INSERT INTO {ToolCall._meta.db_table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"

    def row(i: int) -> tuple:
        server = rng.choice(servers)
        tool = f"tool_{rng.randrange(100):03d}"
        status = rng.choice(statuses)
        created = start + datetime.timedelta(seconds=i * 30)
        result = f"result {i}: " + "lorem ipsum dolor sit amet " * rng.randrange(1, 12)
        call = ToolCall(
            id=uuid.UUID(int=rng.getrandbits(128)),
            session_id=f"session-{i // 20}",
            tool_name=f"mcp__{server}__{tool}",
            server_name=server,
            tool=tool,
            arguments={"text": f"input {i}", "count": i % 7},
            mode="auto",
            status=status,
            decision="auto",
            requested_by="token:bench",
            created_at=created,
            started_at=created,
            ended_at=created + datetime.timedelta(milliseconds=rng.randrange(1, 900)),
            result=result if status != "pending" else "",
            raw_result=result,
            result_bytes=len(result),
            confirm_id=uuid.UUID(int=rng.getrandbits(128)) if status == "pending" else None,
            expires_at=created + datetime.timedelta(minutes=5) if status == "pending" else None,
        )
        return tuple(
            json.dumps(v) if isinstance(v, dict) else f.get_db_prep_save(v, connection)
            for f, v in ((f, getattr(call, f.attname)) for f in fields)
        )

    with transaction.atomic(), connection.cursor() as cursor:
        for first in range(0, CALLS, 10_000):
            cursor.executemany(sql, [row(i) for i in range(first, min(first + 10_000, CALLS))])


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
    from django.contrib.auth.models import User
    from django.test import Client, override_settings

    from bench.common import _django_dir

    home = _django_dir / "pages-home"
    home.mkdir(exist_ok=True)
    t = time.perf_counter()
    make_tools()
    make_calls()
    setup_s = time.perf_counter() - t
    user = User.objects.create_user("bench-pages", password="bench-pages-password")
    signed_in = Client()
    signed_in.force_login(user)
    with override_settings(AGENVOY_HOME=home):
        empty = percentile(timed(Client(), "/login/", b"Sign in"), 50)
        detail = percentile(timed(signed_in, f"/servers/{SERVER}/", b"tool_0999"), 50)
        history = percentile(timed(signed_in, "/history/", b"input 99999"), 50)
        by_server = percentile(timed(signed_in, "/history/?server=srv3"), 50)
        by_tool = percentile(timed(signed_in, "/history/?tool=no_such_tool"), 50)
    note = f"test Client, {REQUESTS} requests each; data made in {setup_s:.0f} s"
    return [
        Figure(
            NAME,
            f"server detail, {TOOLS:,} tools, p50",
            ms(detail),
            "ms",
            ms(empty),
            "sign-in page p50",
            f"< {TARGET_MS:.0f} ms",
            ms(detail) < TARGET_MS,
            note,
        ),
        Figure(
            NAME,
            f"call history, {CALLS:,} calls, p50",
            ms(history),
            "ms",
            ms(empty),
            "sign-in page p50",
            f"< {TARGET_MS:.0f} ms",
            ms(history) < TARGET_MS,
            note,
        ),
        Figure(
            NAME, "call history filtered by server, p50", ms(by_server), "ms", ms(empty), "sign-in page p50"
        ),
        Figure(
            NAME,
            "call history filtered by a tool name matching nothing, p50",
            ms(by_tool),
            "ms",
            ms(empty),
            "sign-in page p50",
            note="worst case for the filter: no row matches",
        ),
    ]
