"""SPEC 25 (issue 44): guard rails. Limits in the rules file (25.1) and a repeated identical call
held for a person (25.2), on a live console (`manage.py serve`) through every door: `/v1`, the
MCP endpoint in both protocol eras (the SDK's `Client`), and Claude Code's HTTP hook; the pages
and `/metrics` say what happened. The parser's part is in tests/test_rules.py."""

import re
import time

import anyio
import pytest
from mcp import MCPError

from tests.claude_code import PERMISSION_REQUEST, PRE_TOOL_USE, payload
from tests.live import db_rows, our_server, rules, signed_in, wait_until
from tests.mcpclients import in_thread, mcp_client

pytestmark = pytest.mark.live


ERAS = ["legacy", "auto"]  # the 2025-11-25 handshake, and 2026-07-28 (what auto picks here)
HOOK = "/v1/hooks/claude-code"
REPEAT = "3/2m"  # AGENVOY_REPEAT_LIMIT of this module's console


@pytest.fixture(scope="module")
def c(module_console):
    servers = {"echo": our_server("echo.py"), "a": our_server("ui.py", "--name", "a")}
    env = {"AGENVOY_REPEAT_LIMIT": REPEAT, "AGENVOY_CONFIRM_TIMEOUT": "60"}
    console = module_console(servers, env, allow=["mcp__echo__add"])
    console.wait_connected("echo", "a")
    return console


@pytest.fixture
def agent(c):
    """A new agent token (its own counts), as an HTTP client."""
    client = c.client_for("agent")
    yield client
    client.close()


def secret_of(client) -> str:
    return client.headers["Authorization"].split()[1]


def call(client, name: str, arguments: dict, mode: str = "auto", **extra):
    body = {"name": name, "arguments": arguments, "mode": mode, **extra}
    return client.post("/v1/mcp/call", json=body)


def retry_in(text: str, line: str) -> int:
    found = re.fullmatch(rf"Rate limited by rule: {re.escape(line)}; retry in (\d+) s", text)
    assert found, text
    return int(found.group(1))


def metric(c, series: str) -> float:
    for row in c.get("/metrics").text.splitlines():
        if row.startswith(series + " "):
            return float(row.split()[-1])
    return 0.0


def on(c, mode: str, scenario, token: str):
    async def main():
        with anyio.fail_after(60):
            async with mcp_client(c, "/mcp", mode, token=token) as client:
                return await scenario(client)

    return anyio.run(main)


# --- 25.1 limits ------------------------------------------------------------------------------


def test_it_refuses_a_call_over_a_limit_on_v1_with_429_and_when_to_retry(c, agent):
    line = "limit 2/m mcp__echo__echo"
    before = metric(c, 'agenvoy_rate_limited_total{server="echo",tool="echo"}')
    with rules(c, line):
        for i in range(2):
            r = call(agent, "mcp__echo__echo", {"text": f"t{i}"})
            assert r.status_code == 200 and r.json()["result"] == f"t{i}", r.text
        r = call(agent, "mcp__echo__echo", {"text": "t2"})
        assert r.status_code == 429, r.text
        body = r.json()
        assert set(body) == {"error", "retry_after"}
        assert body["error"] == f"rate limited by rule: {line}"
        assert 1 <= body["retry_after"] <= 60 and r.headers["Retry-After"] == str(body["retry_after"])
        # Recorded `skipped`, nobody asked, nothing run; its result says when to retry.
        status, result, decided_by = db_rows(
            c,
            "select status, result, decided_by from mcpcore_toolcall where tool_name = ? "
            "order by created_at desc limit 1",
            "mcp__echo__echo",
        )[0]
        assert (status, decided_by) == ("skipped", "rule")
        assert retry_in(result, line) == body["retry_after"]
        # Another tool is not counted under that line.
        assert call(agent, "mcp__echo__add", {"a": 1, "b": 2}).status_code == 200
    assert metric(c, 'agenvoy_rate_limited_total{server="echo",tool="echo"}') == before + 1


