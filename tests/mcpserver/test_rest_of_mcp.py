"""Prompts, resources, completions, subscriptions and apps on a live console's MCP endpoints
(SPEC 20.2, 20.3, 20.5), with clients nobody here wrote: the SDK's `Client` in both protocol
eras and the TypeScript SDK's client (tests/mcp_ts_client.mjs), against npm
`@modelcontextprotocol/server-everything`, two instances of tests/servers/ui.py (`a` over
stdio, `b` over streamable HTTP) that both list `test://shared`, and tests/servers/listings.py
built without a completion handler (`plain`)."""

import os
import sqlite3
import sys
import time
import uuid
import warnings

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters
from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ResourceUpdated
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    PromptReference,
    ResourceTemplateReference,
)

from tests.live import (
    SERVERS,
    await_until,
    everything_stdio,
    our_server,
    over_http,
    rules,
    signed_in,
    wait_until,
)
from tests.mcpclients import TsClient, in_thread, mcp_client

pytestmark = pytest.mark.live

MODERN = "2026-07-28"
ERAS = ["legacy", "auto"]  # the 2025-11-25 handshake, and 2026-07-28 (what auto picks here)
NOT_FOUND = {"legacy": -32002, "auto": -32602}  # "resource not found" by era (SPEC 20.2)
SHARED = "test://shared"
COLLISION = f"resource {SHARED} is served by more than one server: read it on /mcp/a or /mcp/b"
APP = "text/html;profile=mcp-app"
EVERY_DOCS = "demo://resource/static/document/"
VIEWS = {
    # `a` whole (its prompts and resources are in it), one tool of `every` (its are not).
    "apps": {"name": "apps", "include": ["mcp__a__*", "mcp__every__echo"]},
    # `a` less one tool: no longer whole, so none of its prompts or resources.
    "cut": {"name": "cut", "include": ["mcp__a__*"], "exclude": ["mcp__a__bump"]},
}


@pytest.fixture(scope="module")
def b_url():
    """`ui.py --name b` over streamable HTTP, started here as a remote server would be."""
    with over_http("ui.py", "--name", "b", port_variable="MCP_UI_PORT") as url:
        yield url


@pytest.fixture(scope="module")
def c(b_url, module_console):  # b set up first, so it stops after the console (no lost-server noise)
    servers = {
        "every": everything_stdio(),
        "a": our_server("ui.py", "--name", "a"),
        "b": {"type": "http", "url": b_url},
        "plain": our_server("listings.py", env={"LISTINGS_NO_COMPLETIONS": "1"}),
    }
    env = {"AGENVOY_CALL_TIMEOUT": "10", "AGENVOY_CONFIRM_TIMEOUT": "15"}
    console = module_console(servers, env, allow=["mcp__every__*", "mcp__a__*", "mcp__b__*"])
    console.wait_connected("every", "a", "b", "plain")
    for view in VIEWS.values():
        assert console.post("/v1/views", view).status_code == 200
    # Connected is not yet listed: wait for the prompts and resources of all four on /mcp.
    want = {"a__greet", "b__greet", "every__simple-prompt", "plain__greet"}
    wait_until(lambda: want <= prompt_names(console, "/mcp"), 30)
    wait_until(lambda: {"test://a/kib", "test://b/kib"} <= uris(console, "/mcp"), 30)
    return console


@pytest.fixture(scope="module")
def direct():
    """What `ui.py --name a` itself lists and answers, asked over stdio with no console."""

    async def main():
        params = StdioServerParameters(
            command=sys.executable, args=[str(SERVERS / "ui.py"), "--name", "a"], env=dict(os.environ)
        )
        async with Client(params, mode="auto") as client:
            return {
                "prompts": {p.name: p for p in (await client.list_prompts()).prompts},
                "resources": {r.uri: r for r in (await client.list_resources()).resources},
                "templates": {
                    t.uri_template: t for t in (await client.list_resource_templates()).resource_templates
                },
                "tools": {t.name: t for t in (await client.list_tools()).tools},
                "app": (await client.read_resource("ui://a/app.html")).contents[0],
            }

    return anyio.run(main)


@pytest.fixture(scope="module")
def web(c):
    """A person signed in to the console's pages."""
    client = signed_in(c, "historian")
    yield client
    client.close()


@pytest.fixture(scope="module")
def bot(c) -> str:
    """A token limited to the view `apps`, made as an operator would."""
    return c.manage("create_token", "bot", "--view", "apps").strip()


