"""Prompts, resources and templates kept of each server (SPEC 20.1), prompt gets and resource
reads run by the runner (20.3), completions and resource subscriptions through the holder
(20.2), and the MCP Apps extension declared to servers (20.5).

Two real servers: our `tests/servers/listings.py` (an SDK `MCPServer`, 2026-07-28) in this
process through the SDK's in-memory transport, whose listings a test changes at will; and npm
`server-everything` over stdio (2025-11-25), which subscribes and sends resource updates. The
session around each is the supervisor's own `ServerSession`."""

import contextlib
import json

import anyio
import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from mcp.client._memory import InMemoryTransport

from mcpcore import control, db
from mcpcore.models import Prompt, Resource, ResourceSubscription, ResourceTemplate, Server, Tool, ToolCall
from mcpcore.supervisor import Supervisor, transport
from mcpcore.supervisor.consumer import SupervisorConsumer
from mcpcore.supervisor.session import ServerSession
from tests.live import await_until, everything_stdio, our_server
from tests.rows import claimed_call, write_servers
from tests.servers.listings import Listings

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

NAME = "lst"


@contextlib.asynccontextmanager
async def holding(agenvoy_home, monkeypatch, server: Listings | None = None, name: str = NAME, config=None):
    """A supervisor (not started: no loops, no leases) holding one server's session, connected
    when this yields: `server` in process, else `config` (default server-everything, stdio)."""
    if server is not None:
        config = {"url": "http://in-process.invalid/mcp"}
    config = config or everything_stdio()
    await sync_to_async(write_servers)(agenvoy_home, {name: config})
    if server is not None:
        monkeypatch.setattr(transport, "make_target", lambda *_a, **_kw: InMemoryTransport(server.mcp))
    sup = Supervisor(exclusive=False, name="w1")
    session = sup.sessions[name] = ServerSession(sup, name)
    session.start()
    try:
        with anyio.fail_after(30):
            await session.ready.wait()
        yield sup
    finally:
        await sup.stop()


async def joined(group: str) -> str:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    return channel


async def received(channel: str, within: float, **match) -> dict:
    """The first message on `channel` whose items include `match`, within `within` seconds."""
    layer = get_channel_layer()
    with anyio.fail_after(within):
        while True:
            message = await layer.receive(channel)
            if all(message.get(k) == v for k, v in match.items()):
                return message


def rows(model, **filters) -> list:
    return list(model.objects.filter(**filters).order_by("position").values())


async def run(sup: Supervisor, kind: str, tool_name: str, tool: str, arguments: dict, server: str = NAME):
    """Record a call of `kind` claimed by `sup` and run it there, as an approved call is run."""
    call = await claimed_call(sup.name, server, tool, arguments, kind=kind, tool_name=tool_name)
    with anyio.fail_after(30):
        stored = await sup.run(call)
    assert stored is not None
    return await db.run(ToolCall.objects.get, id=call.id)


async def test_it_registers_prompts_resources_and_templates_at_connect(agenvoy_home, monkeypatch):
    async with holding(agenvoy_home, monkeypatch, Listings()):
        prompts = await db.run(rows, Prompt, server__name=NAME)
        resources = await db.run(rows, Resource, server__name=NAME)
        templates = await db.run(rows, ResourceTemplate, server__name=NAME)
        server = await db.run(Server.objects.get, name=NAME)
    assert [(p["name"], p["registered_name"], p["title"], p["description"]) for p in prompts] == [
        ("greet", "mcp__lst__greet", "Greeting", "Greets someone.")
    ]
    assert [(a["name"], a.get("required")) for a in prompts[0]["arguments"]] == [
        ("name", True),
        ("mood", False),
    ]
    assert [(r["uri"], r["name"], r["mime_type"]) for r in resources] == [
        ("listings://static/readme", "readme", "text/plain"),
        ("listings://static/logo", "logo", "image/png"),
    ]
    assert resources[0]["title"] == "Read me"
    assert [(t["uri_template"], t["name"], t["description"]) for t in templates] == [
        ("listings://item/{item}", "item", "One item.")
    ]
    assert server.prompt_signature and server.resource_signature and server.warnings == []
    assert await db.run(Tool.objects.filter(server__name=NAME).count) == 3  # the tools as before


