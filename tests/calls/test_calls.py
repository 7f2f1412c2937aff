"""Tool calls through the confirmation gate, end to end over /v1 (SPEC 4, 5, 7; issue 4)."""

import base64
import json
import os
import signal
import time

import pytest

from tests.live import everything_stdio, our_server, server_pids, wait_until

pytestmark = pytest.mark.live

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def c(module_console):
    console = module_console(
        {"every": everything_stdio(), "echo": our_server("echo.py")}, {"AGENVOY_CALL_TIMEOUT": "2"}
    )
    console.wait_connected("every", "echo")
    return console


def pending_ids(c) -> set[str]:
    return {p["id"] for p in c.get("/v1/pending").json()["pending"]}


def start_pending(c, name="mcp__every__get-sum", args=None, **extra):
    r = c.call(name, args or {"a": 2, "b": 3}, wait=0, **extra)
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["status"] == "pending" and body["confirm_id"]
    return body


def confirm(c, body, **reply):
    return c.reply(body["session_id"], body["confirm_id"], reply)


def test_it_returns_an_image_as_a_data_url_that_decodes_to_png(c):
    r = c.call("mcp__every__get-tiny-image", {}, mode="auto")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "done"
    result = json.loads(body["result"])
    prefix = "data:image/png;base64,"
    assert result["image_0"].startswith(prefix)
    assert base64.b64decode(result["image_0"][len(prefix) :]).startswith(PNG)
    assert "text" in result


def test_it_runs_auto_calls_at_once(c):
    r = c.call("mcp__every__get-sum", {"a": 2, "b": 40}, mode="auto")
    assert r.status_code == 200
    assert r.json()["status"] == "done" and "42" in r.json()["result"]
    r = c.call("mcp__every__get-sum", {"a": 1, "b": 1}, mode="always-allow")
    assert r.json()["status"] == "done"


def test_it_waits_for_approval_then_runs(c):
    body = start_pending(c)
    pend = c.get("/v1/pending").json()["pending"]
    mine = [p for p in pend if p["id"] == body["confirm_id"]]
    assert mine and mine[0]["kind"] == "tool_confirm"
    assert mine[0]["tool_name"] == "mcp__every__get-sum" and mine[0]["tool_args"] == {"a": 2, "b": 3}
    assert mine[0]["call_id"] == body["call_id"] and mine[0]["session_id"] == body["session_id"]
    assert confirm(c, body, approve=True).json() == {"ok": True}
    done = c.get(f"/v1/mcp/calls/{body['call_id']}", wait=10).json()
    assert done["status"] == "done" and "5" in done["result"]
    assert done["decision"] == "approve" and done["decided_by"] == "token:tests-approver"
    assert body["confirm_id"] not in pending_ids(c)
    again = confirm(c, body, approve=True)
    assert again.status_code == 410
    assert again.json() == {"error": "confirmation already resolved or expired"}


def test_it_returns_skipped_with_the_reason_on_deny(c):
    body = start_pending(c)
    confirm(c, body, approve=False, reason="not today")
    done = c.get(f"/v1/mcp/calls/{body['call_id']}", wait=5).json()
    assert done["status"] == "skipped"
    assert done["result"] == "Skipped by user. Reason: not today"
    body = start_pending(c)
    confirm(c, body, approve=False)
    assert c.get(f"/v1/mcp/calls/{body['call_id']}").json()["result"] == "Skipped by user"


def test_it_answers_a_waiting_call_when_approved(c):
    import threading

    out = {}

    def call():
        out["r"] = c.call("mcp__every__get-sum", {"a": 20, "b": 22}, session_id="waiting-s", wait=20)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    pend = wait_until(
        lambda: [p for p in c.get("/v1/pending").json()["pending"] if p["session_id"] == "waiting-s"], 10
    )
    c.reply("waiting-s", pend[0]["id"], {"approve": True})
    t.join(20)
    assert out["r"].status_code == 200 and "42" in out["r"].json()["result"]


def test_it_aborts(c):
    body = start_pending(c)
    confirm(c, body, approve=False, abort=True)
    done = c.get(f"/v1/mcp/calls/{body['call_id']}").json()
    assert done["status"] == "aborted" and done["result"] == "user stopped" and done["abort"] is True