# --- helpers ----------------------------------------------------------------------------------


def on(c, path: str, mode: str, scenario, token: str | None = None, message_handler=None):
    """Run `scenario(client)` with an SDK client on `path` in `mode`; its answer."""

    async def main():
        with anyio.fail_after(60):
            async with mcp_client(c, path, mode, token=token, message_handler=message_handler) as client:
                return await scenario(client)

    return anyio.run(main)


async def refusal(awaitable) -> tuple[int, str]:
    with pytest.raises(MCPError) as caught:
        await awaitable
    return caught.value.error.code, caught.value.error.message


def prompt_names(c, path: str, mode: str = "auto", token: str | None = None) -> set[str]:
    async def names(client):
        return {p.name for p in (await client.list_prompts()).prompts}

    return on(c, path, mode, names, token)


def uris(c, path: str, mode: str = "auto", token: str | None = None) -> set[str]:
    async def listed(client):
        return {r.uri for r in (await client.list_resources()).resources}

    return on(c, path, mode, listed, token)


def db_calls(c, kind: str) -> list[str]:
    """Ids of the calls of `kind` made through an MCP endpoint, newest first."""
    conn = sqlite3.connect(f"file:{c.data / 'db.sqlite3'}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "select id from mcpcore_toolcall where via = 'mcp' and kind = ? order by created_at desc", (kind,)
        ).fetchall()
    finally:
        conn.close()
    return [str(uuid.UUID(r[0])) for r in rows]


def pending_of(c, kind: str, tool_name: str) -> list[dict]:
    return [
        p for p in c.get("/v1/pending").json()["pending"] if p["kind"] == kind and p["tool_name"] == tool_name
    ]


def held(c, mode: str, ask, kind: str, tool_name: str, reply: dict | None):
    """Start `ask(client)` on `/mcp` in `mode`; once its item (`kind`, `tool_name`) is in the
    inbox, answer it with `reply` (None: let it expire). (the item, what the client got: a
    result or the (code, message) of its error)."""

    async def scenario(client):
        box: dict = {}
        async with anyio.create_task_group() as tg:

            async def run():
                try:
                    box["got"] = await ask(client)
                except MCPError as exc:
                    box["got"] = (exc.error.code, exc.error.message)

            tg.start_soon(run)
            items = await in_thread(
                lambda: wait_until(lambda: pending_of(c, kind, tool_name), 15, what=f"{tool_name} pending")
            )
            box["item"] = items[0]
            if reply is not None:
                r = await in_thread(lambda: c.reply(items[0]["session_id"], items[0]["id"], reply))
                assert r.status_code == 200, r.text
        return box["item"], box["got"]

    return on(c, "/mcp", mode, scenario)


# --- SPEC 20.2: what every endpoint declares and lists ---------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
def test_it_declares_prompts_resources_and_completions_on_every_endpoint(c, mode):
    async def caps(client):
        return client.server_capabilities

    for path in ("/mcp", "/mcp/a", "/mcp/b", "/mcp/every", "/mcp/v/apps"):
        got = on(c, path, mode, caps)
        assert got.prompts is not None and got.prompts.list_changed, path
        assert got.resources is not None and got.resources.subscribe and got.resources.list_changed, path
        assert got.completions is not None, path


@pytest.mark.parametrize("mode", ERAS)
def test_it_names_prompts_as_tools_are_and_keeps_what_the_server_gave(c, direct, mode):
    async def listed(client):
        return {p.name: p for p in (await client.list_prompts()).prompts}

    everything = on(c, "/mcp", mode, listed)
    assert {"a__greet", "a__hello", "b__greet", "b__hello"} <= set(everything)
    assert {"every__simple-prompt", "every__args-prompt", "every__completable-prompt"} <= set(everything)
    assert all(n.split("__")[0] in ("a", "b", "every", "plain") for n in everything), sorted(everything)
    own = on(c, "/mcp/a", mode, listed)
    assert set(own) == {"greet", "hello"}
    view = on(c, "/mcp/v/apps", mode, listed)
    assert set(view) == {"a__greet", "a__hello"}
    for got in (everything["a__greet"], own["greet"], view["a__greet"]):
        want = direct["prompts"]["greet"]
        assert (
            (got.title, got.description) == (want.title, want.description) == ("Greeting", "Greet someone.")
        )
        assert got.arguments == want.arguments
    # `hello` has none: the server sends `"arguments": []`, and so must every endpoint.
    for got in (everything["a__hello"], own["hello"], view["a__hello"]):
        assert got.arguments == direct["prompts"]["hello"].arguments == []