def test_it_counts_each_token_apart(c, agent):
    line = "limit 1/m mcp__echo__echo"
    with rules(c, line), c.client_for("agent") as other:
        assert call(agent, "mcp__echo__echo", {"text": "a"}).status_code == 200
        assert call(agent, "mcp__echo__echo", {"text": "a"}).status_code == 429
        assert call(other, "mcp__echo__echo", {"text": "a"}).status_code == 200
        assert call(other, "mcp__echo__echo", {"text": "a"}).status_code == 429


def test_it_lets_a_call_through_again_once_the_window_slides(c, agent):
    line = "limit 2/s mcp__echo__add"
    with rules(c, line):
        answers = [call(agent, "mcp__echo__add", {"a": i, "b": 0}) for i in range(3)]
        codes = [r.status_code for r in answers]
        # Three calls in well under a second: the third is over (a very slow machine may have
        # let the window slide between them, then all three fit).
        if codes[2] == 429:
            assert answers[2].json()["retry_after"] == 1
            started = time.monotonic()
            fits = wait_until(
                lambda: call(agent, "mcp__echo__add", {"a": 9, "b": 0}).status_code == 200,
                5,
                what="the window sliding",
            )
            assert fits and time.monotonic() - started < 5


def test_it_lets_a_deny_rule_win_over_a_limit(c, agent):
    deny, limit = "deny mcp__echo__echo(text:secret*)", "limit 1/m mcp__echo__echo"
    with rules(c, deny, limit):
        assert call(agent, "mcp__echo__echo", {"text": "fine"}).status_code == 200
        r = call(agent, "mcp__echo__echo", {"text": "secret-1"})
        assert r.status_code == 200 and r.json()["result"] == f"Denied by rule: {deny}", r.text
        assert call(agent, "mcp__echo__echo", {"text": "fine"}).status_code == 429


def test_it_lists_limits_in_get_v1_rules_and_shows_them_on_the_rules_and_server_pages(c, agent):
    line = "limit 30/h mcp__echo__*"
    with rules(c, "# guard", line, "limit 5/s *"):
        listed = agent.get("/v1/rules").json()
        assert listed["rules"] == [
            {"line": 2, "decision": "limit", "pattern": "mcp__echo__*", "limit": "30/h"},
            {"line": 3, "decision": "limit", "pattern": "*", "limit": "5/s"},
        ]
        web = signed_in(c, "rules-reader")
        try:
            page = web.get("/rules/").text
            assert "30/h" in page and "mcp__echo__*" in page
            server_page = web.get("/servers/echo/").text
            assert line in server_page and "limit 5/s *" in server_page
            assert "limit 5/s *" in web.get("/servers/a/").text and line not in web.get("/servers/a/").text
        finally:
            web.close()


@pytest.mark.parametrize("mode", ERAS)
def test_it_answers_mcp_clients_a_tool_error_and_minus_32001_for_reads(c, agent, mode):
    tool, prompt, read = (
        "limit 1/m mcp__echo__add",
        "limit 1/m prompt:mcp__a__hello",
        "limit 1/m resource:a(uri:test://a/*)",
    )

    async def scenario(client):
        first = await client.call_tool("echo__add", {"a": 1, "b": 2})  # allow-listed: runs
        second = await client.call_tool("echo__add", {"a": 1, "b": 2})
        await client.get_prompt("a__hello")
        with pytest.raises(MCPError) as got_prompt:
            await client.get_prompt("a__hello")
        await client.read_resource("test://a/counter")
        with pytest.raises(MCPError) as got_read:
            await client.read_resource("test://a/counter")
        return first, second, got_prompt.value.error, got_read.value.error

    with rules(c, tool, prompt, read):
        first, second, prompt_error, read_error = on(c, mode, scenario, secret_of(agent))
    assert not first.is_error
    assert second.is_error and retry_in(second.content[0].text, tool) >= 1
    assert prompt_error.code == -32001 and retry_in(prompt_error.message, prompt) >= 1
    assert read_error.code == -32001 and retry_in(read_error.message, read) >= 1


