"""The supervisor's side of SPEC 20 seen from an MCP client of a live console: npm
server-everything over stdio, the SDK's client on the console's `/mcp` (a 2025-11-25 session,
the era that subscribes with `resources/subscribe`). Its prompts and resources are listed, a
prompt get and a resource read run on the server, a completion is answered by it, and its
`notifications/resources/updated` reach the subscribed client within 2 s."""

import time

import anyio
import mcp_types
import pytest

from tests.live import everything_stdio
from tests.mcpclients import in_thread, mcp_client

pytestmark = [pytest.mark.live, pytest.mark.asyncio]

URI = "demo://resource/static/document/architecture.md"


async def test_it_serves_everythings_prompts_resources_completions_and_updates(console):
    c = console({"every": everything_stdio()})
    c.wait_connected("every")
    updated = anyio.Event()

    async def on_message(message):
        if isinstance(message, mcp_types.ResourceUpdatedNotification) and message.params.uri == URI:
            updated.set()

    async with mcp_client(c, mode="legacy", message_handler=on_message) as client:
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert {"every__simple-prompt", "every__args-prompt", "every__completable-prompt"} <= prompts
        uris = {r.uri for r in (await client.list_resources()).resources}
        assert URI in uris
        got = await client.get_prompt("every__args-prompt", {"city": "Oslo"})
        assert "Oslo" in got.messages[0].content.text
        read = await client.read_resource(URI)
        assert read.contents[0].text.startswith("# Everything Server")
        done = await client.complete(
            mcp_types.PromptReference(name="every__completable-prompt"), {"name": "department", "value": "En"}
        )
        assert done.completion.values == ["Engineering"]
        await client.session.send_request(
            mcp_types.SubscribeRequest(params=mcp_types.SubscribeRequestParams(uri=URI)),
            mcp_types.EmptyResult,
        )
        # server-everything sends the update of each subscribed URI once when told to, then
        # every 5 s: the first one must arrive within 2 s.
        r = await in_thread(lambda: c.call("mcp__every__toggle-subscriber-updates", {}, mode="auto"))
        assert r.status_code == 200 and r.json()["status"] == "done", r.text
        started = time.monotonic()
        with anyio.fail_after(2):
            await updated.wait()
        assert time.monotonic() - started < 2
