"""Issue 21 against a real `manage.py serve`, through the doors MCP clients use:

- SPEC 17.4: what MCP clients probe (OAuth discovery of what the console does not serve answers
  JSON 404s, and the MCP endpoints' 401 names the realm, its metadata (21.1), and
  `invalid_token` for a token the console does not accept);
- SPEC 17.3: a time-boxed grant holds on `/mcp`, `/mcp/<server>` and `/mcp/_permission` too
  (the MCP SDK's own client makes the calls), for the token it was granted to only.
"""

import json

import anyio
import httpx2
import pytest

from tests.live import our_server, wait_until
from tests.mcpclients import in_thread, mcp_client, pending_for, wait_pending

pytestmark = pytest.mark.live

PUBLIC = "http://127.0.0.1:8000"  # AGENVOY_PUBLIC_URL's default: these consoles name no other


@pytest.fixture(scope="module")
def c(module_console):
    console = module_console({"echo": our_server("echo.py")})
    console.wait_connected("echo")
    return console


async def answered(c, tool_name: str, make_call, body: dict):
    """Runs `make_call()` until its item is in the inbox, replies `body` to it as the approver,
    and returns the call's result and the reply."""
    box = {}
    async with anyio.create_task_group() as tg:

        async def run():
            box["r"] = await make_call()

        tg.start_soon(run)
        item = await wait_pending(c, tool_name, 15)
        box["reply"] = await in_thread(lambda: c.reply(item["session_id"], item["id"], body))
    return box["r"], box["reply"]


@pytest.mark.parametrize(
    "path",
    [
        "/.well-known/oauth-protected-resource/mcp/nope",
        "/.well-known/oauth-protected-resource/v1",
        "/.well-known/oauth-authorization-server/mcp/echo",
        "/.well-known/openid-configuration",
        "/.well-known/openid-configuration/mcp",
        # Anything else under /.well-known/ too (SPEC 17.4), not Django's HTML page.
        "/.well-known/acc-nothing-here",
        "/.well-known/",
        "/.well-known/security.txt",
        "/.well-known/webfinger/a/b",
    ],
)
def test_it_answers_oauth_discovery_probes_with_a_json_404(c, path):
    for headers in ({}, {"Authorization": f"Bearer {c.token}"}):
        r = httpx2.get(c.url + path, headers=headers, follow_redirects=False)
        assert r.status_code == 404, path
        assert r.headers["content-type"] == "application/json"
        assert r.json() == {"error": "not found"}


def test_it_names_the_realm_and_an_invalid_token_in_the_mcp_401(c):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    for path in ("/mcp", "/mcp/echo", "/mcp/_permission"):
        # SPEC 21.1: the absolute URL of the endpoint's metadata, and the scope.
        named = f'Bearer realm="agenvoy", resource_metadata="{PUBLIC}/.well-known/oauth-protected-resource{path}", scope="mcp"'
        for headers, challenge in (
            ({}, named),
            ({"Authorization": f"Basic {c.token}"}, named),
            ({"Authorization": "Bearer agv_not-a-token"}, f'{named}, error="invalid_token"'),
        ):
            r = httpx2.post(c.url + path, json=init, headers=headers)
            assert r.status_code == 401
            assert r.headers["www-authenticate"] == challenge, (path, headers)
            assert r.json() == {"error": "authentication required"}


def test_it_lets_a_grant_hold_on_every_mcp_door_for_its_token_only(c):
    agent_client = c.client_for("agent", "cursor-laptop")
    agent = agent_client.headers["Authorization"].removeprefix("Bearer ")
    other_client = c.client_for("agent", "ci-runner")
    other = other_client.headers["Authorization"].removeprefix("Bearer ")

    async def call(path: str, name: str, args: dict, token: str):
        async with mcp_client(c, path, "legacy", token=token) as client:
            return await client.call_tool(name, args)

    async def main():
        # The first call waits; it is approved for an hour (remember_for) by the approver.
        first, r = await answered(
            c,
            "mcp__echo__echo",
            lambda: call("/mcp", "echo__echo", {"text": "one"}, agent),
            {"approve": True, "remember_for": 3600},
        )
        assert r.status_code == 200, r.text
        assert first.content[0].text == "one"
        # Then at once, on /mcp and on /mcp/echo, in new sessions.
        with anyio.fail_after(20):
            assert (await call("/mcp", "echo__echo", {"text": "two"}, agent)).content[0].text == "two"
            assert (await call("/mcp/echo", "echo", {"text": "three"}, agent)).content[0].text == "three"
        # Another token's call of the same tool still waits for a person.
        theirs, _ = await answered(
            c,
            "mcp__echo__echo",
            lambda: call("/mcp/echo", "echo", {"text": "four"}, other),
            {"approve": False},
        )
        assert theirs.is_error and theirs.content[0].text == "Skipped by user"

        # A permission prompt on /mcp/_permission: granted for a while, by tool name.
        prompt = {"tool_name": "Bash", "input": {"command": "make"}}
        asked, _ = await answered(
            c,
            "Bash",
            lambda: call("/mcp/_permission", "approval_prompt", prompt, agent),
            {"approve": True, "remember_for": 600},
        )
        assert json.loads(asked.content[0].text)["behavior"] == "allow"
        with anyio.fail_after(20):
            again = await call(
                "/mcp/_permission", "approval_prompt", {**prompt, "input": {"command": "make test"}}, agent
            )
        assert json.loads(again.content[0].text) == {
            "behavior": "allow",
            "updatedInput": {"command": "make test"},
        }

    try:
        anyio.run(main)
    finally:
        agent_client.close()
        other_client.close()


def test_it_answers_hooks_under_a_grant_made_on_another_door(c):
    with c.client_for("agent", "claude-desktop") as agent:
        body = {
            "hook_event_name": "PreToolUse",
            "session_id": "x",
            "tool_name": "WebFetch",
            "tool_input": {"url": "u"},
        }
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            held = pool.submit(agent.post, "/v1/hooks/claude-code", json=body, params={"wait": 30})
            item = wait_until(lambda: (pending_for(c, "WebFetch") or [None])[0], 15)
            c.reply(item["session_id"], item["id"], {"approve": True, "remember_for": 120})
            assert held.result(30).json()["hookSpecificOutput"]["permissionDecision"] == "allow"
        later = agent.post("/v1/hooks/claude-code", json={**body, "session_id": "y"}, params={"wait": 600})
        assert later.json()["hookSpecificOutput"] == {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "Approved in the console by grant",
        }
