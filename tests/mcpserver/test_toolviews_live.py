"""Views (SPEC 19) on a live console's MCP endpoints, with clients nobody here wrote: the SDK's
`Client` in both protocol eras and the TypeScript SDK's client listing `/mcp/v/<view>`; a
token limited to views on every door (`/mcp`, `/mcp/<server>`, `/mcp/v/<view>`,
`/v1/mcp/tools`, `/v1/mcp/call`, MCP `tools/call`), refused exactly as for a tool that does
not exist; and `list_changed` within 2 s when a view is edited or a server in it grows a tool."""

import time

import anyio
import httpx2
import pytest
from mcp import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

from mcpcore import names
from tests.live import everything_stdio, our_server
from tests.mcpclients import TsClient, grow_tool, mcp_client, until_told

pytestmark = pytest.mark.live

MODERN = "2026-07-28"
ERAS = ["legacy", "auto"]  # the 2025-11-25 handshake, and 2026-07-28 (what auto picks here)
PICK = {
    "name": "pick",
    "description": "Echo and sums, and the dynamic server.",
    "include": ["mcp__every__echo", "mcp__every__get-sum", "mcp__dyn__*"],
    "exclude": ["mcp__dyn__add_tool"],
}


@pytest.fixture(scope="module")
def c(module_console):
    servers = {"every": everything_stdio(), "echo": our_server("echo.py"), "dyn": our_server("dynamic.py")}
    console = module_console(
        servers, {"AGENVOY_CALL_TIMEOUT": "10"}, allow=["mcp__every__*", "mcp__echo__*", "mcp__dyn__*"]
    )
    console.wait_connected("every", "echo", "dyn")
    for view in (PICK, {"name": "other", "include": ["mcp__echo__*"]}):
        assert console.post("/v1/views", view).status_code == 200
    return console


@pytest.fixture(scope="module")
def bot(c) -> str:
    """A token limited to the view `pick`, made as an operator would."""
    return c.manage("create_token", "bot", "--view", "pick").strip()


def exposed_set(c, view: str) -> set[str]:
    """The names `/mcp` gives the tools of `view` now (its servers are connected)."""
    found = {v["name"]: v["tools"] for v in c.get("/v1/views").json()["views"]}[view]
    return {names.exposed_name(*names.split_registered(n)) for n in found}


def listing(c, path: str, mode: str, token: str | None = None) -> tuple[set[str], str]:
    async def main():
        async with mcp_client(c, path, mode, token=token) as client:
            return {t.name for t in (await client.list_tools()).tools}, client.instructions or ""

    return anyio.run(main)


@pytest.mark.parametrize("mode", ERAS)
def test_it_serves_a_views_exact_set_to_the_sdk_client(c, mode):
    want = exposed_set(c, "pick")
    assert {"every__echo", "every__get-sum", "dyn__first"} <= want and "dyn__add_tool" not in want
    got, instructions = listing(c, "/mcp/v/pick", mode)
    assert got == want
    assert instructions.startswith(PICK["description"] + "\n\n## MCP Server Instructions")
    assert "### dyn" in instructions and "### echo" not in instructions


def test_it_serves_a_views_exact_set_to_the_typescript_client(c):
    client = TsClient(c, "/mcp/v/pick")
    try:
        assert client.connected["instructions"].startswith(PICK["description"])
        rid = client.send("list")
        tools = {t["name"] for t in client.wait(lambda e: e.get("id") == rid, 10)["tools"]}
    finally:
        client.close()
    assert tools == exposed_set(c, "pick")


def test_it_answers_an_unknown_view_404(c):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    r = c.http.post("/mcp/v/nope", json=init)
    assert (r.status_code, r.json()) == (404, {"error": "view not found"})


def test_it_shows_a_limited_token_only_its_views_tools_on_every_endpoint(c, bot):
    want = exposed_set(c, "pick")
    for mode in ERAS:
        assert listing(c, "/mcp", mode, bot)[0] == want
        assert listing(c, "/mcp/v/pick", mode, bot)[0] == want
        assert listing(c, "/mcp/every", mode, bot)[0] == {"echo", "get-sum"}
    with httpx2.Client(base_url=c.url, headers={"Authorization": f"Bearer {bot}"}) as http:
        seen = {t["name"] for t in http.get("/v1/mcp/tools").json()["tools"]}
        assert {names.exposed_name(*names.split_registered(n)) for n in seen} == want
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        # A server or view outside its views answers as one that does not exist.
        for hidden, missing in (("/mcp/echo", "/mcp/nosuch"), ("/mcp/v/other", "/mcp/v/nosuch")):
            a, b = http.post(hidden, json=init), http.post(missing, json=init)
            assert a.status_code == b.status_code == 404 and a.content == b.content, hidden


def _refusal(c, path: str, mode: str, name: str, token: str | None) -> tuple[int, str]:
    async def main():
        async with mcp_client(c, path, mode, token=token) as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool(name, {})
            return caught.value.error.code, caught.value.error.message.replace(name, "<name>")

    return anyio.run(main)