@pytest.mark.parametrize("mode", ERAS)
def test_it_counts_every_call_under_a_star_limit_prompt_gets_and_reads_included(c, agent, mode):
    line = "limit 3/m *"

    async def scenario(client):
        await client.get_prompt("a__hello")
        await client.read_resource("test://a/counter")
        assert not (await client.call_tool("echo__add", {"a": 1, "b": 1})).is_error
        over = await client.call_tool("echo__echo", {"text": "y"})
        with pytest.raises(MCPError) as refused:
            await client.get_prompt("a__hello")
        return over, refused.value.error

    with rules(c, line):
        over, refused = on(c, mode, scenario, secret_of(agent))
    assert over.is_error and retry_in(over.content[0].text, line) >= 1
    assert refused.code == -32001 and retry_in(refused.message, line) >= 1


def test_it_denies_a_claude_code_hook_over_a_limit(c, agent):
    line = "limit 1/m Bash"
    with rules(c, "allow Bash", line):
        first = agent.post(HOOK, json=payload(PERMISSION_REQUEST), params={"wait": 5}).json()
        assert first["hookSpecificOutput"]["decision"] == {"behavior": "allow"}
        over = agent.post(HOOK, json=payload(PERMISSION_REQUEST), params={"wait": 600}).json()
        decision = over["hookSpecificOutput"]["decision"]
        assert decision["behavior"] == "deny" and retry_in(decision["message"], line) >= 1
        pre = agent.post(HOOK, json=payload(PRE_TOOL_USE), params={"wait": 600}).json()["hookSpecificOutput"]
        assert pre["permissionDecision"] == "deny" and retry_in(pre["permissionDecisionReason"], line) >= 1


# --- 25.2 loops -------------------------------------------------------------------------------


def held_item(c, call_id: str) -> dict:
    items = [p for p in c.get("/v1/pending").json()["pending"] if p["call_id"] == call_id]
    assert items, f"call {call_id} is not pending"
    return items[0]


@pytest.mark.parametrize(
    "name, arguments, other, mode, rule",
    [
        ("mcp__echo__echo", {"text": "loop"}, {"text": "loop2"}, "auto", None),
        ("mcp__echo__add", {"a": 2, "b": 2}, {"b": 2, "a": 3}, "confirm", None),  # allow-listed
        ("mcp__echo__big", {"n": 3}, {"n": 4}, "confirm", "allow mcp__echo__big"),
    ],
    ids=["auto", "allow-listed", "allow-ruled"],
)
def test_it_holds_the_call_after_n_identical_ones_for_a_person(c, agent, name, arguments, other, mode, rule):
    labels = f'server="echo",tool="{name.rpartition("__")[2]}"'
    before = metric(c, f"agenvoy_repeats_held_total{{{labels}}}")
    with rules(c, *([rule] if rule else [])):
        for _ in range(3):
            r = call(agent, name, arguments, mode)
            assert r.status_code == 200 and r.json()["status"] == "done", r.text
        # Other arguments are another call: not counted with these.
        assert call(agent, name, other, mode).json()["status"] == "done"
        r = call(agent, name, arguments, mode, wait=0)
        assert r.status_code == 202 and r.json()["status"] == "pending", r.text
        item = held_item(c, r.json()["call_id"])
        assert item["repeated"] == 3
        web = signed_in(c, f"loop-{name.rpartition('__')[2]}")
        try:
            assert "Repeated 3 times in 2m" in web.get("/pending/").text
            assert "Repeated 3 times in 2m" in web.get(f"/pending/{item['id']}/").text
        finally:
            web.close()
        assert c.reply(item["session_id"], item["id"], {"approve": True}).status_code == 200
        done = agent.get(f"/v1/mcp/calls/{item['call_id']}", params={"wait": 30}).json()
        assert done["status"] == "done"
        # Approved: that call's count starts again: three more run, the fourth is held.
        for _ in range(3):
            assert call(agent, name, arguments, mode).json()["status"] == "done"
        assert call(agent, name, arguments, mode, wait=0).json()["status"] == "pending"
    assert metric(c, f"agenvoy_repeats_held_total{{{labels}}}") == before + 2