def test_it_answers_404_for_unknown_or_foreign_confirmations(c):
    body = start_pending(c)
    r = c.post(f"/v1/session/other-session/confirm/{body['confirm_id']}", {"approve": True})
    assert r.status_code == 404 and r.json() == {"error": "confirmation not found"}
    r = c.post(f"/v1/session/{body['session_id']}/confirm/not-a-uuid", {"approve": True})
    assert r.status_code == 404 and r.json() == {"error": "confirmation not found"}
    confirm(c, body, approve=False)


def test_it_remembers_an_approved_tool_in_allow_tool_and_then_runs_it_at_once(c):
    body = start_pending(c, "mcp__every__echo", {"message": "hi"})
    confirm(c, body, approve=True, remember=True)
    assert c.get(f"/v1/mcp/calls/{body['call_id']}", wait=10).json()["status"] == "done"
    lines = (c.home / "allow_tool").read_text().splitlines()
    assert "mcp__every__echo" in lines
    r = c.call("mcp__every__echo", {"message": "again"})
    assert r.status_code == 200 and r.json()["status"] == "done"
    c.post("/v1/allowlist", {"tool": {"prefix": "mcp__every__", "entries": []}})


def test_it_runs_allow_listed_tools_at_once(c):
    c.post("/v1/allowlist", {"tool": {"prefix": "mcp__echo__", "entries": ["mcp__echo__*"]}})
    r = c.call("mcp__echo__echo", {"text": "listed"})
    assert r.status_code == 200 and r.json()["result"] == "listed"
    c.post("/v1/allowlist", {"tool": {"prefix": "mcp__echo__", "entries": []}})


def test_it_runs_every_tool_of_a_session_allowed_for_the_session(c):
    body = start_pending(c, session_id="sess-allow")
    confirm(c, body, approve=True, allow_turn=True)
    r = c.call("mcp__every__get-sum", {"a": 1, "b": 2}, session_id="sess-allow")
    assert r.status_code == 200 and r.json()["status"] == "done"
    r = c.call("mcp__every__get-sum", {"a": 1, "b": 2}, session_id="another", wait=0)
    assert r.status_code == 202


def test_it_rejects_bad_requests_with_clear_errors(c):
    r = c.call("mcp__every__nope", {})
    assert r.status_code == 404 and r.json() == {"error": "unknown tool: mcp__every__nope"}
    r = c.post("/v1/mcp/call", {"name": "mcp__every__echo", "arguments": [1, 2]})
    assert r.status_code == 400 and "arguments" in r.json()["error"]
    r = c.call("mcp__every__echo", {}, mode="yolo")
    assert r.status_code == 400 and r.json() == {"error": "unknown mode: yolo"}
    r = c.call("mcp__every__echo", {}, wait=301)
    assert r.status_code == 400
    r = c.get("/v1/mcp/calls/00000000-0000-0000-0000-000000000000")
    assert r.status_code == 404 and r.json() == {"error": "call not found"}


