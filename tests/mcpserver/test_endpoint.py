"""The console as an MCP server (SPEC 13; issue 12), end to end against a live console, with
clients nobody here wrote: the `mcp` SDK's `Client` in both protocol eras, and the TypeScript
SDK's client (tests/mcp_ts_client.mjs)."""

import base64
import json
import sqlite3
import threading
import time
import uuid

import anyio
import httpx2
import mcp_types
import pytest
from mcp import MCPError

from mcpcore import names
from tests.live import db_rows, everything_stdio, our_server, wait_until
from tests.mcpclients import TsClient, grow_tool, in_thread, mcp_client, pending_for, until_told, wait_pending

pytestmark = pytest.mark.live

PNG = b"\x89PNG\r\n\x1a\n"
ERAS = ["legacy", "auto"]  # the 2025-11-25 handshake, and 2026-07-28 (what auto picks here)


@pytest.fixture(scope="module")
def c(module_console):
    servers = {"every": everything_stdio(), "echo": our_server("echo.py"), "dyn": our_server("dynamic.py")}
    allow = ["mcp__every__*", "mcp__echo__sleep", "mcp__echo__add", "mcp__dyn__*"]
    console = module_console(servers, {"AGENVOY_CALL_TIMEOUT": "10"}, allow=allow)
    console.wait_connected("every", "echo", "dyn")
    return console


def reply(c, item: dict, **body):
    # As a person's script would: the approver token (no token answers its own call).
    r = c.reply(item["session_id"], item["id"], body)
    assert r.status_code == 200, r.text
    return r


def call_row(c, call_id: str) -> dict:
    return c.get(f"/v1/mcp/calls/{call_id}").json()


def last_mcp_call(c) -> dict:
    """The newest call made through an MCP endpoint (read from the console's database)."""
    conn = sqlite3.connect(f"file:{c.data / 'db.sqlite3'}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "select id from mcpcore_toolcall where via = 'mcp' order by created_at desc limit 1"
        ).fetchone()
    finally:
        conn.close()
    return call_row(c, str(uuid.UUID(row[0])))


def approved_with_progress(c, mode: str, name: str, args: dict) -> tuple[dict, object, list[tuple], bool]:
    """Calls tool `name` on `/mcp` in `mode` with a progress callback; once its item is in the
    inbox and a first heartbeat came, approves it. (item, result, progress, whether the call had
    answered before the approval)."""
    progress: list[tuple] = []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    async def main():
        async with mcp_client(c, "/mcp", mode) as client:
            async with anyio.create_task_group() as tg:
                box = {}

                async def call():
                    box["r"] = await client.call_tool(name, args, progress_callback=on_progress)

                tg.start_soon(call)
                item = await wait_pending(c, f"mcp__{name}")
                with anyio.fail_after(10):
                    while not progress:
                        await anyio.sleep(0.05)
                early = "r" in box
                await in_thread(lambda: reply(c, item, approve=True))
            return item, box["r"], progress, early

    return anyio.run(main)


# --- auth and endpoints (13.1) ------------------------------------------------------------------


def test_it_refuses_requests_without_a_valid_token_before_reading_any_mcp_message(c):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    for path in ("/mcp", "/mcp/echo", "/mcp/_permission", "/mcp/nosuch"):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": c.token}):
            r = httpx2.post(c.url + path, json=init, headers=headers)
            assert r.status_code == 401, (path, headers)
            assert r.headers["WWW-Authenticate"].startswith("Bearer")
            assert r.json() == {"error": "authentication required"}