@pytest.mark.parametrize("mode", ERAS)
def test_it_refuses_a_limited_tokens_call_outside_its_views_as_an_unknown_tool(c, bot, mode):
    unknown = (-32602, "unknown tool: <name>")
    assert {"mcp__every__get-tiny-image", "mcp__echo__echo", "mcp__dyn__add_tool"} <= set(c.tools())
    # Hidden by the token's views on /mcp, on /mcp/every and on its own view; beside each, a
    # name that exists nowhere: the same answer.
    for path, hidden, missing in (
        ("/mcp", "every__get-tiny-image", "every__no_such_tool"),
        ("/mcp", "echo__echo", "nosuch__echo"),
        ("/mcp/every", "get-tiny-image", "no-such-tool"),
        ("/mcp/v/pick", "dyn__add_tool", "dyn__no_such_tool"),
    ):
        assert _refusal(c, path, mode, hidden, bot) == unknown, (path, hidden)
        assert _refusal(c, path, mode, missing, bot) == unknown, (path, missing)
    # A view's endpoint hides what is outside the view from an unlimited token too.
    assert _refusal(c, "/mcp/v/pick", mode, "every__get-tiny-image", None) == unknown


def test_it_refuses_a_limited_tokens_rest_call_byte_for_byte_as_a_missing_tool(c, bot):
    with httpx2.Client(base_url=c.url, headers={"Authorization": f"Bearer {bot}"}, timeout=30) as http:

        def answer(name: str):
            r = http.post("/v1/mcp/call", json={"name": name, "arguments": {}, "wait": 0})
            return r.status_code, r.headers["content-type"], r.content.replace(name.encode(), b"<name>")

        assert "mcp__every__get-tiny-image" in c.tools()  # it exists: hidden by the token's views
        hidden, missing = answer("mcp__every__get-tiny-image"), answer("mcp__every__no_such_tool")
        assert hidden == missing == (404, "application/json", b'{"error": "unknown tool: <name>"}')
        ran = http.post("/v1/mcp/call", json={"name": "mcp__every__echo", "arguments": {"message": "hi"}})
        assert ran.status_code == 200 and ran.json()["result"] == "Echo: hi"


def _raw_call(http: httpx2.Client, path: str, name: str) -> tuple[int, str, bytes]:
    """A 2026-07-28 `tools/call` written by hand: the whole HTTP answer, the name blanked."""
    meta = {
        PROTOCOL_VERSION_META_KEY: MODERN,
        CLIENT_CAPABILITIES_META_KEY: {},
        CLIENT_INFO_META_KEY: {"name": "views-test", "version": "1"},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "_meta": meta},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    r = http.post(path, json=body, headers=headers)
    return r.status_code, r.headers.get("content-type", ""), r.content.replace(name.encode(), b"<name>")


def test_it_refuses_a_limited_tokens_mcp_call_byte_for_byte_as_a_missing_tool(c, bot):
    with httpx2.Client(base_url=c.url, headers={"Authorization": f"Bearer {bot}"}, timeout=30) as http:
        for path, hidden, missing in (
            ("/mcp", "every__get-tiny-image", "every__no_such_tool"),
            ("/mcp/every", "get-tiny-image", "no-such-tool"),
            ("/mcp/v/pick", "dyn__add_tool", "dyn__no_such_tool"),
        ):
            a, b = _raw_call(http, path, hidden), _raw_call(http, path, missing)
            assert a == b, (path, a, b)
            assert b"unknown tool: <name>" in a[2] and b"-32602" in a[2], a


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("limited", [False, True], ids=["view-endpoint", "limited-token-on-mcp"])
def test_it_tells_clients_within_two_seconds_when_their_view_is_edited(c, mode, limited):
    name = f"edited-{mode}-{int(limited)}"
    assert c.post("/v1/views", {"name": name, "include": ["mcp__every__echo"]}).status_code == 200
    token = c.manage("create_token", f"bot-{name}", "--view", name).strip() if limited else None
    path = "/mcp" if limited else f"/mcp/v/{name}"

    def edit():
        r = c.post("/v1/views", {"name": name, "include": ["mcp__every__echo", "mcp__every__get-sum"]})
        assert r.status_code == 200, r.text

    _, took, tools = anyio.run(until_told, c.url + path, token or c.token, mode, edit)
    assert took < 2, took
    assert tools == {"every__echo", "every__get-sum"}


@pytest.mark.parametrize("mode", ERAS)
def test_it_tells_view_clients_within_two_seconds_when_a_server_in_it_grows_a_tool(c, mode):
    url = c.url + "/mcp/v/pick"
    _, took, tools = anyio.run(until_told, url, c.token, mode, lambda: grow_tool(c, f"grown_{mode}"))
    assert took < 2, took
    assert f"dyn__grown_{mode}" in tools and "dyn__add_tool" not in tools


def test_it_tells_the_typescript_client_within_two_seconds_when_its_view_is_edited(c):
    assert c.post("/v1/views", {"name": "ts-edit", "include": ["mcp__every__echo"]}).status_code == 200
    client = TsClient(c, "/mcp/v/ts-edit")
    try:
        rid = client.send("list")
        assert {t["name"] for t in client.wait(lambda e: e.get("id") == rid, 10)["tools"]} == {"every__echo"}
        asked = time.time() * 1000
        body = {"name": "ts-edit", "include": ["mcp__every__echo", "mcp__every__get-sum"]}
        assert c.post("/v1/views", body).status_code == 200
        event = client.wait(lambda e: e.get("event") == "list_changed" and e["at"] >= asked, 5)
        assert event["at"] - asked < 2000, event["at"] - asked
        rid = client.send("list")
        tools = {t["name"] for t in client.wait(lambda e: e.get("id") == rid, 10)["tools"]}
    finally:
        client.close()
    assert tools == {"every__echo", "every__get-sum"}