@pytest.mark.parametrize("mode", ERAS)
def test_it_lists_resources_and_templates_with_uris_unchanged_and_names_prefixed(c, direct, mode):
    async def listed(client):
        resources = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
        return {r.uri: r for r in resources}, {t.uri_template: t for t in templates}

    resources, templates = on(c, "/mcp", mode, listed)
    assert {"test://a/counter", "test://a/kib", "test://b/counter", "test://b/kib"} <= set(resources)
    assert sum(u.startswith(EVERY_DOCS) for u in resources) == 7
    # Claimed by a and b both: listed for neither. The apps' pages are listed by no server.
    assert SHARED not in resources and not any(u.startswith("ui://") for u in resources)
    assert resources["test://a/kib"].name == "a__kib" and resources["test://b/kib"].name == "b__kib"
    assert all(r.name.startswith("every__") for u, r in resources.items() if u.startswith(EVERY_DOCS))
    kib, want = resources["test://a/kib"], direct["resources"]["test://a/kib"]
    assert (
        (kib.description, kib.mime_type)
        == (want.description, want.mime_type)
        == ("1 KiB of text.", "text/plain")
    )
    assert (
        templates["test://a/items/{item}"].name == "a__item"
        and templates["test://b/items/{item}"].name == "b__item"
    )
    assert templates["demo://resource/dynamic/text/{resourceId}"].name.startswith("every__")

    own, own_templates = on(c, "/mcp/a", mode, listed)
    assert set(own) == {"test://a/counter", "test://a/kib", SHARED}  # one server: nothing collides
    assert own["test://a/kib"].name == "kib" and own[SHARED].name == "shared"
    assert (
        set(own_templates) == {"test://a/items/{item}"}
        and own_templates["test://a/items/{item}"].name == "item"
    )

    view, view_templates = on(c, "/mcp/v/apps", mode, listed)
    assert set(view) == {"test://a/counter", "test://a/kib", SHARED}
    assert view["test://a/kib"].name == "a__kib" and set(view_templates) == {"test://a/items/{item}"}


# --- SPEC 20.2: gets and reads routed -----------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
def test_it_routes_reads_by_listed_uri_template_and_a_tools_ui_resource(c, direct, mode):
    async def reads(client):
        return [
            (await client.read_resource("test://a/kib")).contents,  # listed by a
            (await client.read_resource("test://b/items/pear")).contents,  # b's template
            (await client.read_resource("ui://a/app.html")).contents,  # only a's tools name it
            (await client.read_resource("ui://b/app.html")).contents,
            (await client.read_resource("demo://resource/dynamic/text/1")).contents,  # every's template
        ]

    kib, item, app, app_b, demo = on(c, "/mcp", mode, reads)
    assert [(x.uri, x.mime_type, x.text) for x in kib] == [("test://a/kib", "text/plain", "k" * 1024)]
    assert item[0].text == "item pear of b"
    assert (app[0].uri, app[0].mime_type, app[0].text) == ("ui://a/app.html", APP, direct["app"].text)
    assert app_b[0].mime_type == APP and "b app" in app_b[0].text
    assert demo[0].uri == "demo://resource/dynamic/text/1" and demo[0].text
    for path in ("/mcp/a", "/mcp/v/apps"):
        app = on(c, path, mode, lambda client: client.read_resource("ui://a/app.html")).contents[0]
        assert (app.mime_type, app.text) == (APP, direct["app"].text), path
        kib = on(c, path, mode, lambda client: client.read_resource("test://a/items/fig")).contents[0]
        assert kib.text == "item fig of a", path