async def test_it_declares_the_mcp_ui_extension_to_servers(agenvoy_home, monkeypatch):
    async with holding(agenvoy_home, monkeypatch, Listings()) as sup:
        call = await run(sup, "tool_confirm", "mcp__lst__client_extensions", "client_extensions", {})
    assert call.status == "done", call.result
    assert json.loads(call.result) == {
        "io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}
    }


async def test_it_registers_again_on_the_list_changed_of_each_kind(agenvoy_home, monkeypatch, settings):
    settings.AGENVOY_POLL_SECONDS = 3600
    server = Listings()
    status = await joined(control.STATUS)
    async with holding(agenvoy_home, monkeypatch, server):
        await received(status, 5, type="status.changed", server=NAME)
        await await_until(server.listening, 5, what="the listen stream open")
        server.add_prompt("later")
        await server.announce_prompts()
        await await_until(
            lambda: Prompt.objects.filter(registered_name="mcp__lst__later").exists(),
            2,
            what="prompt registered",
        )
        await received(status, 2, type="status.changed", server=NAME)
        server.add_resource("listings://static/fresh")
        await server.announce_resources()
        await await_until(
            lambda: Resource.objects.filter(uri="listings://static/fresh").exists(),
            2,
            what="resource registered",
        )
        await received(status, 2, type="status.changed", server=NAME)


async def test_it_registers_again_on_2025_list_changed_notifications(agenvoy_home, monkeypatch, settings):
    settings.AGENVOY_POLL_SECONDS = 3600
    legacy = our_server("listings.py", env={"LISTINGS_LEGACY": "1"})
    async with holding(agenvoy_home, monkeypatch, config=legacy) as sup:
        assert sup.sessions[NAME].protocol.startswith("2025")
        assert await db.run(Prompt.objects.filter(server__name=NAME).count) == 1
        added = await run(sup, "tool_confirm", "mcp__lst__change", "change", {"kind": "prompt", "name": "p2"})
        assert added.status == "done", added.result
        await await_until(lambda: Prompt.objects.filter(name="p2").exists(), 2, what="prompt registered")
        await run(sup, "tool_confirm", "mcp__lst__change", "change", {"kind": "resource", "name": "r2"})
        await await_until(
            lambda: Resource.objects.filter(uri="listings://static/r2").exists(),
            2,
            what="resource registered",
        )


async def test_it_keeps_tools_meta_and_stores_a_meta_only_change_at_the_poll(
    agenvoy_home, monkeypatch, settings
):
    settings.AGENVOY_POLL_SECONDS = 0.5
    server = Listings()
    async with holding(agenvoy_home, monkeypatch, server):
        ping = await db.run(Tool.objects.get, registered_name="mcp__lst__ping")
        assert ping.meta == {"ui": {"resourceUri": "ui://listings/app.html", "visibility": ["app"]}}
        signature = await db.run(lambda: Server.objects.get(name=NAME).signature)
        server.set_ping_meta({"ui/resourceUri": "ui://listings/other.html"})
        await await_until(
            lambda: (
                Tool.objects.get(registered_name="mcp__lst__ping").meta
                == {"ui/resourceUri": "ui://listings/other.html"}
            ),
            10,
            what="the poll stored the new _meta",
        )
        assert await db.run(lambda: Server.objects.get(name=NAME).signature) == signature  # SPEC 6's


async def test_it_picks_up_new_prompts_and_resources_at_the_poll(agenvoy_home, monkeypatch, settings):
    settings.AGENVOY_POLL_SECONDS = 0.5
    server = Listings()
    async with holding(agenvoy_home, monkeypatch, server):
        server.add_prompt("quiet")
        server.add_resource("listings://static/quiet")
        await await_until(
            lambda: (
                Prompt.objects.filter(name="quiet").exists()
                and Resource.objects.filter(uri="listings://static/quiet").exists()
            ),
            10,
            what="the poll registered them",
        )