def test_it_answers_404_for_an_unknown_server(c):
    r = c.http.post("/mcp/nosuch", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    assert r.status_code == 404


@pytest.mark.parametrize("mode", ERAS)
def test_it_names_itself_and_serves_the_instructions_of_the_servers_in_view(c, mode):
    async def main():
        async with mcp_client(c, "/mcp", mode) as client:
            if mode == "legacy":
                assert client.server_info.name == "agenvoy-console"
            assert client.instructions == c.get("/v1/mcp/instructions").json()["text"]
            assert "### echo" in client.instructions and "### dyn" in client.instructions
        async with mcp_client(c, "/mcp/echo", mode) as client:
            assert client.instructions == "Echo server instructions."
            tools = {t.name for t in (await client.list_tools()).tools}
            assert tools == {"echo", "add", "sleep", "big", "header", "fail"}
            with anyio.fail_after(10):
                result = await client.call_tool("add", {"a": 2, "b": 40})
            assert result.content[0].text == "42"

    anyio.run(main)


# --- the tool list (13.2) -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
def test_it_lists_every_connected_tool_with_its_schema_annotations_and_output_schema(c, mode):
    registered = c.tools()

    async def main():
        async with mcp_client(c, "/mcp", mode) as client:
            return (await client.list_tools()).tools

    tools = {t.name: t for t in anyio.run(main)}
    expected = {names.exposed_name(t["server"], t["tool"]): t for t in registered.values()}
    assert set(tools) == set(expected)
    assert "every__get-sum" in tools and "echo__echo" in tools
    for name, tool in tools.items():
        assert tool.description == expected[name]["description"]
        assert tool.input_schema == expected[name]["parameters"]
    structured = tools["every__get-structured-content"]
    assert structured.output_schema["properties"]["temperature"]["type"] == "number"
    assert tools["every__echo"].annotations.read_only_hint is True


# --- calls (13.3) -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
def test_it_runs_an_allow_listed_call_at_once_with_images_and_structured_content_intact(c, mode):
    async def main():
        async with mcp_client(c, "/mcp", mode) as client:
            with anyio.fail_after(10):
                image = await client.call_tool("every__get-tiny-image", {})
                weather = await client.call_tool("every__get-structured-content", {"location": "New York"})
            return image, weather

    image, weather = anyio.run(main)
    assert not image.is_error
    pictures = [item for item in image.content if item.type == "image"]
    assert len(pictures) == 1 and pictures[0].mime_type == "image/png"
    assert base64.b64decode(pictures[0].data).startswith(PNG)
    assert not weather.is_error
    assert set(weather.structured_content) == {"temperature", "conditions", "humidity"}
    row = last_mcp_call(c)
    assert row["via"] == "mcp" and row["status"] == "done" and row["decision"] == "allowlist"


@pytest.mark.parametrize("mode", ERAS)
def test_it_holds_a_call_in_the_inbox_with_heartbeats_until_a_person_approves(c, mode):
    item, result, progress, early = approved_with_progress(c, mode, "echo__echo", {"text": f"held {mode}"})
    assert not early
    assert item["tool_args"] == {"text": f"held {mode}"}
    if mode == "legacy":
        assert item["session_id"].startswith("mcp:") and item["session_id"] != "mcp:tests"
    else:
        assert item["session_id"] == "mcp:tests"
    assert not result.is_error and result.content[0].text == f"held {mode}"
    value, _total, message = progress[0]
    assert message.startswith("waiting for approval")
    # The Pending page's address, and on it the confirmation's own page (SPEC 13.3, 15).
    assert f"{c.env.get('AGENVOY_PUBLIC_URL', 'http://127.0.0.1:8000')}/pending/{item['id']}/" in message
    assert [p[0] for p in progress] == sorted({p[0] for p in progress})
    row = last_mcp_call(c)
    assert row["via"] == "mcp" and row["decision"] == "approve"


def test_it_takes_the_session_id_from_meta_when_the_client_gives_one(c):
    async def main():
        async with mcp_client(c, "/mcp", "auto") as client:
            async with anyio.create_task_group() as tg:

                async def call():
                    await client.call_tool(
                        "echo__echo", {"text": "own"}, meta={"io.agenvoy/session": "run-7"}
                    )

                tg.start_soon(call)
                item = await wait_pending(c, "mcp__echo__echo")
                await in_thread(lambda: reply(c, item, approve=True))
            return item

    assert anyio.run(main)["session_id"] == "mcp:run-7"


@pytest.mark.parametrize(
    "answer, text",
    [
        ({"approve": False}, "Skipped by user"),
        ({"approve": False, "reason": "not now"}, "Skipped by user. Reason: not now"),
        ({"approve": False, "abort": True}, "user stopped"),
    ],
)
def test_it_answers_deny_and_abort_with_their_texts_as_error_results(c, answer, text):
    async def main():
        async with mcp_client(c, "/mcp", "auto") as client:
            async with anyio.create_task_group() as tg:
                box = {}

                async def call():
                    box["result"] = await client.call_tool("echo__echo", {"text": "no"})

                tg.start_soon(call)
                item = await wait_pending(c, "mcp__echo__echo")
                await in_thread(lambda: reply(c, item, **answer))
            return box["result"]

    result = anyio.run(main)
    assert result.is_error is True
    assert [(i.type, i.text) for i in result.content] == [("text", text)]


@pytest.mark.parametrize("mode", ERAS)
def test_it_answers_an_unknown_tool_with_invalid_params(c, mode):
    async def main():
        async with mcp_client(c, "/mcp", mode) as client:
            with pytest.raises(MCPError) as err:
                await client.call_tool("nosuch__tool", {})
            return err.value

    err = anyio.run(main)
    assert err.error.code == -32602 and err.error.message == "unknown tool: nosuch__tool"


@pytest.mark.parametrize("mode", ERAS)
def test_it_passes_upstream_progress_on_while_a_call_runs(c, mode):
    progress: list[tuple] = []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    async def main():
        async with mcp_client(c, "/mcp", mode) as client:
            with anyio.fail_after(20):
                return await client.call_tool(
                    "every__trigger-long-running-operation",
                    {"duration": 1, "steps": 3},
                    progress_callback=on_progress,
                )

    result = anyio.run(main)
    assert not result.is_error
    assert [(p[0], p[1]) for p in progress] == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.parametrize("mode", ERAS)
def test_it_cancels_a_pending_call_when_the_client_cancels_its_request(c, mode):
    async def main():
        async with mcp_client(c, "/mcp", mode) as client:
            async with anyio.create_task_group() as tg:

                async def call():
                    await client.call_tool("echo__echo", {"text": f"cancel {mode}"})

                tg.start_soon(call)
                item = await wait_pending(c, "mcp__echo__echo")
                # 2025: the SDK sends notifications/cancelled; 2026: it closes the stream.
                tg.cancel_scope.cancel()
            cancelled_at = time.monotonic()
            await in_thread(
                lambda: wait_until(lambda: not pending_for(c, "mcp__echo__echo"), 3, what="pending gone")
            )
            return item, time.monotonic() - cancelled_at

    item, took = anyio.run(main)
    assert took < 3
    assert call_row(c, item["call_id"])["status"] == "cancelled"


def test_it_cancels_a_running_call_upstream_when_the_client_goes_away(c):
    log = c.data / "logs" / "echo.stderr.log"
    before = log.read_text().count("sleep cancelled") if log.exists() else 0

    async def main():
        async with mcp_client(c, "/mcp", "auto") as client:
            with anyio.move_on_after(1.5):
                await client.call_tool("echo__sleep", {"seconds": 30})

    anyio.run(main)
    wait_until(lambda: log.read_text().count("sleep cancelled") > before, 5, what="sleep cancelled upstream")
    row = last_mcp_call(c)
    assert row["tool"] == "mcp__echo__sleep" and row["status"] == "cancelled"


@pytest.mark.parametrize("mode", ERAS)
def test_it_tells_clients_about_a_grown_tool_within_two_seconds(c, mode):
    _, took, tools = anyio.run(
        until_told, c.url + "/mcp", c.token, mode, lambda: grow_tool(c, f"grown_{mode}")
    )
    assert took < 2, took
    assert f"dyn__grown_{mode}" in tools


def test_it_serves_and_calls_a_tool_under_its_shortened_name(c):
    r = c.call("mcp__dyn__add_tool", {"name": "dotted.name"}, mode="auto")
    assert r.status_code == 200 and r.json()["status"] == "done", r.text
    wait_until(lambda: "mcp__dyn__dotted.name" in c.tools(), 10, what="dotted.name registered")
    exposed = names.exposed_name("dyn", "dotted.name")
    assert exposed.startswith("dyn__dotted_name_") and len(exposed) == len("dyn__dotted_name_") + 8

    async def main():
        async with mcp_client(c, "/mcp", "auto") as client:
            assert exposed in {t.name for t in (await client.list_tools()).tools}
            with anyio.fail_after(10):
                return await client.call_tool(exposed, {})

    result = anyio.run(main)
    assert not result.is_error and result.content[0].text == "I am dotted.name"
    assert last_mcp_call(c)["tool"] == "mcp__dyn__dotted.name"


# --- approval_prompt (13.5) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, expected",
    [
        ({"approve": True}, {"behavior": "allow", "updatedInput": {"command": "ls -l"}}),
        ({"approve": False, "reason": "no"}, {"behavior": "deny", "message": "Skipped by user. Reason: no"}),
        (
            {"approve": False, "abort": True},
            {"behavior": "deny", "message": "user stopped", "interrupt": True},
        ),
    ],
)
def test_it_holds_an_approval_prompt_and_answers_claude_codes_json(c, answer, expected):
    async def main():
        async with mcp_client(c, "/mcp/_permission", "legacy") as client:
            tools = (await client.list_tools()).tools
            assert [t.name for t in tools] == ["approval_prompt"]
            assert tools[0].input_schema["required"] == ["tool_name", "input"]
            async with anyio.create_task_group() as tg:
                box = {}

                async def call():
                    box["result"] = await client.call_tool(
                        "approval_prompt",
                        {"tool_name": "Bash", "input": {"command": "ls -l"}, "tool_use_id": "t1"},
                    )

                tg.start_soon(call)
                item = await wait_pending(c, "Bash")
                assert item["tool_args"] == {"command": "ls -l"}
                await in_thread(lambda: reply(c, item, **answer))
            return box["result"]

    result = anyio.run(main)
    assert [i.type for i in result.content] == ["text"]
    assert json.loads(result.content[0].text) == expected


