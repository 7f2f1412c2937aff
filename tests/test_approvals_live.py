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


def test_it_keeps_a_waiting_mcp_call_past_its_old_expiry_once_extended(c):
    """The MCP call waits from before the extension: its wait must read the new expiry, and so
    must the supervisor's sweep; then an approval still runs it."""
    box = {}

    async def main():
        async with anyio.create_task_group() as tg:

            async def run():
                async with mcp_client(c, "/mcp", "legacy", token=c.client_for("agent").headers["Authorization"][7:]) as client:
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
