"""Many at once (SPEC 24.6): `POST /v1/pending/decide` of 500 ids on a real serve with the echo
server: 500 pending confirmations of an agent token (rows written into serve's SQLite file, as
`tests.live.insert_call_rows` writes them), denied in one request, then 500 more approved in one
(answered once recorded and handed to the supervisor; the 500 echo calls run after it, and are
waited for before the next round). Five rounds of each."""

import asyncio
import datetime
import time
import uuid

from bench import common
from bench.common import Figure, ms, percentile
from tests.live import call_row, db_rows, insert_call_rows, token_id, wait_until

NAME = "decide"
IDS = 500
ROUNDS = 5
TARGET_MS = 1000.0


def pending_rows(con, agent: int, n: int = IDS) -> list[str]:
    """`n` pending echo confirmations of the agent token; their confirm ids."""
    now = datetime.datetime.now(datetime.UTC)
    ids = [uuid.uuid4() for _ in range(n)]
    rows = [
        call_row(
            now,
            status="pending",
            confirm_id=cid,
            decision="",
            mode="confirm",
            token_id=agent,
            requested_by="bench-agent",
            session_id=f"decide-{cid.hex[:8]}",
            tool_name=common.ECHO_TOOL,
            server_name="echo",
            tool="echo",
            arguments=common.ECHO_ARGS,
            notified=2,
            expires_at=now + datetime.timedelta(minutes=10),
        )
        for cid in ids
    ]
    insert_call_rows(con.data / "db.sqlite3", rows)
    return [str(cid) for cid in ids]


def live_calls(con) -> int:
    return db_rows(con, "select count(*) from mcpcore_toolcall where status in ('pending', 'running')")[0][0]


async def one(person, ids: list[str], approve: bool) -> float:
    sent = time.perf_counter()
    r = await person.post("/v1/pending/decide", json={"ids": ids, "approve": approve, "reason": "bench"})
    took = time.perf_counter() - sent
    results = r.json().get("results", {}) if r.status_code == 200 else {}
    if list(results.values()) != ["ok"] * len(ids):
        raise RuntimeError(f"decide failed: {r.status_code} {r.text[:300]}")
    return took


def measure(con) -> dict[str, list[float]]:
    agent = con.client_for("agent", "bench-agent")
    agent.close()
    agent_id = token_id(con, "bench-agent")
    times: dict[str, list[float]] = {"deny": [], "approve": [], "one": []}

    async def rounds() -> None:
        async with common.async_http(con, 2, con.approver_token) as person:
            await one(person, pending_rows(con, agent_id, 1), False)  # warm-up
            for _ in range(ROUNDS):
                times["one"].append(await one(person, pending_rows(con, agent_id, 1), False))
                times["deny"].append(await one(person, pending_rows(con, agent_id), False))
                times["approve"].append(await one(person, pending_rows(con, agent_id), True))
                # The 500 approved calls run on the echo server before the next round.
                await asyncio.to_thread(wait_until, lambda: live_calls(con) == 0, 120, 0.2, "the runs")

    asyncio.run(rounds())
    return times


def run() -> list[Figure]:
    with common.console(common.echo_servers(), {"AGENVOY_MAX_PENDING": "10000"}) as con:
        con.wait_connected("echo")
        times = measure(con)
    single = ms(percentile(times["one"], 50))
    figures = []
    for kind in ("deny", "approve"):
        p50 = ms(percentile(times[kind], 50))
        figures.append(
            Figure(
                NAME,
                f"POST /v1/pending/decide, {IDS} ids, {kind}, p50",
                p50,
                "ms",
                single,
                "one id, p50",
                f"< {TARGET_MS:.0f} ms",
                p50 < TARGET_MS,
                f"{ROUNDS} rounds; max {ms(max(times[kind])):.1f} ms",
            )
        )
    return figures