def test_it_lets_a_deny_rule_win_over_a_repeat(c, agent):
    deny = "deny mcp__echo__echo(text:nope*)"
    with rules(c, deny):
        for _ in range(5):
            r = call(agent, "mcp__echo__echo", {"text": "nope"}, wait=0)
            assert r.status_code == 200 and r.json()["result"] == f"Denied by rule: {deny}", r.text
        # The same loop of a call no rule denies is held at its fourth.
        for _ in range(3):
            assert call(agent, "mcp__echo__echo", {"text": "fine"}).json()["status"] == "done"
        assert call(agent, "mcp__echo__echo", {"text": "fine"}, wait=0).json()["status"] == "pending"
        # Once held, a denied spelling of it is still denied at once, not held.
        r = call(agent, "mcp__echo__echo", {"text": "nope"}, wait=0)
        assert r.json()["result"] == f"Denied by rule: {deny}", r.text


def test_it_counts_repeats_per_token(c, agent):
    for _ in range(3):
        assert call(agent, "mcp__echo__echo", {"text": "same"}).json()["status"] == "done"
    with c.client_for("agent") as other:
        for _ in range(3):
            assert call(other, "mcp__echo__echo", {"text": "same"}).json()["status"] == "done"
        assert call(other, "mcp__echo__echo", {"text": "same"}, wait=0).json()["status"] == "pending"
    assert call(agent, "mcp__echo__echo", {"text": "same"}, wait=0).json()["status"] == "pending"


@pytest.mark.parametrize("mode", ERAS)
def test_it_tells_a_waiting_mcp_client_why_its_repeat_is_held(c, agent, mode):
    progress: list[str] = []

    async def on_progress(value, total, message):
        progress.append(message)

    args = {"a": len(mode), "b": 100}  # an allow-listed tool: it runs unasked until repeated

    async def scenario(client):
        for _ in range(3):
            assert not (await client.call_tool("echo__add", args)).is_error
        async with anyio.create_task_group() as tg:
            box = {}

            async def held():
                box["r"] = await client.call_tool("echo__add", args, progress_callback=on_progress)

            tg.start_soon(held)
            with anyio.fail_after(20):
                while not progress:
                    await anyio.sleep(0.05)
            items = [
                p
                for p in (await in_thread(lambda: c.get("/v1/pending").json()["pending"]))
                if p["tool_args"] == args and p["repeated"] == 3
            ]
            assert len(items) == 1
            await in_thread(lambda: c.reply(items[0]["session_id"], items[0]["id"], {"approve": True}))
        return box["r"]

    result = on(c, mode, scenario, secret_of(agent))
    assert not result.is_error and result.content[0].text == str(len(mode) + 100)
    assert progress[0].startswith("waiting for approval") and "Repeated 3 times in 2m" in progress[0]


def test_it_holds_a_repeated_claude_code_permission_request(c, agent, pool):
    with rules(c, "allow Edit"):
        body = payload(PERMISSION_REQUEST, tool_name="Edit", tool_input={"file_path": "/tmp/x"})
        for _ in range(3):
            answer = agent.post(HOOK, json=body, params={"wait": 5}).json()
            assert answer["hookSpecificOutput"]["decision"] == {"behavior": "allow"}
        held = pool.submit(agent.post, HOOK, json=body, params={"wait": 60})
        items = wait_until(
            lambda: [
                p
                for p in c.get("/v1/pending").json()["pending"]
                if p["session_id"] == f"cc:{body['session_id']}"
            ],
            20,
            what="the repeated prompt in the inbox",
        )
        assert items[0]["repeated"] == 3 and items[0]["kind"] == "permission_prompt"
        assert c.reply(items[0]["session_id"], items[0]["id"], {"approve": True}).status_code == 200
        decision = held.result(30).json()["hookSpecificOutput"]["decision"]
        assert decision == {"behavior": "allow"}