def test_it_bars_auto_for_tokens_without_the_right(c):
    token = c.manage("create_token", "noauto", "--no-auto").strip()
    import httpx2

    r = httpx2.post(
        c.url + "/v1/mcp/call",
        json={"name": "mcp__every__echo", "mode": "auto", "arguments": {"message": "x"}},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 403 and r.json() == {"error": "this token may not use auto mode"}


def test_it_ends_a_call_at_its_timeout(c):
    r = c.call("mcp__echo__sleep", {"seconds": 10}, mode="auto")
    body = r.json()
    assert body["status"] == "error"
    assert body["result"] == 'tool "mcp__echo__sleep" timed out after 2s'
    r = c.call("mcp__echo__echo", {"text": "still fine"}, mode="auto")
    assert r.json()["result"] == "still fine"


def test_it_keeps_a_call_with_progress_alive_past_the_timeout_and_can_cancel_it(c):
    # 4 s in 8 steps of 0.5 s: longer than the 2 s timeout, each step well inside it.
    started = time.monotonic()
    r = c.call("mcp__every__trigger-long-running-operation", {"duration": 4, "steps": 8}, mode="auto")
    assert r.json()["status"] == "done", r.text
    assert "completed" in r.json()["result"] and time.monotonic() - started >= 4
    r = c.call(
        "mcp__every__trigger-long-running-operation", {"duration": 30, "steps": 60}, mode="auto", wait=0
    )
    assert r.status_code == 202
    call_id = r.json()["call_id"]
    wait_until(lambda: c.get(f"/v1/mcp/calls/{call_id}").json()["started_at"], 10, what="call started")
    assert c.post(f"/v1/mcp/calls/{call_id}/cancel").json() == {"ok": True}
    done = c.get(f"/v1/mcp/calls/{call_id}", wait=5).json()
    assert done["status"] == "cancelled"
    r = c.post(f"/v1/mcp/calls/{call_id}/cancel")
    assert r.status_code == 409 and r.json() == {"error": "call already ended"}


def test_it_cancels_a_pending_call(c):
    body = start_pending(c)
    assert c.post(f"/v1/mcp/calls/{body['call_id']}/cancel").json() == {"ok": True}
    assert c.get(f"/v1/mcp/calls/{body['call_id']}").json()["status"] == "cancelled"
    assert confirm(c, body, approve=True).status_code == 410


def test_it_turns_a_tool_error_into_an_error_result(c):
    r = c.call("mcp__echo__fail", {}, mode="auto")
    body = r.json()
    assert body["status"] == "error"
    assert body["result"].startswith("tool error: ") and body["result"].endswith("fail was called")


def test_it_expires_an_unanswered_confirmation(console):
    c = console({"echo": our_server("echo.py")}, {"AGENVOY_CONFIRM_TIMEOUT": "1"})
    c.wait_connected("echo")
    body = c.call("mcp__echo__echo", {"text": "x"}, wait=0).json()
    done = c.get(f"/v1/mcp/calls/{body['call_id']}", wait=5).json()
    assert done["status"] == "expired"
    assert done["result"] == "Skipped by user. Reason: confirmation expired"
    r = c.reply(body["session_id"], body["confirm_id"], {"approve": True})
    assert r.status_code == 410


def test_it_keeps_a_pending_call_across_a_restart_and_runs_it_after_approval(console):
    c = console({"echo": our_server("echo.py")})
    c.wait_connected("echo")
    body = c.call("mcp__echo__echo", {"text": "survivor"}, wait=0).json()
    assert c.stop(signal.SIGTERM) < 5
    c.start()
    assert body["confirm_id"] in pending_ids(c)
    c.wait_connected("echo")
    confirm(c, body, approve=True)
    done = c.get(f"/v1/mcp/calls/{body['call_id']}", wait=10).json()
    assert done["status"] == "done" and done["result"] == "survivor"


def test_it_retries_once_on_a_renewed_session_when_the_server_dies_mid_call(console):
    c = console({"echo": our_server("echo.py")})
    c.wait_connected("echo")
    log = c.data / "logs" / "echo.stderr.log"
    r = c.call("mcp__echo__sleep", {"seconds": 1.5}, mode="auto", wait=0)
    call_id = r.json()["call_id"]
    wait_until(lambda: log.exists() and "sleep started" in log.read_text(), 10, what="the call in the server")
    os.kill(server_pids(c, "echo.py")[0], signal.SIGKILL)
    done = c.get(f"/v1/mcp/calls/{call_id}", wait=30).json()
    assert done["status"] == "done" and done["result"] == "slept", done
    assert log.read_text().count("sleep started") == 2  # the first attempt, and the retry


def test_it_dispatches_the_original_name_of_a_tool_registered_trimmed(console):
    # SPEC 3: the registered name is trimmed, but the server is called by the name it gave.
    c = console({"sp": our_server("spaced.py")})
    c.wait_connected("sp")
    assert "mcp__sp__spaced" in c.tools()
    r = c.call("mcp__sp__spaced", {}, mode="auto")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "done", r.json()
    assert r.json()["result"] == "ran the tool named ' spaced '"
