"""The audit trail at scale (SPEC 22.2): the Audit page with 1,000,000 rows, unfiltered and by
each of its filters, and a page far back, p50 of 20 requests with the test client, in-process
on a temporary SQLite database; the sign-in page as baseline (as `history` measures History).
Also what a `/v1` call costs the audit trail: the rows 100 calls wrote (a call is no audited
change; tests/api/test_audit_api.py asserts it too)."""

import datetime
import json
import sqlite3
import time

from bench.common import Figure, django_setup, percentile
from bench.history import REQUESTS, page_figures, timed

NAME = "audit"
ROWS = 1_000_000
CALLS = 100
# How often each action occurs among the rows, as a console's trail might hold them.
ACTIONS = (
    ["trust.change"] * 4 + ["server.edit"] * 2 + ["allowance.add"] * 2 + ["token.create", "rules.change"]
)
ACTORS = [f"person-{i}" for i in range(20)] + ["file", "system", "ci-token", "phone"]


def make_rows(db_path: str, rows: int = ROWS) -> datetime.datetime:
    """`rows` audit rows, one every 30 s up to now, written by SQLite itself (a recursive CTE):
    actions and actors cycling through ACTIONS and ACTORS. Returns the first row's time."""
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=30 * rows)
    actions = f"json_extract('{json.dumps(ACTIONS)}', '$[' || (i % {len(ACTIONS)}) || ']')"
    actors = f"json_extract('{json.dumps(ACTORS)}', '$[' || ((i * 7) % {len(ACTORS)}) || ']')"
    conn = sqlite3.connect(db_path)
    try:
        with conn:
            conn.execute(
                "INSERT INTO mcpcore_auditentry (at, actor, address, action, object, before, after) "
                f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {rows}) "
                f"SELECT strftime('%Y-%m-%d %H:%M:%f', {start.timestamp():.3f} + 30 * i, 'unixepoch'), "
                f"{actors}, '192.0.2.' || (i % 250), {actions}, 'object-' || i, "
                "json_array('mcp__s' || (i % 50) || '__old'), json_array('mcp__s' || (i % 50) || '__new') "
                "FROM n"
            )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return start


def calls_write_no_rows() -> int:
    """Audit rows written by CALLS `/v1` calls (an untrusted tool: each waits for a person)."""
    from django.test import Client

    from mcpcore.choices import TokenRole
    from mcpcore.models import ApiToken, AuditEntry, Server, Tool

    server = Server.objects.create(name="bench-audit", state="connected", transport="stdio")
    Tool.objects.create(server=server, tool_name="t", registered_name="mcp__bench-audit__t")
    _, token = ApiToken.issue("bench-audit", role=TokenRole.AGENT)
    before = AuditEntry.objects.count()
    client = Client()
    for i in range(CALLS):
        r = client.post(
            "/v1/mcp/call",
            data=json.dumps({"name": "mcp__bench-audit__t", "arguments": {"i": i}, "wait": 0}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        if r.status_code != 202:
            raise RuntimeError(f"POST /v1/mcp/call: {r.status_code} {r.content[:200]!r}")
    return AuditEntry.objects.count() - before


def run() -> list[Figure]:
    django_setup()
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    t = time.perf_counter()
    start = make_rows(str(settings.DATABASES["default"]["NAME"]))
    setup_s = time.perf_counter() - t
    user = User.objects.create_user("bench-audit", password="bench-audit-password")
    signed_in = Client()
    signed_in.force_login(user)
    empty = percentile(timed(Client(), "/login/", b"Sign in"), 50)
    middle = (start + datetime.timedelta(seconds=15 * ROWS)).strftime("%Y-%m-%dT%H:%M:%S")
    day_after = (start + datetime.timedelta(seconds=15 * ROWS, days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    pages = [
        ("unfiltered", "/audit/", f"object-{ROWS - 1}".encode()),
        ("by action (common: trust.change)", "/audit/?action=trust.change", b"trust.change"),
        ("by action (rare: rules.change)", "/audit/?action=rules.change", b"rules.change"),
        ("by action matching nothing", "/audit/?action=mfa.add", b"No changes match."),
        ("by actor", "/audit/?actor=person-3", b"person-3"),
        ("by action and actor", "/audit/?action=server.edit&actor=file", b"server.edit"),
        ("a day in the middle", f"/audit/?since={middle}&until={day_after}", b"object-"),
        ("a page far back", "/audit/?before=2000-01-01T00:00:00.000000Z~1", b""),
    ]
    note = f"test Client, {REQUESTS} requests each; {ROWS:,} rows made in {setup_s:.0f} s"
    figures = page_figures(NAME, "audit page", f"{ROWS:,} rows", pages, signed_in, empty, note)
    written = calls_write_no_rows()
    figures.append(
        Figure(
            NAME,
            f"audit rows written by {CALLS} /v1 calls",
            written,
            "rows",
            target="0",
            ok=written == 0,
            note="a call is no audited change",
        )
    )
    return figures
