"""20. Approvals routed to groups (SPEC 24.1-24.3): what routing costs the inbox and the calls.

- The Pending page with 1,000 pending confirmations of 10 groups, for an approver in one of
  them (in process, Django's test Client on a temporary SQLite database, as bench/pages.py):
  every item says whom it is for, and only that group's carry buttons.
- A/B in one run and one console: the auto echo call (`POST /v1/mcp/call`, raw keep-alive
  HTTP), which an `allow` line lets run at once, with the rules file switched every 50 calls
  between ten `ask[<group>:2]` lines on other tools and the same ten lines as plain `ask`
  (the rule that decides the call is the same `allow` line both ways): what reading who decides
  adds to a call that runs at once.
"""

import asyncio
import datetime
import time
import uuid

from bench.common import Figure, console, django_setup, echo_body, echo_servers, ms, percentile
from bench.guards import BLOCK, CALLS, SETTLE, WARMUP, calls
from bench.rawhttp import RawHttp

NAME = "routing"
PENDING = 1_000
GROUPS = 10
REQUESTS = 20
TARGET_PAGE_MS = 150.0
TARGET_CALL_MS = 0.1


def make_pending() -> None:
    from mcpcore.models import ToolCall

    now = datetime.datetime.now(datetime.UTC)
    ToolCall.objects.bulk_create(
        [
            ToolCall(
                session_id=f"s-{i % 50}",
                tool_name=f"mcp__srv{i % 7}__tool_{i % 13}",
                server_name=f"srv{i % 7}",
                tool=f"tool_{i % 13}",
                arguments={"n": i},
                requested_by="bench-agent",
                status="pending",
                confirm_id=uuid.uuid4(),
                created_at=now - datetime.timedelta(seconds=i),
                expires_at=now + datetime.timedelta(minutes=5),
                for_group=f"g{i % GROUPS}",
                approvals_needed=2 if i % 3 == 0 else 1,
            )
            for i in range(PENDING)
        ],
        batch_size=500,
    )


def page_figure() -> Figure:
    django_setup()
    from django.contrib.auth.models import User
    from django.test import Client

    from mcpcore.models import Group, Person

    user = User.objects.create_user("bench-routing")
    Person.objects.create(user=user, role="approver")
    for g in range(GROUPS):
        group = Group.objects.create(name=f"g{g}")
        if g == 3:
            group.people.add(user)
    make_pending()
    client = Client()
    client.force_login(user)
    for _ in range(3):
        client.get("/pending/")
    times = []
    for _ in range(REQUESTS):
        t = time.perf_counter()
        r = client.get("/pending/")
        times.append(time.perf_counter() - t)
        if r.status_code != 200 or b"For g3" not in r.content:
            raise RuntimeError(f"GET /pending/: {r.status_code}")
    login = []
    for _ in range(REQUESTS):
        t = time.perf_counter()
        Client().get("/login/")
        login.append(time.perf_counter() - t)
    p50 = ms(percentile(times, 50))
    return Figure(
        NAME,
        f"Pending page, {PENDING:,} pending of {GROUPS} groups, a person in one, p50",
        p50,
        "ms",
        ms(percentile(login, 50)),
        "sign-in page p50",
        f"< {TARGET_PAGE_MS:.0f} ms",
        p50 < TARGET_PAGE_MS,
        f"test Client, {REQUESTS} requests",
    )


def lines(routed: bool) -> str:
    who = "[g0:2]" if routed else ""
    return "".join(f"ask{who} mcp__srv{i:02d}__*\n" for i in range(GROUPS)) + "allow mcp__echo__echo\n"


async def toggled(con) -> tuple[list[float], list[float]]:
    """One console, its rules file switched between the routed and the plain lines between
    blocks; the first calls after a switch (which read the file again) are left out."""
    body, rules_file = echo_body(), con.home / "rules"
    got: dict[bool, list[float]] = {True: [], False: []}
    async with RawHttp(con.url, con.token) as http:
        await calls(http, WARMUP, body)
        for _ in range(CALLS // BLOCK):
            for routed in (True, False):
                rules_file.write_text(lines(routed))
                await calls(http, SETTLE, body)
                got[routed] += await calls(http, BLOCK, body)
    return got[True], got[False]


def call_figure() -> Figure:
    with console(echo_servers(), start=False) as con:
        con.manage(
            "shell",
            "-c",
            "from mcpcore.models import Group; Group.objects.bulk_create([Group(name='g0')])",
        )
        con.start()
        con.wait_connected("echo")
        routed, plain = asyncio.run(toggled(con))
    p_routed, p_plain = ms(percentile(routed, 50)), ms(percentile(plain, 50))
    added = p_routed - p_plain
    return Figure(
        NAME,
        "p50 added by routing to a call that runs at once",
        added,
        "ms",
        p_plain,
        "p50 with the same lines as plain ask",
        f"< {TARGET_CALL_MS:g} ms",
        added < TARGET_CALL_MS,
        f"p50 routed {p_routed:.3f} ms; {CALLS} calls each, the rules file switched every {BLOCK} calls",
    )


def run() -> list[Figure]:
    return [page_figure(), call_figure()]