# --- a console with a short confirmation timeout ------------------------------------------------


@pytest.fixture(scope="module")
def short(module_console):
    console = module_console(
        {"echo": our_server("echo.py"), "spare": our_server("echo.py", "--name", "spare")},
        {"AGENVOY_CONFIRM_TIMEOUT": "1"},
    )
    console.wait_connected("echo", "spare")
    return console


@pytest.mark.parametrize("mode", ERAS)
def test_it_answers_an_expired_confirmation_with_its_text(short, mode):
    async def main():
        async with mcp_client(short, "/mcp", mode) as client:
            with anyio.fail_after(10):
                return await client.call_tool("echo__echo", {"text": "late"})

    result = anyio.run(main)
    assert result.is_error is True
    assert result.content[0].text == "Skipped by user. Reason: confirmation expired"


def test_it_leaves_out_a_server_that_goes_down_and_answers_its_calls_with_the_503_message(short):
    async def main():
        seen = anyio.Event()

        async def on_message(message):
            if isinstance(message, mcp_types.ToolListChangedNotification):
                seen.set()

        async with mcp_client(short, "/mcp", "legacy", message_handler=on_message) as client:
            before = {t.name for t in (await client.list_tools()).tools}
            config = (await in_thread(lambda: short.get("/v1/mcp"))).json()["servers"]["spare"]
            r = await in_thread(
                lambda: short.post("/v1/mcp", {"name": "spare", "server": {**config, "disabled": True}})
            )
            assert r.status_code == 200, r.text
            with anyio.fail_after(5):
                await seen.wait()
            after = {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("spare__echo", {"text": "x"})
            return before, after, result

    before, after, result = anyio.run(main)
    assert "spare__echo" in before and "echo__echo" in before
    assert "spare__echo" not in after and "echo__echo" in after
    assert result.is_error is True
    assert result.content[0].text.startswith("server spare is not connected")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    # Its path is still an endpoint (now kept in the console's memory) until it is removed.
    assert short.http.post("/mcp/spare", json=init).status_code != 404
    assert short.post("/v1/mcp/remove", {"name": "spare"}).status_code == 200
    assert short.http.post("/mcp/spare", json=init).status_code == 404


# --- the TypeScript SDK -------------------------------------------------------------------------


@pytest.fixture
def ts(c):
    clients = []

    def make(path="/mcp"):
        clients.append(TsClient(c, path))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


def test_it_serves_the_typescript_sdk_tools_and_native_results(c, ts):
    client = ts()
    assert client.connected["server"]["name"] == "agenvoy-console"
    rid = client.send("list")
    tools = {t["name"]: t for t in client.wait(lambda e: e.get("id") == rid, 10)["tools"]}
    assert tools["echo__echo"]["inputSchema"]["required"] == ["text"]
    assert "outputSchema" in tools["every__get-structured-content"]
    image = client.answer(client.send("call", name="every__get-tiny-image"), 10)["result"]
    assert [i["type"] for i in image["content"]].count("image") == 1
    png = next(i for i in image["content"] if i["type"] == "image")
    assert base64.b64decode(png["data"]).startswith(PNG)
    weather = client.answer(
        client.send("call", name="every__get-structured-content", arguments={"location": "Chicago"}), 10
    )
    assert set(weather["result"]["structuredContent"]) == {"temperature", "conditions", "humidity"}


def test_it_keeps_a_typescript_client_with_a_15s_timeout_alive_through_a_25s_wait(c, ts):
    client = ts()
    rid = client.send("call", name="echo__echo", arguments={"text": "patience"}, timeout=15000, progress=True)
    item = wait_until(lambda: pending_for(c, "mcp__echo__echo"), 10, what="pending")[0]
    assert item["session_id"] == f"mcp:{client.connected['session']}"
    started = time.monotonic()
    with pytest.raises(AssertionError):
        client.answer(rid, 25)  # nothing for 25 s: no answer, and no timeout error either
    assert time.monotonic() - started >= 25
    reply(c, item, approve=True)
    answer = client.answer(rid, 10)
    assert answer.get("result", {}).get("content") == [{"type": "text", "text": "patience"}], answer
    beats = [e for e in client.seen if e.get("id") == rid and "progress" in e]
    assert len(beats) >= 3
    assert all(e["progress"]["message"].startswith("waiting for approval") for e in beats)
    gaps = [b["at"] - a["at"] for a, b in zip(beats, beats[1:], strict=False)]
    assert max(gaps) <= 10_000


def test_it_removes_the_pending_item_within_3s_when_a_typescript_client_closes(c, ts):
    client = ts()
    client.send("call", name="echo__echo", arguments={"text": "bye"}, progress=True)
    item = wait_until(lambda: pending_for(c, "mcp__echo__echo"), 10, what="pending")[0]
    rid = client.send("close")
    client.wait(lambda e: e.get("id") == rid, 10)
    closed = time.monotonic()
    wait_until(lambda: not pending_for(c, "mcp__echo__echo"), 3, what="pending gone")
    assert time.monotonic() - closed < 3
    assert call_row(c, item["call_id"])["status"] == "cancelled"


def test_it_tells_a_typescript_client_about_a_grown_tool_within_two_seconds(c, ts):
    client = ts()
    rid = client.send("list")  # a round trip: the SDK's notification stream is open by now
    client.wait(lambda e: e.get("id") == rid, 10)
    r = c.call("mcp__dyn__add_tool", {"name": "grown_ts"}, mode="auto")
    assert r.status_code == 200 and r.json()["status"] == "done", r.text
    asked = time.time() * 1000
    event = client.wait(lambda e: e.get("event") == "list_changed" and e["at"] >= asked - 50, 5)
    assert event["at"] - asked < 2000
    rid = client.send("list")
    tools = {t["name"] for t in client.wait(lambda e: e.get("id") == rid, 10)["tools"]}
    assert "dyn__grown_ts" in tools


def test_it_stops_cleanly_with_mcp_clients_holding_calls(console):
    con = console({"echo": our_server("echo.py")})
    clients = []
    try:
        con.wait_connected("echo")
        clients = [TsClient(con), TsClient(con)]
        clients[0].send("call", name="echo__echo", arguments={"text": "one"}, progress=True)
        clients[1].send("call", name="echo__echo", arguments={"text": "two"})

        async def modern():  # a 2026-07-28 request, held in its own HTTP request's task
            async with mcp_client(con, "/mcp", "auto") as client:
                await client.call_tool("echo__echo", {"text": "three"})

        threading.Thread(target=lambda: _quietly(modern), daemon=True).start()
        wait_until(lambda: len(pending_for(con, "mcp__echo__echo")) == 3, 10, what="three pending")
        took = con.stop()
    finally:
        for client in clients:
            client.close()
    assert took < 8, con.log_text()[-3000:]
    assert not con.tracebacks(), "\n\n".join(con.tracebacks())[:4000]
    statuses = [r[0] for r in db_rows(con, "select status from mcpcore_toolcall where via = 'mcp'")]
    assert statuses == ["cancelled"] * 3


def _quietly(fn) -> None:
    try:
        anyio.run(fn)
    except BaseException:  # the console went away under it: that is the point
        pass


def test_it_serves_every_endpoint_to_every_role_and_gates_replies_by_role(c):
    # SPEC 12.1: every role may use the MCP endpoints; a held call is answered by another
    # token with the right to reply, never by the token that made it.
    tokens = {role: c._insert_token(f"mcp-{role}", role) for role in ("agent", "approver", "admin")}

    async def lists(token):
        seen = {}
        for path in ("/mcp", "/mcp/echo", "/mcp/_permission"):
            async with mcp_client(c, path, "auto", token=token) as client:
                seen[path] = {t.name for t in (await client.list_tools()).tools}
        return seen

    for token in tokens.values():
        seen = anyio.run(lists, token)
        assert "echo__echo" in seen["/mcp"] and "echo" in seen["/mcp/echo"]
        assert seen["/mcp/_permission"] == {"approval_prompt"}

    async def held():
        async with mcp_client(c, "/mcp", "auto", token=tokens["agent"]) as client:
            async with anyio.create_task_group() as tg:
                box = {}

                async def call():
                    box["r"] = await client.call_tool("echo__echo", {"text": "held for roles"})

                tg.start_soon(call)
                with anyio.fail_after(10):
                    while not (
                        mine := [
                            p
                            for p in await in_thread(pending_for, c, "mcp__echo__echo")
                            if p["tool_args"] == {"text": "held for roles"}
                        ]
                    ):
                        await anyio.sleep(0.05)
                path = f"/v1/session/{mine[0]['session_id']}/confirm/{mine[0]['id']}"

                def post(token):
                    return httpx2.post(
                        c.url + path, json={"approve": True}, headers={"Authorization": f"Bearer {token}"}
                    )

                own, other_agent = await in_thread(post, tokens["agent"]), None
                with c.client_for("agent") as second:
                    other_agent = await in_thread(lambda: second.post(path, json={"approve": True}))
                approver = await in_thread(post, tokens["approver"])
            return own, other_agent, approver, box["r"]

    own, other_agent, approver, result = anyio.run(held)
    assert (own.status_code, own.json()) == (403, {"error": "a token may not reply to its own call"})
    assert (other_agent.status_code, other_agent.json()) == (
        403,
        {"error": "this token may not reply to confirmations"},
    )
    assert approver.status_code == 200 and result.content[0].text == "held for roles"


@pytest.mark.parametrize("mode", ERAS)
def test_it_keeps_progress_increasing_from_heartbeats_into_the_servers_own(console, mode):
    # Heartbeats while pending, then the upstream server's progress once approved: one
    # request's progress must still only go up (the server's is passed on past the beats).
    c = console({"prog": our_server("progress.py")})
    c.wait_connected("prog")
    _, result, progress, _ = approved_with_progress(c, mode, "prog__slow", {"steps": 3, "interval": 0.05})
    assert result.content[0].text == "finished"
    values = [p[0] for p in progress]
    assert values == sorted(set(values)), progress
    beats = [p for p in progress if p[2].startswith("waiting for approval")]
    steps = [p for p in progress if p[2].startswith("step ")]
    assert beats and [p[2] for p in steps] == ["step 1/3", "step 2/3", "step 3/3"]
    n = len(beats)
    assert [(p[0], p[1]) for p in steps] == [(n + 1, n + 3), (n + 2, n + 3), (n + 3, n + 3)]