@pytest.mark.parametrize("mode", ERAS)
def test_it_routes_prompt_gets_to_their_server(c, mode):
    async def gets(client, prefix):
        greet = await client.get_prompt(f"{prefix}greet", {"who": "Ada", "style": "warm"})
        hello = await client.get_prompt(f"{prefix}hello")
        return greet.messages[0].content.text, hello.messages[0].content.text

    assert on(c, "/mcp", mode, lambda cl: gets(cl, "b__")) == ("Hello Ada, from b (warm).", "Hello from b.")
    assert on(c, "/mcp/a", mode, lambda cl: gets(cl, "")) == ("Hello Ada, from a (warm).", "Hello from a.")
    assert on(c, "/mcp/v/apps", mode, lambda cl: gets(cl, "a__")) == (
        "Hello Ada, from a (warm).",
        "Hello from a.",
    )
    args = {"city": "Paris", "state": "TX"}
    every = on(c, "/mcp", mode, lambda cl: cl.get_prompt("every__args-prompt", args))
    assert "Paris" in every.messages[0].content.text


@pytest.mark.parametrize("mode", ERAS)
def test_it_reads_the_colliding_uri_only_on_each_servers_own_endpoint(c, mode):
    got = on(c, "/mcp", mode, lambda client: refusal(client.read_resource(SHARED)))
    assert got == (NOT_FOUND[mode], COLLISION)
    for server in ("a", "b"):
        read = on(c, f"/mcp/{server}", mode, lambda client: client.read_resource(SHARED))
        assert read.contents[0].text == f"shared from {server}"
    # In a view holding only `a`, nothing collides.
    assert (
        on(c, "/mcp/v/apps", mode, lambda client: client.read_resource(SHARED)).contents[0].text
        == "shared from a"
    )


def test_it_warns_on_each_server_page_of_the_uri_another_server_serves_too(web):
    assert "URI also served by b" in web.get("/servers/a/").text
    assert "URI also served by a" in web.get("/servers/b/").text
    assert "URI also served by" not in web.get("/servers/every/").text


@pytest.mark.parametrize("mode", ERAS)
def test_it_answers_unknown_prompts_and_uris_as_the_spec_says(c, mode):
    async def asks(client, prefix):
        return [
            await refusal(client.get_prompt(f"{prefix}nosuch")),
            await refusal(client.read_resource("test://nowhere/x")),
            # a's template is test://a/items/{item}: this matches no template of any server
            await refusal(client.read_resource("test://a/other/x")),
            await refusal(client.read_resource("ui://a/other.html")),
        ]

    code = NOT_FOUND[mode]
    assert on(c, "/mcp", mode, lambda cl: asks(cl, "a__")) == [
        (-32602, "unknown prompt: a__nosuch"),
        (code, "resource not found: test://nowhere/x"),
        (code, "resource not found: test://a/other/x"),
        (code, "resource not found: ui://a/other.html"),
    ]
    assert on(c, "/mcp/a", mode, lambda cl: asks(cl, ""))[0] == (-32602, "unknown prompt: nosuch")
    # b's own URIs are unknown on a's endpoint.
    got = on(c, "/mcp/a", mode, lambda cl: refusal(cl.read_resource("test://b/kib")))
    assert got == (code, "resource not found: test://b/kib")


@pytest.mark.parametrize("mode", ERAS)
def test_it_passes_the_servers_own_error_for_a_missing_prompt_argument_on(c, mode):
    own = (-32602, "a: greet needs the argument who")  # what ui.py answers itself
    assert on(c, "/mcp", mode, lambda cl: refusal(cl.get_prompt("a__greet", {}))) == own
    assert on(c, "/mcp/a", mode, lambda cl: refusal(cl.get_prompt("greet", {"style": "x"}))) == own


@pytest.mark.parametrize("mode", ERAS)
def test_it_routes_completions_and_answers_none_where_there_are_none(c, mode):
    async def completes(client, prefix):
        who = await client.complete(PromptReference(name=f"{prefix}greet"), {"name": "who", "value": "g"})
        items = await client.complete(
            ResourceTemplateReference(uri="test://b/items/{item}"), {"name": "item", "value": "ap"}
        )
        hello = await client.complete(PromptReference(name=f"{prefix}hello"), {"name": "x", "value": ""})
        nosuch = await client.complete(PromptReference(name=f"{prefix}nosuch"), {"name": "x", "value": ""})
        nowhere = await client.complete(
            ResourceTemplateReference(uri="test://none/{x}"), {"name": "x", "value": ""}
        )
        return [
            r.completion.model_dump(mode="json", by_alias=True, exclude_none=True)
            for r in (who, items, hello, nosuch, nowhere)
        ]

    empty = {"values": []}
    want = [{"values": ["Grace", "Guido"]}, {"values": ["apple", "apricot"]}, empty, empty, empty]
    assert on(c, "/mcp", mode, lambda cl: completes(cl, "a__")) == want
    # On a's own endpoint b's template is nobody's.
    assert on(c, "/mcp/a", mode, lambda cl: completes(cl, "")) == [want[0], empty, empty, empty, empty]


