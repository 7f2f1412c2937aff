"""The process wiring (`mcpcore.runtime`) against a live `serve`: the supervisor it hosts is
what every door's call path uses, so a call to a server it holds is recorded already claimed
by it (one INSERT, no second claim), through `/v1` and through `/mcp` alike. (Through the
channel layer the call would still run, but claimed a moment after its INSERT.) And, in
process, the Supervisor has every member of the two interfaces it is reached through."""

import sqlite3

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.live import Console, our_server

pytestmark = pytest.mark.live

ECHO = "mcp__echo__echo"


@pytest.fixture(scope="module")
def c(module_console):
    console = module_console({"echo": our_server("echo.py")}, allow=[ECHO])
    console.wait_connected("echo")
    return console


def _row(c: Console, call_id: str) -> tuple:
    db = sqlite3.connect(f"file:{c.data / 'db.sqlite3'}?mode=ro", uri=True, timeout=20)
    try:
        return db.execute(
            "select status, created_at, started_at, worker from mcpcore_toolcall where id = ?",
            (call_id.replace("-", ""),),
        ).fetchone()
    finally:
        db.close()


def _workers(c: Console) -> list[str]:
    db = sqlite3.connect(f"file:{c.data / 'db.sqlite3'}?mode=ro", uri=True, timeout=20)
    try:
        return [name for (name,) in db.execute("select name from mcpcore_worker")]
    finally:
        db.close()


def test_it_records_a_rest_call_already_claimed_by_the_serving_supervisor(c):
    r = c.call(ECHO, {"text": "here"}, mode="auto")
    assert r.status_code == 200 and r.json()["result"] == "here", r.text
    status, created, started, worker = _row(c, r.json()["call_id"])
    # Claimed in its INSERT: started at the instant it was created, by this process's worker.
    assert (status, started) == ("done", created)
    assert _workers(c) == [worker]


def test_it_records_an_mcp_call_already_claimed_by_the_serving_supervisor(c):
    async def call() -> str:
        headers = {"Authorization": f"Bearer {c.token}"}
        with anyio.fail_after(60):
            async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
                async with Client(streamable_http_client(c.url + "/mcp/echo", http_client=http)) as client:
                    result = await client.call_tool("echo", {"text": "via mcp"})
        return result.content[0].text

    assert anyio.run(call) == "via mcp"
    db = sqlite3.connect(f"file:{c.data / 'db.sqlite3'}?mode=ro", uri=True, timeout=20)
    try:
        (call_id,) = db.execute("select id from mcpcore_toolcall where via = 'mcp'").fetchone()
    finally:
        db.close()
    status, created, started, worker = _row(c, call_id)
    assert (status, started) == ("done", created)
    assert _workers(c) == [worker]


def test_it_waits_on_an_approved_call_through_the_supervisor_running_it(c):
    r = c.call("mcp__echo__add", {"a": 2, "b": 3}, mode="confirm", wait=0)
    assert r.status_code == 202, r.text
    pending = r.json()
    assert c.reply(pending["session_id"], pending["confirm_id"], {"approve": True}).status_code == 200
    r = c.get(f"/v1/mcp/calls/{pending['call_id']}", wait=30)
    assert r.json()["status"] == "done" and r.json()["result"] == "5"
    status, created, started, worker = _row(c, pending["call_id"])
    # Approved later: claimed then (a conditional UPDATE), once, by the same worker.
    assert status == "done" and started > created
    assert _workers(c) == [worker]


def _members(protocol: type) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    return names | {n for n in vars(protocol) if not n.startswith("_")}


@pytest.mark.parametrize("interface", ["calls.LocalSupervisor", "session.SessionHost"])
def test_it_gives_the_supervisor_every_member_of_the_interfaces_it_is_reached_through(interface):
    from mcpcore import calls
    from mcpcore.supervisor import Supervisor, session

    protocol = {"calls.LocalSupervisor": calls.LocalSupervisor, "session.SessionHost": session.SessionHost}[
        interface
    ]
    sup = Supervisor(name="probe")
    missing = sorted(m for m in _members(protocol) if not hasattr(sup, m))
    assert missing == []
    assert "name" in _members(protocol)  # annotations are members too
