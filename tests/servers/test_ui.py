"""The ui test server (tests/servers/ui.py) on its own, driven by the SDK's `Client` with no
console, in both protocol eras over stdio and over streamable HTTP: what it lists (the app's
`ui://` page left out), what it reads, completes and refuses, and its notifications."""

import os
import sys
import warnings

import anyio
import mcp_types
import pytest
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters
from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ResourceUpdated
from mcp_types import PromptReference, ResourceTemplateReference

from tests.live import SERVERS, await_until, over_http

ERAS = ["legacy", "auto"]  # the 2025-11-25 handshake, and 2026-07-28 (what auto picks here)


def stdio(*args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=[str(SERVERS / "ui.py"), *args], env=dict(os.environ)
    )


@pytest.mark.parametrize("mode", ERAS)
def test_it_lists_reads_and_completes_everything_it_offers(mode):
    async def scenario():
        with anyio.fail_after(30):
            async with Client(stdio("--name", "a"), mode=mode) as client:
                caps = client.server_capabilities
                assert caps.prompts.list_changed and caps.resources.subscribe and caps.resources.list_changed
                assert caps.completions is not None
                resources = (await client.list_resources()).resources
                assert [r.uri for r in resources] == ["test://a/counter", "test://a/kib", "test://shared"]
                templates = (await client.list_resource_templates()).resource_templates
                assert [t.uri_template for t in templates] == ["test://a/items/{item}"]
                tools = {t.name: t.meta for t in (await client.list_tools()).tools}
                assert tools["show_app"] == {"ui": {"resourceUri": "ui://a/app.html"}}
                assert tools["app_refresh"] == {
                    "ui": {"resourceUri": "ui://a/app.html", "visibility": ["app"]}
                }
                assert tools["legacy_app"] == {"ui/resourceUri": "ui://a/app.html"}
                prompts = {p.name: p for p in (await client.list_prompts()).prompts}
                assert set(prompts) == {"greet", "hello"} and prompts["hello"].arguments == []
                assert [(a.name, a.required) for a in prompts["greet"].arguments] == [
                    ("who", True),
                    ("style", False),
                ]

                app = (await client.read_resource("ui://a/app.html")).contents[0]
                assert app.mime_type == "text/html;profile=mcp-app" and "a app" in app.text
                assert (await client.read_resource("test://a/kib")).contents[0].text == "k" * 1024
                assert (await client.read_resource("test://a/items/pear")).contents[
                    0
                ].text == "item pear of a"
                assert (await client.read_resource("test://shared")).contents[0].text == "shared from a"
                got = await client.get_prompt("greet", {"who": "Ada"})
                assert got.messages[0].content.text == "Hello Ada, from a (plain)."

                who = await client.complete(PromptReference(name="greet"), {"name": "who", "value": "g"})
                assert who.completion.values == ["Grace", "Guido"]
                ref = ResourceTemplateReference(uri="test://a/items/{item}")
                items = await client.complete(ref, {"name": "item", "value": "ap"})
                assert items.completion.values == ["apple", "apricot"]
                none = await client.complete(PromptReference(name="hello"), {"name": "x", "value": ""})
                assert none.completion.values == []

                with pytest.raises(MCPError) as missing:
                    await client.get_prompt("greet", {})
                assert (missing.value.error.code, missing.value.error.message) == (
                    -32602,
                    "a: greet needs the argument who",
                )
                with pytest.raises(MCPError):
                    await client.read_resource("test://a/nothing")

    anyio.run(scenario)


def test_it_tells_a_2025_subscriber_and_session_what_changed():
    got: list = []

    async def on_message(message):
        got.append(message)

    async def scenario():
        with anyio.fail_after(30):
            async with Client(stdio("--name", "a"), mode="legacy", message_handler=on_message) as client:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # resources/subscribe is the 2025 way: deprecated
                    await client.subscribe_resource("test://a/counter")
                assert (await client.call_tool("bump", {})).structured_content == {"result": 1}
                await client.call_tool("add_prompt", {"name": "later"})
                await client.call_tool("add_resource", {"name": "more"})

                want = {
                    mcp_types.ResourceUpdatedNotification,
                    mcp_types.PromptListChangedNotification,
                    mcp_types.ResourceListChangedNotification,
                }
                await await_until(lambda: want <= {type(m) for m in got}, 10, what="the three notifications")
                updated = [m for m in got if isinstance(m, mcp_types.ResourceUpdatedNotification)]
                assert updated[0].params.uri == "test://a/counter"
                assert (await client.read_resource("test://a/counter")).contents[0].text == "count=1"
                assert "later" in {p.name for p in (await client.list_prompts()).prompts}
                uris = {r.uri for r in (await client.list_resources()).resources}
                assert "test://a/extra/more" in uris

    anyio.run(scenario)


def test_it_tells_a_2026_listener_what_changed():
    async def scenario():
        with anyio.fail_after(30):
            async with Client(stdio("--name", "a"), mode="auto") as client:
                listen = client.listen(
                    prompts_list_changed=True,
                    resources_list_changed=True,
                    resource_subscriptions=["test://a/counter"],
                )
                async with listen as sub:
                    await client.call_tool("bump", {})
                    await client.call_tool("add_prompt", {"name": "later"})
                    await client.call_tool("add_resource", {"name": "more"})
                    seen: set = set()
                    async for event in sub:
                        seen.add(event)
                        if {
                            ResourceUpdated(uri="test://a/counter"),
                            PromptsListChanged(),
                            ResourcesListChanged(),
                        } <= seen:
                            break

    anyio.run(scenario)


def test_it_serves_streamable_http_with_a_configured_shared_uri():
    async def scenario(url, mode):
        with anyio.fail_after(30):
            async with Client(url, mode=mode) as client:
                uris = [r.uri for r in (await client.list_resources()).resources]
                assert uris == ["test://b/counter", "test://b/kib", "test://elsewhere"]
                assert (await client.read_resource("test://elsewhere")).contents[0].text == "shared from b"
                assert (await client.call_tool("whoami", {})).content[0].text == "b"

    with over_http(
        "ui.py", "--name", "b", "--shared", "test://elsewhere", port_variable="MCP_UI_PORT"
    ) as url:
        for mode in ERAS:
            anyio.run(scenario, url, mode)
