"""3. Approval latency: a client waits in `POST /v1/mcp/call` (confirm, wait=30); another client
approves over `/v1/session/<sid>/confirm/<cid>`; time from sending the approve to the waiting
client holding its result, minus the tool time (the direct SDK call's p50, same run)."""

import asyncio
import time
import uuid

from bench import common
from bench.common import ECHO_ARGS, Figure, ms, percentile

NAME = "approval"
APPROVALS = 50
TARGET_MS = 50.0


async def confirm_id(http, session_id: str, timeout: float = 10) -> str:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        for item in (await http.get("/v1/pending")).json()["pending"]:
            if item["session_id"] == session_id:
                return item["id"]
        await asyncio.sleep(0.005)
    raise RuntimeError("the pending confirmation never appeared")


async def one(agent, person) -> tuple[float, float]:
    """(approve sent -> result held, approve POST's own answer time), in seconds."""
    sid = f"bench-{uuid.uuid4().hex[:12]}"
    held = {}

    async def wait_for_result():
        r = await agent.post("/v1/mcp/call", json=common.echo_body("confirm", session_id=sid, wait=30))
        held["at"] = time.perf_counter()
        held["body"] = r.json()

    waiter = asyncio.create_task(wait_for_result())
    cid = await confirm_id(person, sid)
    await asyncio.sleep(0.02)  # the agent is now parked in its wait
    sent = time.perf_counter()
    r = await person.post(f"/v1/session/{sid}/confirm/{cid}", json={"approve": True})
    answered = time.perf_counter() - sent
    if r.status_code != 200:
        raise RuntimeError(f"approve failed: {r.status_code} {r.text[:200]}")
    await asyncio.wait_for(waiter, 30)
    if held["body"].get("status") != "done":
        raise RuntimeError(f"approved call ended as {held['body']}")
    return held["at"] - sent, answered


async def tool_time(n: int = 200) -> float:
    async with common.direct_client() as client:
        for _ in range(20):
            await client.call_tool("echo", ECHO_ARGS)
        times = []
        for _ in range(n):
            t = time.perf_counter()
            await client.call_tool("echo", ECHO_ARGS)
            times.append(time.perf_counter() - t)
    return percentile(times, 50)


async def measure(con) -> tuple[list, list, float]:
    tool = await tool_time()
    latencies, answers = [], []
    async with common.async_http(con, 2) as agent, common.async_http(con, 2, con.approver_token) as person:
        await one(agent, person)  # warm-up
        for _ in range(APPROVALS):
            total, answered = await one(agent, person)
            latencies.append(total)
            answers.append(answered)
    return latencies, answers, tool


def run() -> list[Figure]:
    with common.console(common.echo_servers()) as con:
        con.wait_connected("echo")
        latencies, answers, tool = asyncio.run(measure(con))
    p50 = ms(percentile(latencies, 50)) - ms(tool)
    return [
        Figure(
            NAME,
            "approve -> result held, p50 minus tool time",
            p50,
            "ms",
            ms(tool),
            "tool time (direct SDK p50)",
            f"< {TARGET_MS:.0f} ms",
            p50 < TARGET_MS,
            f"{APPROVALS} approvals; raw p50 {ms(percentile(latencies, 50)):.2f} ms",
        ),
        Figure(
            NAME,
            "approve -> result held, p99 minus tool time",
            ms(percentile(latencies, 99)) - ms(tool),
            "ms",
            ms(tool),
            "tool time (direct SDK p50)",
        ),
        Figure(NAME, "approve POST answered, p50", ms(percentile(answers, 50)), "ms"),
    ]
