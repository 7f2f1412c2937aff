"""SPEC 24.4-24.6 against a real `manage.py serve` and the echo test server, through the doors
agents use (the MCP SDK's client, /v1): an extension holds for a call already waiting."""

import anyio
import pytest

from tests.live import our_server
from tests.mcpclients import in_thread, mcp_client, wait_pending

pytestmark = pytest.mark.live

TIMEOUT = 3  # AGENVOY_CONFIRM_TIMEOUT of the console: an extension is seen within seconds


@pytest.fixture(scope="module")
def c(module_console):
    console = module_console({"echo": our_server("echo.py")}, {"AGENVOY_CONFIRM_TIMEOUT": str(TIMEOUT)})
    console.wait_connected("echo")
    return console


def agent_token(c) -> str:
    """A new agent token's secret (replies come from the approver: no token answers its own)."""
    client = c.client_for("agent")
    client.close()
    return client.headers["Authorization"].removeprefix("Bearer ")


def test_it_keeps_a_waiting_mcp_call_past_its_old_expiry_once_extended(c):
    """The MCP call waits from before the extension: its wait must read the new expiry, and so
    must the supervisor's sweep; then an approval still runs it."""
    box = {}

    async def main():
        async with anyio.create_task_group() as tg:

            async def run():
                async with mcp_client(c, "/mcp", "legacy", token=agent_token(c)) as client:
                    box["result"] = await client.call_tool("echo__echo", {"text": "still here"})

            tg.start_soon(run)
            item = await wait_pending(c, "mcp__echo__echo", 10)
            call_url = f"/v1/mcp/calls/{item['call_id']}"
            # Until a second before its first expiry (a bounded wait on the call, no sleep).
            waited = await in_thread(lambda: c.approver.get(call_url, params={"wait": TIMEOUT - 1}).json())
            assert waited["status"] == "pending"
            r = await in_thread(lambda: c.approver.post(f"/v1/pending/{item['id']}/extend"))
            assert r.status_code == 200 and r.json()["expires_at"] > item["expires_at"], r.text
            # Across the old expiry: the MCP call's wait and the sweep both pass it.
            waited = await in_thread(lambda: c.approver.get(call_url, params={"wait": 2}).json())
            assert waited["status"] == "pending", waited
            r = await in_thread(lambda: c.reply(item["session_id"], item["id"], {"approve": True}))
            assert r.status_code == 200, r.text
        return box["result"]

    result = anyio.run(main)
    assert not result.is_error and result.content[0].text == "still here"


def test_it_runs_changed_arguments_on_the_server_and_says_so_to_a_rest_agent(c):
    agent = c.client_for("agent", "rest-agent")
    r = agent.post(
        "/v1/mcp/call", json={"name": "mcp__echo__echo", "arguments": {"text": "as asked"}, "wait": 0}
    )
    body = r.json()
    reply = c.reply(
        body["session_id"], body["confirm_id"], {"approve": True, "arguments": {"text": "as changed"}}
    )
    assert reply.status_code == 200, reply.text
    done = agent.get(f"/v1/mcp/calls/{body['call_id']}", params={"wait": 20}).json()
    agent.close()
    # The echo server answers the text it was given: it got the changed arguments.
    notice = 'Approved with changed arguments by token:tests-approver: {"text":"as changed"}'
    assert done["status"] == "done" and done["result"] == f"{notice}\nas changed"
    assert done["arguments"] == {"text": "as changed"} and done["requested_arguments"] == {"text": "as asked"}
    assert done["edited_by"] == "token:tests-approver"


def test_it_runs_changed_arguments_and_says_so_to_an_mcp_client(c):
    box = {}

    async def main():
        async with anyio.create_task_group() as tg:

            async def run():
                async with mcp_client(c, "/mcp", "legacy", token=agent_token(c)) as client:
                    box["result"] = await client.call_tool("echo__echo", {"text": "rm -rf /"})

            tg.start_soon(run)
            item = await wait_pending(c, "mcp__echo__echo", 10)
            r = await in_thread(
                lambda: c.reply(
                    item["session_id"], item["id"], {"approve": True, "arguments": {"text": "ls"}}
                )
            )
            assert r.status_code == 200, r.text

    anyio.run(main)
    result = box["result"]
    texts = [item.text for item in result.content]
    assert not result.is_error
    assert texts == ['Approved with changed arguments by token:tests-approver: {"text":"ls"}', "ls"]