@pytest.mark.parametrize("mode", ERAS)
def test_it_answers_no_completions_for_a_server_built_without_a_completion_handler(c, mode):
    async def completes(client, prefix):
        prompt = await client.complete(PromptReference(name=f"{prefix}greet"), {"name": "name", "value": "a"})
        template = await client.complete(
            ResourceTemplateReference(uri="listings://item/{item}"), {"name": "item", "value": ""}
        )
        return [
            r.completion.model_dump(mode="json", by_alias=True, exclude_none=True) for r in (prompt, template)
        ]

    none = [{"values": []}, {"values": []}]
    assert on(c, "/mcp", mode, lambda cl: completes(cl, "plain__")) == none
    assert on(c, "/mcp/plain", mode, lambda cl: completes(cl, "")) == none


# --- SPEC 20.2: subscriptions and list changes ---------------------------------------------------------


def bump(c, server: str = "a") -> None:
    r = c.call(f"mcp__{server}__bump", {}, mode="auto")
    assert r.status_code == 200 and r.json()["status"] == "done", r.text


def test_it_passes_resource_updates_to_a_2025_subscriber_within_two_seconds(c):
    updated: list = []

    async def on_message(message):
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updated.append(message.params.uri)

    async def scenario(client):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resources/subscribe is the 2025 way: deprecated
            await client.subscribe_resource("test://a/counter")
        before = (await client.read_resource("test://a/counter", cache_mode="refresh")).contents[0].text
        asked = time.monotonic()
        await in_thread(bump, c)
        await await_until(lambda: updated, 5, what="notifications/resources/updated")
        took = time.monotonic() - asked
        after = (await client.read_resource("test://a/counter", cache_mode="refresh")).contents[0].text
        return before, took, after

    before, took, after = on(c, "/mcp", "legacy", scenario, message_handler=on_message)
    assert took < 2, took
    assert updated[0] == "test://a/counter"
    assert int(after.split("=")[1]) > int(before.split("=")[1])


def test_it_passes_resource_updates_to_a_2026_listener_within_two_seconds(c):
    async def scenario(client):
        async with client.listen(resource_subscriptions=["test://a/counter"]) as sub:
            assert list(sub.honored.resource_subscriptions or []) == ["test://a/counter"]
            asked = time.monotonic()
            await in_thread(bump, c)
            with anyio.fail_after(5):
                async for event in sub:
                    if event == ResourceUpdated(uri="test://a/counter"):
                        return time.monotonic() - asked
        return None

    took = on(c, "/mcp", "auto", scenario)
    assert took is not None and took < 2, took


@pytest.mark.parametrize("mode", ERAS)
def test_it_tells_clients_of_prompt_and_resource_list_changes_within_two_seconds(c, mode):
    told: dict[str, float] = {}
    kinds = {
        mcp_types.PromptListChangedNotification: "prompts",
        mcp_types.ResourceListChangedNotification: "resources",
        PromptsListChanged: "prompts",
        ResourcesListChanged: "resources",
    }

    async def on_message(message):
        if type(message) in kinds:
            told.setdefault(kinds[type(message)], time.monotonic())

    async def scenario(client):
        async with anyio.create_task_group() as tg:
            if mode != "legacy":
                ready = anyio.Event()

                async def listen():
                    async with client.listen(prompts_list_changed=True, resources_list_changed=True) as sub:
                        ready.set()
                        async for event in sub:
                            await on_message(event)

                tg.start_soon(listen)
                await ready.wait()
            await client.list_prompts()  # a round trip: the 2025 notification stream is open by now
            asked = time.monotonic()
            r = await in_thread(lambda: c.call("mcp__b__add_prompt", {"name": f"p_{mode}"}, mode="auto"))
            assert r.json()["status"] == "done", r.text
            r = await in_thread(lambda: c.call("mcp__b__add_resource", {"name": f"r_{mode}"}, mode="auto"))
            assert r.json()["status"] == "done", r.text
            await await_until(lambda: set(told) == {"prompts", "resources"}, 5, what="both list changes")
            prompts = {p.name for p in (await client.list_prompts(cache_mode="refresh")).prompts}
            resources = {r.uri: r.name for r in (await client.list_resources(cache_mode="refresh")).resources}
            tg.cancel_scope.cancel()
        return asked, prompts, resources

    asked, prompts, resources = on(c, "/mcp", mode, scenario, message_handler=on_message)
    assert told["prompts"] - asked < 2 and told["resources"] - asked < 2, told
    assert f"b__p_{mode}" in prompts
    assert resources[f"test://b/extra/r_{mode}"] == f"b__r_{mode}"