async def test_it_registers_them_again_at_reconnect(agenvoy_home, monkeypatch, settings):
    settings.AGENVOY_POLL_SECONDS = 3600
    server = Listings()
    async with holding(agenvoy_home, monkeypatch, server) as sup:
        server.add_prompt("unannounced")
        server.add_resource("listings://static/unannounced")
        with anyio.fail_after(30):
            assert await sup.sessions[NAME].reconnect() == "connected"
        assert await db.run(Prompt.objects.filter(name="unannounced").exists)
        assert await db.run(Resource.objects.filter(uri="listings://static/unannounced").exists)


async def test_it_keeps_the_tools_and_warns_when_prompts_list_fails(agenvoy_home, monkeypatch, settings):
    settings.AGENVOY_POLL_SECONDS = 0.5
    server = Listings()
    server.failing["prompts/list"] = "prompts are broken today"
    async with holding(agenvoy_home, monkeypatch, server):
        row = await db.run(Server.objects.get, name=NAME)
        assert row.warnings == ["prompts/list failed: prompts are broken today"]
        assert row.state == "connected"
        assert await db.run(Tool.objects.filter(server__name=NAME).count) == 3
        assert await db.run(Resource.objects.filter(server__name=NAME).count) == 2
        assert await db.run(Prompt.objects.filter(server__name=NAME).count) == 0
        del server.failing["prompts/list"]
        await await_until(
            lambda: (
                Server.objects.filter(name=NAME, warnings=[]).exists()
                and Prompt.objects.filter(server__name=NAME).exists()
            ),
            10,
            what="the poll cleared the warning",
        )
        # A failure later keeps what was registered, with the warning.
        server.failing["resources/templates/list"] = "templates down"
        await await_until(
            lambda: (
                Server.objects.filter(name=NAME).values_list("warnings", flat=True).first()
                == ["resources/templates/list failed: templates down"]
            ),
            10,
        )
        assert await db.run(ResourceTemplate.objects.filter(server__name=NAME).count) == 1


async def test_it_takes_a_missing_templates_method_for_no_templates(agenvoy_home, monkeypatch):
    server = Listings()
    server.missing.add("resources/templates/list")
    async with holding(agenvoy_home, monkeypatch, server):
        row = await db.run(Server.objects.get, name=NAME)
        assert row.warnings == []
        assert await db.run(Resource.objects.filter(server__name=NAME).count) == 2
        assert await db.run(ResourceTemplate.objects.filter(server__name=NAME).count) == 0


async def test_it_runs_prompt_gets_and_resource_reads_and_stores_both_shapes(agenvoy_home, monkeypatch):
    async with holding(agenvoy_home, monkeypatch, Listings()) as sup:
        prompt = await run(sup, "prompt", "mcp__lst__greet", "greet", {"name": "Ann"})
        text = await run(sup, "resource", "listings://static/readme", "", {"uri": "listings://static/readme"})
        blob = await run(sup, "resource", "listings://static/logo", "", {"uri": "listings://static/logo"})
        item = await run(sup, "resource", "listings://item/7", "", {"uri": "listings://item/7"})
    assert (prompt.status, prompt.is_error, prompt.result) == ("done", False, "user: Hello Ann, I am glad.")
    assert prompt.native_result["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "Hello Ann, I am glad."}}
    ]
    assert (text.status, text.result) == ("done", "the readme")
    assert text.native_result["contents"][0]["uri"] == "listings://static/readme"
    assert blob.result == "[blob image/png, 12 bytes]" and "blob" in blob.native_result["contents"][0]
    assert item.result == "item 7"
    assert text.via == "rest"  # stored whatever `via`


async def test_it_stores_the_servers_json_rpc_error_of_a_prompt_or_read(agenvoy_home, monkeypatch):
    async with holding(agenvoy_home, monkeypatch, Listings()) as sup:
        unknown = await run(sup, "prompt", "mcp__lst__nope", "nope", {})
        missing = await run(sup, "prompt", "mcp__lst__greet", "greet", {})
        absent = await run(sup, "resource", "listings://none", "", {"uri": "listings://none"})
    for call in (unknown, missing, absent):
        assert call.status == "error" and call.is_error
        error = call.native_result["error"]
        assert set(error) == {"code", "message"} and isinstance(error["code"], int)
        assert call.result == error["message"]
    # The SDK's MCPServer answers an unknown prompt or a missing argument with a bare internal
    # error, an unknown resource with -32602 and the URI: kept as the server said it.
    assert unknown.native_result == {"error": {"code": -32603, "message": "Internal server error"}}
    assert absent.native_result == {"error": {"code": -32602, "message": "Unknown resource: listings://none"}}


