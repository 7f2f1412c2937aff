"""Issue 10's scenario against a real console: an agent token can't approve its own call, trust
tools or add servers; an approver answers; session allowances and revocation per token."""

import contextlib

import pytest

from tests.live import our_server, signed_in, token_id

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def c(module_console):
    console = module_console({"echo": our_server("echo.py")})
    console.wait_connected("echo")
    (console.home / "allow_tool").write_text("# trusted by the operator\nmcp__other__*\n")
    return console


def _pending(client, text: str) -> dict:
    r = client.post("/v1/mcp/call", json={"name": "mcp__echo__echo", "arguments": {"text": text}, "wait": 0})
    assert r.status_code == 202, r.text
    return r.json()


def _reply(client, body: dict, **reply):
    return client.post(f"/v1/session/{body['session_id']}/confirm/{body['confirm_id']}", json=reply)


def test_it_replays_the_issue_an_agent_can_not_approve_trust_or_add_and_an_approver_can(c):
    allow_before = (c.home / "allow_tool").read_bytes()
    mcp_before = (c.home / "mcp.json").read_bytes()
    with c.client_for("agent", "probe", may_auto=False) as probe, c.client_for("approver", "alice") as alice:
        body = _pending(probe, "hello")
        for reply in (
            {"approve": True},
            {"approve": True, "remember": True},
            {"approve": True, "allow_turn": True},
        ):
            r = _reply(probe, body, **reply)
            assert r.status_code == 403 and r.json() == {"error": "a token may not reply to its own call"}
        r = probe.post("/v1/allowlist", json={"tool": {"prefix": "mcp", "entries": ["mcp*"]}})
        assert r.status_code == 403 and r.json() == {"error": "this token may not change the allow-list"}
        r = probe.post("/v1/mcp", json={"name": "sh", "server": {"command": "sh", "args": ["-c", "id"]}})
        assert r.status_code == 403 and r.json() == {"error": "this token may not change servers"}
        r = probe.post("/v1/mcp/remove", json={"name": "echo"})
        assert r.status_code == 403 and r.json() == {"error": "this token may not change servers"}
        r = probe.get("/v1/mcp")
        assert r.status_code == 403 and r.json() == {"error": "this token may not read server configuration"}
        r = probe.post(
            "/v1/mcp/call", json={"name": "mcp__echo__echo", "arguments": {"text": "x"}, "mode": "auto"}
        )
        assert r.status_code == 403 and r.json() == {"error": "this token may not use auto mode"}
        assert (c.home / "allow_tool").read_bytes() == allow_before
        assert (c.home / "mcp.json").read_bytes() == mcp_before
        assert c.status()["echo"]["state"] == "connected"
        # Still waiting: nothing the agent did decided it.
        assert probe.get(f"/v1/mcp/calls/{body['call_id']}").json()["status"] == "pending"

        r = _reply(alice, body, approve=True)
        assert r.status_code == 200 and r.json() == {"ok": True}
        done = probe.get(f"/v1/mcp/calls/{body['call_id']}", params={"wait": 30}).json()
        assert (done["status"], done["result"]) == ("done", "hello")
        assert (done["decision"], done["decided_by"]) == ("approve", "token:alice")


def test_it_gives_another_token_nothing_from_an_allowance_for_the_same_session_id(c):
    with c.client_for("agent") as first, c.client_for("agent") as second, c.client_for("approver") as alice:
        body = _pending(first, "one")
        sid = body["session_id"]
        assert _reply(alice, body, approve=True, allow_turn=True).status_code == 200
        r = first.post(
            "/v1/mcp/call", json={"name": "mcp__echo__echo", "arguments": {"text": "two"}, "session_id": sid}
        )
        assert r.status_code == 200 and r.json()["result"] == "two"
        r = second.post(
            "/v1/mcp/call",
            json={"name": "mcp__echo__echo", "arguments": {"text": "3"}, "session_id": sid, "wait": 0},
        )
        assert r.status_code == 202 and r.json()["status"] == "pending"
        # And the first agent can't see, wait on or cancel the second's call.
        other = r.json()["call_id"]
        assert first.get(f"/v1/mcp/calls/{other}").status_code == 404
        assert first.post(f"/v1/mcp/calls/{other}/cancel").status_code == 404
        assert other not in {p["call_id"] for p in first.get("/v1/pending").json()["pending"]}
        assert other in {p["call_id"] for p in alice.get("/v1/pending").json()["pending"]}


def test_it_ends_a_revoked_tokens_pending_calls_and_answers_401_next(c):
    web = signed_in(c)
    with c.client_for("agent", "leaving") as leaving, contextlib.closing(web):
        bodies = [_pending(leaving, f"n{i}") for i in range(3)]
        ids = {b["call_id"] for b in bodies}
        assert ids <= {p["call_id"] for p in c.get("/v1/pending").json()["pending"]}
        r = web.post(
            f"/tokens/{token_id(c, 'leaving')}/revoke/",
            data={"csrfmiddlewaretoken": web.cookies["csrftoken"]},
            headers={"Referer": c.url + "/tokens/"},
        )
        assert r.status_code == 302, r.text
        ended = [c.get(f"/v1/mcp/calls/{b['call_id']}").json() for b in bodies]
        assert [(e["status"], e["result"]) for e in ended] == [("cancelled", "token revoked")] * 3
        assert not ids & {p["call_id"] for p in c.get("/v1/pending").json()["pending"]}
        r = leaving.post("/v1/mcp/call", json={"name": "mcp__echo__echo", "arguments": {"text": "x"}})
        assert r.status_code == 401 and r.json() == {"error": "authentication required"}