# --- SPEC 20.2: views and tokens limited to views ----------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
def test_it_gives_a_view_the_prompts_and_resources_of_servers_it_holds_whole(c, mode):
    async def everything(client):
        return (
            {p.name for p in (await client.list_prompts()).prompts},
            {r.uri for r in (await client.list_resources()).resources},
            {t.uri_template for t in (await client.list_resource_templates()).resource_templates},
        )

    assert on(c, "/mcp/v/apps", mode, everything) == (
        {"a__greet", "a__hello"},
        {"test://a/counter", "test://a/kib", SHARED},
        {"test://a/items/{item}"},
    )
    assert on(c, "/mcp/v/cut", mode, everything) == (set(), set(), set())
    got = on(c, "/mcp/v/cut", mode, lambda cl: refusal(cl.read_resource("test://a/kib")))
    assert got == (NOT_FOUND[mode], "resource not found: test://a/kib")
    got = on(c, "/mcp/v/cut", mode, lambda cl: refusal(cl.get_prompt("a__hello")))
    assert got == (-32602, "unknown prompt: a__hello")


@pytest.mark.parametrize("mode", ERAS)
def test_it_shows_a_limited_token_only_its_views_prompts_and_resources(c, bot, mode):
    assert prompt_names(c, "/mcp", mode, bot) == {"a__greet", "a__hello"}
    assert uris(c, "/mcp", mode, bot) == {"test://a/counter", "test://a/kib", SHARED}

    async def reads(client):
        # b is outside the token's views: its prompt, URIs and app answer as ones that do not exist.
        return [
            await refusal(client.get_prompt("b__greet", {"who": "x"})),
            await refusal(client.get_prompt("zz__greet", {"who": "x"})),
            await refusal(client.read_resource("test://b/kib")),
            await refusal(client.read_resource("test://zz/kib")),
            await refusal(client.read_resource("ui://b/app.html")),
            await refusal(client.read_resource("ui://zz/app.html")),
            await refusal(client.read_resource("test://b/items/pear")),
            await refusal(client.read_resource("test://zz/items/pear")),
            (await client.read_resource(SHARED)).contents[0].text,  # only a's is in sight
            (
                await client.complete(PromptReference(name="b__greet"), {"name": "who", "value": "g"})
            ).completion.values,
        ]

    got = on(c, "/mcp", mode, reads, token=bot)
    for hidden, missing in zip(got[0:8:2], got[1:8:2], strict=True):
        assert (
            hidden[0] == missing[0] and hidden[1].replace("/b/", "/zz/").replace("b__", "zz__") == missing[1]
        )
    assert got[0] == (-32602, "unknown prompt: b__greet")
    assert got[2] == (NOT_FOUND[mode], "resource not found: test://b/kib")
    assert got[8:] == ["shared from a", []]


def _raw(http: httpx2.Client, method: str, params: dict, name: str) -> tuple[int, str, bytes]:
    """A 2026-07-28 request written by hand: the whole HTTP answer, `name` blanked."""
    meta = {
        PROTOCOL_VERSION_META_KEY: MODERN,
        CLIENT_CAPABILITIES_META_KEY: {},
        CLIENT_INFO_META_KEY: {"name": "rest-test", "version": "1"},
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {**params, "_meta": meta}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        "Mcp-Name": params.get("name") or params["uri"],
    }
    r = http.post("/mcp", json=body, headers=headers)
    return r.status_code, r.headers.get("content-type", ""), r.content.replace(name.encode(), b"<name>")


def test_it_refuses_a_limited_token_byte_for_byte_as_for_what_does_not_exist(c, bot):
    with httpx2.Client(base_url=c.url, headers={"Authorization": f"Bearer {bot}"}, timeout=30) as http:
        for method, key, hidden, missing in (
            ("prompts/get", "name", "b__greet", "zz__greet"),
            ("resources/read", "uri", "test://b/kib", "test://zz/kib"),
            ("resources/read", "uri", "ui://b/app.html", "ui://zz/app.html"),
        ):
            a = _raw(http, method, {key: hidden}, hidden)
            b = _raw(http, method, {key: missing}, missing)
            assert a == b, (method, a, b)
            assert b"-32602" in a[2] and b"<name>" in a[2], a