async def test_it_answers_a_completion_through_server_complete(agenvoy_home, monkeypatch):
    async with holding(agenvoy_home, monkeypatch, Listings()) as sup:
        layer = get_channel_layer()
        reply = await layer.new_channel()
        consumer = SupervisorConsumer(sup)
        await consumer.server_complete(
            {
                "type": "server.complete",
                "server": NAME,
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "name", "value": "al"},
                "context": None,
                "reply": reply,
            }
        )
        answer = await received(reply, 10, type="complete.done")
        await consumer.server_complete(
            {
                "type": "server.complete",
                "server": "gone",
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "name", "value": "al"},
                "reply": reply,
            }
        )
        refused = await received(reply, 10, type="complete.done")
    assert answer["result"]["completion"]["values"] == ["alice", "albert"]
    assert refused["error"]["message"] == "server gone is not connected: not held by this worker"


async def test_it_follows_subscriptions_on_the_2026_listen_stream(agenvoy_home, monkeypatch):
    server = Listings()
    resources = await joined(control.RESOURCES)
    async with holding(agenvoy_home, monkeypatch, server) as sup:
        session = sup.sessions[NAME]
        await db.run(ResourceSubscription.objects.create, server_name=NAME, uri="listings://static/readme")
        await SupervisorConsumer(sup).resource_subscribe({"type": "resource.subscribe", "server": NAME})
        await await_until(lambda: session.subscriptions.subscribed == {"listings://static/readme"}, 5)
        # The stream is opened again with the URI: publish until one arrives (the re-open
        # has no signal of its own), each wait bounded.
        message = None
        with anyio.fail_after(10):
            while message is None:
                await server.updated("listings://static/readme")
                with contextlib.suppress(TimeoutError):
                    message = await received(resources, 0.3, type="resource.updated")
    assert message == {"type": "resource.updated", "server": NAME, "uri": "listings://static/readme"}


async def test_it_registers_everythings_listings_and_forwards_its_resource_updates(agenvoy_home, monkeypatch):
    uri = "demo://resource/static/document/architecture.md"
    resources = await joined(control.RESOURCES)
    async with holding(agenvoy_home, monkeypatch, None, name="every") as sup:
        session = sup.sessions["every"]
        assert session.protocol.startswith("2025")
        assert await db.run(Prompt.objects.filter(server__name="every").count) == 4
        assert await db.run(Resource.objects.filter(server__name="every").count) == 7
        assert await db.run(ResourceTemplate.objects.filter(server__name="every").count) == 2
        names = await db.run(lambda: set(Prompt.objects.values_list("registered_name", flat=True)))
        assert {"mcp__every__simple-prompt", "mcp__every__args-prompt"} <= names
        await db.run(ResourceSubscription.objects.create, server_name="every", uri=uri)
        await SupervisorConsumer(sup).resource_subscribe({"type": "resource.subscribe", "server": "every"})
        await await_until(lambda: session.subscriptions.subscribed == {uri}, 10)
        toggled = await run(
            sup,
            "tool_confirm",
            "mcp__every__toggle-subscriber-updates",
            "toggle-subscriber-updates",
            {},
            "every",
        )
        assert toggled.status == "done", toggled.result
        message = await received(resources, 2, type="resource.updated")
        assert message == {"type": "resource.updated", "server": "every", "uri": uri}
        prompt = await run(sup, "prompt", "mcp__every__args-prompt", "args-prompt", {"city": "Oslo"}, "every")
        read = await run(sup, "resource", uri[:700], "", {"uri": uri}, "every")
        absent = await run(sup, "resource", "demo://nope", "", {"uri": "demo://nope"}, "every")
    assert prompt.status == "done" and prompt.result.startswith("user: ") and "Oslo" in prompt.result
    assert read.status == "done" and read.result.startswith("# Everything Server")
    assert absent.status == "error" and absent.native_result["error"]["code"] in (-32002, -32602, -32603)
