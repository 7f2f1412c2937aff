"""SPEC 24.3 and 13.3 against a live console: a call an `ask[<group>]` line holds tells the MCP
client `waiting for approval by <group>`, and once the supervisor's own tick has escalated it
(the group's minutes passed: its row is made older), `...; escalated to <other>`; the second
group's approver then decides it."""

import sqlite3

import anyio
import httpx2
import pytest

from tests.live import our_server
from tests.mcpclients import in_thread, mcp_client, wait_pending

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def c(module_console):
    console = module_console({"echo": our_server("echo.py")}, {})
    console.wait_connected("echo")
    for group in (
        {"name": "leads", "people": []},
        {"name": "ops", "people": [], "escalate_to": "leads", "escalate_after_minutes": 1},
    ):
        assert console.post("/v1/groups", group).status_code == 200
    assert console.post("/v1/rules", {"rules": ["ask[ops] mcp__echo__echo"]}).status_code == 200
    return console


def made_older(c, call_id: str) -> None:
    conn = sqlite3.connect(c.data / "db.sqlite3", timeout=20)
    try:
        with conn:
            conn.execute(
                "update mcpcore_toolcall set created_at = datetime(created_at, '-2 minutes') where id = ?",
                (call_id.replace("-", ""),),
            )
    finally:
        conn.close()


def approve_as(c, secret: str, item: dict) -> None:
    path = f"/v1/session/{item['session_id']}/confirm/{item['id']}"
    with httpx2.Client(base_url=c.url, timeout=30, headers={"Authorization": f"Bearer {secret}"}) as http:
        r = http.post(path, json={"approve": True})
    assert r.status_code == 200, r.text


def test_it_tells_the_waiting_client_by_whom_and_once_escalated_to_whom(c):
    messages: list[str] = []

    async def on_progress(value, total, message):
        messages.append(message)

    async def main():
        async with mcp_client(c, "/mcp", "legacy") as client:
            async with anyio.create_task_group() as tg:
                box = {}

                async def call():
                    box["r"] = await client.call_tool(
                        "echo__echo", {"text": "up"}, progress_callback=on_progress
                    )

                tg.start_soon(call)
                item = await wait_pending(c, "mcp__echo__echo")
                with anyio.fail_after(15):
                    while not messages:
                        await anyio.sleep(0.05)
                await in_thread(lambda: made_older(c, item["call_id"]))
                with anyio.fail_after(30):  # the tick looks every 5 s, the heartbeat every 5 s
                    while "escalated" not in messages[-1]:
                        await anyio.sleep(0.1)
                refused = await in_thread(lambda: c.reply(item["session_id"], item["id"], {"approve": True}))
                await in_thread(lambda: approve_as(c, lead, item))
            return item, box["r"], refused

    lead = c.manage("create_token", "lead1", "--role", "approver", "--group", "leads").strip()
    item, result, refused = anyio.run(main)
    # The console's approver token is in neither group.
    assert (refused.status_code, refused.json()) == (403, {"error": "this confirmation is for ops"})
    page = f"/pending/{item['id']}/"
    assert messages[0].startswith("waiting for approval by ops: ") and messages[0].endswith(page)
    assert messages[-1].startswith("waiting for approval by ops; escalated to leads: ")
    assert not result.is_error and result.content[0].text == "up"