# --- SPEC 20.3: the history and the gate ------------------------------------------------------------


def test_it_keeps_each_get_and_read_as_a_call_of_its_kind_in_the_history(c, web):
    async def scenario(client):
        await client.get_prompt("a__greet", {"who": "History"})
        await client.read_resource("test://a/items/history")

    on(c, "/mcp", "auto", scenario)
    prompt = c.get(f"/v1/mcp/calls/{db_calls(c, 'prompt')[0]}").json()
    assert (prompt["kind"], prompt["tool"], prompt["status"], prompt["via"]) == (
        "prompt",
        "mcp__a__greet",
        "done",
        "mcp",
    )
    assert prompt["arguments"] == {"who": "History"} and "Hello History, from a (plain)." in prompt["result"]
    read = c.get(f"/v1/mcp/calls/{db_calls(c, 'resource')[0]}").json()
    assert (read["kind"], read["uri"], read["status"]) == ("resource", "test://a/items/history", "done")
    assert read["result"] == "item history of a" and read["duration"] is not None
    tool_call = c.call("mcp__a__whoami", {}, mode="auto").json()["call_id"]
    assert c.get(f"/v1/mcp/calls/{tool_call}").json()["kind"] == "tool"

    page = web.get("/history/", params={"kind": "resource"}).text
    assert f"/history/{read['call_id']}/" in page and f"/history/{prompt['call_id']}/" not in page
    page = web.get("/history/", params={"kind": "prompt"}).text
    assert f"/history/{prompt['call_id']}/" in page and f"/history/{read['call_id']}/" not in page


@pytest.mark.parametrize("mode", ERAS)
def test_it_holds_an_asked_read_until_a_person_approves_it(c, mode):
    uri = f"test://a/items/held-{mode}"
    with rules(c, "ask resource:a(uri:test://a/items/held-*)"):
        item, got = held(c, mode, lambda cl: cl.read_resource(uri), "resource", uri, {"approve": True})
    assert item["tool_args"] == {"uri": uri}
    assert got.contents[0].text == f"item held-{mode} of a"
    row = c.get(f"/v1/mcp/calls/{item['call_id']}").json()
    assert (row["kind"], row["decision"], row["status"]) == ("resource", "approve", "done")


@pytest.mark.parametrize("mode", ERAS)
def test_it_holds_an_asked_prompt_until_a_person_approves_it(c, mode):
    with rules(c, "ask prompt:mcp__b__*"):
        item, got = held(
            c, mode, lambda cl: cl.get_prompt("b__hello"), "prompt", "mcp__b__hello", {"approve": True}
        )
    assert got.messages[0].content.text == "Hello from b."
    assert c.get(f"/v1/mcp/calls/{item['call_id']}").json()["kind"] == "prompt"


@pytest.mark.parametrize(
    ("reply", "text"),
    [
        ({"approve": False}, "Skipped by user"),
        ({"approve": False, "reason": "not now"}, "Skipped by user. Reason: not now"),
        ({"abort": True}, "user stopped"),
        (None, "Skipped by user. Reason: confirmation expired"),
    ],
    ids=["deny", "deny-reason", "abort", "expiry"],
)
def test_it_answers_minus_32001_with_the_refusals_text(c, reply, text):
    uri = f"test://a/items/held-{text.split()[-1]}"
    mode = "legacy" if reply and reply.get("abort") else "auto"
    with rules(c, "ask resource:a(uri:test://a/items/held-*)"):
        _, got = held(c, mode, lambda cl: cl.read_resource(uri), "resource", uri, reply)
    assert got == (-32001, text)


def test_it_answers_a_read_a_rule_denies_with_the_rules_line(c):
    line = "deny resource:a(uri:test://a/items/secret*)"
    with rules(c, line):
        for mode in ERAS:
            got = on(c, "/mcp", mode, lambda cl: refusal(cl.read_resource("test://a/items/secret-1")))
            assert got == (-32001, f"Denied by rule: {line}")
            got = on(c, "/mcp", mode, lambda cl: cl.read_resource("test://a/items/open-1"))
            assert got.contents[0].text == "item open-1 of a"  # a URI the rule does not name


# --- SPEC 20.5: apps -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
def test_it_keeps_tools_meta_and_lists_ui_only_tools_on_every_endpoint(c, direct, mode):
    async def metas(client):
        return {t.name: t.meta for t in (await client.list_tools()).tools}

    own = {name: direct["tools"][name].meta for name in ("show_app", "app_refresh", "legacy_app")}
    assert own["app_refresh"] == {"ui": {"resourceUri": "ui://a/app.html", "visibility": ["app"]}}
    assert own["legacy_app"] == {"ui/resourceUri": "ui://a/app.html"}
    for path, prefix in (("/mcp", "a__"), ("/mcp/a", ""), ("/mcp/v/apps", "a__")):
        got = on(c, path, mode, metas)
        for name, meta in own.items():
            assert got[prefix + name] == meta, (path, name, got.get(prefix + name))


@pytest.mark.parametrize("mode", ERAS)
def test_it_takes_a_bare_own_tool_name_when_unique_and_refuses_it_when_ambiguous(c, mode):
    async def calls(client):
        summed = await client.call_tool("get-sum", {"a": 2, "b": 3})
        ambiguous = await refusal(client.call_tool("whoami", {}))
        return summed, ambiguous

    summed, ambiguous = on(c, "/mcp", mode, calls)
    assert not summed.is_error and "5" in summed.content[0].text
    assert ambiguous == (-32602, "tool whoami is ambiguous: a__whoami, b__whoami")
    # A call through the gate like any: it is in the history under its registered name.
    row = c.get(f"/v1/mcp/calls/{db_calls(c, 'tool_confirm')[0]}").json()
    assert (row["tool"], row["via"], row["decision"], row["kind"]) == (
        "mcp__every__get-sum",
        "mcp",
        "allowlist",
        "tool",
    )
    # In a view holding only a, `whoami` is a's alone.
    assert on(c, "/mcp/v/apps", mode, lambda cl: cl.call_tool("whoami", {})).content[0].text == "a"


# --- the TypeScript SDK's client (2025-11-25) ----------------------------------------------------------


def test_it_serves_prompts_resources_and_updates_to_the_typescript_client(c):
    client = TsClient(c, "/mcp")
    try:
        caps = client.connected["capabilities"]
        assert caps["prompts"]["listChanged"] and caps["resources"]["subscribe"] and "completions" in caps

        def ask(op: str, **fields) -> dict:
            return client.answer(client.send(op, **fields), 20)

        prompts = {p["name"] for p in ask("prompts")["result"]["prompts"]}
        assert {"a__greet", "b__hello", "every__simple-prompt"} <= prompts
        resources = {r["uri"]: r["name"] for r in ask("resources")["result"]["resources"]}
        assert resources["test://a/kib"] == "a__kib" and SHARED not in resources
        templates = {t["uriTemplate"] for t in ask("templates")["result"]["resourceTemplates"]}
        assert "test://b/items/{item}" in templates
        app = ask("read", uri="ui://a/app.html")["result"]["contents"][0]
        assert (app["mimeType"], app["uri"]) == (APP, "ui://a/app.html")
        greet = ask("get_prompt", name="a__greet", arguments={"who": "TS"})["result"]
        assert greet["messages"][0]["content"]["text"] == "Hello TS, from a (plain)."
        shared = ask("read", uri=SHARED)
        assert (shared["code"], shared["error"].endswith(COLLISION)) == (-32002, True), shared
        done = ask(
            "complete", ref={"type": "ref/prompt", "name": "a__greet"}, argument={"name": "who", "value": "a"}
        )
        assert done["result"]["completion"]["values"] == ["Ada", "Alan"]
        rid = client.send("list")
        tools = {t["name"]: t.get("_meta") for t in client.wait(lambda e: e.get("id") == rid, 20)["tools"]}
        assert tools["a__app_refresh"] == {"ui": {"resourceUri": "ui://a/app.html", "visibility": ["app"]}}

        assert "error" not in ask("subscribe", uri="test://b/counter")
        asked = time.time() * 1000
        bump(c, "b")
        event = client.wait(lambda e: e.get("event") == "resource_updated" and e["at"] >= asked, 5)
        assert event["uri"] == "test://b/counter" and event["at"] - asked < 2000, event
    finally:
        client.close()
