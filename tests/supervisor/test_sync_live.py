"""Edits to `allow_tool` and `mcp.json` made behind the running console's back (SPEC 2)."""

import json
import time

import pytest

from tests.live import db_rows, our_server, wait_until

pytestmark = pytest.mark.live


@pytest.fixture
def c(console):
    c = console({"echo": our_server("echo.py")})
    c.wait_connected("echo")
    return c


def test_it_mirrors_an_external_allow_tool_edit_within_2s(c):
    (c.home / "allow_tool").write_text("# written by the Agenvoy CLI\nmcp__echo__echo\n\nmcp__other__*\n")
    started = time.monotonic()
    wait_until(
        lambda: (
            sorted(r[0] for r in db_rows(c, "select entry from mcpcore_allowentry"))
            == ["mcp__echo__echo", "mcp__other__*"]
        ),
        2.0,
        what="allow entries mirrored",
    )
    assert time.monotonic() - started < 2.0
    # And the gate follows the file: the listed tool runs without asking.
    r = c.call("mcp__echo__echo", {"text": "trusted"})
    assert r.status_code == 200 and r.json()["result"] == "trusted"


def test_it_mirrors_an_external_mcp_json_edit_within_2s(c):
    data = json.loads((c.home / "mcp.json").read_text())
    data["servers"]["second"] = our_server("echo.py")
    data["servers"]["echo"]["x-note"] = "kept"
    (c.home / "mcp.json").write_text(json.dumps(data))
    started = time.monotonic()
    wait_until(lambda: "second" in c.get("/v1/mcp").json()["servers"], 2.0, what="server mirrored")
    assert time.monotonic() - started < 2.0
    c.wait_connected("second", timeout=15)


def test_it_reports_a_broken_mcp_json_and_keeps_the_last_good_list(c):
    before_status = c.status()
    broken = '{"servers": {"echo": {"command": '
    (c.home / "mcp.json").write_text(broken)
    wait_until(
        lambda: (
            db_rows(c, "select error from mcpcore_filestate where name='mcp.json'")
            and db_rows(c, "select error from mcpcore_filestate where name='mcp.json'")[0][0]
        ),
        3.0,
        what="problem recorded",
    )
    assert "mcp.json is not valid JSON" in c.log_text()
    # The broken file stays untouched for a while on purpose: the wait is what is tested
    # (no tick in it may rewrite the file or drop the running server).
    time.sleep(1.5)
    # Left as it was, the running server still connected and callable.
    assert (c.home / "mcp.json").read_text() == broken
    assert c.status()["echo"]["state"] == "connected" == before_status["echo"]["state"]
    assert c.call("mcp__echo__echo", {"text": "still"}, mode="auto").json()["result"] == "still"
    # An edit through the API refuses to overwrite it.
    r = c.post("/v1/mcp", {"name": "new", "server": {"command": "x"}})
    assert r.status_code == 409 and "not valid JSON" in r.json()["error"]
    assert (c.home / "mcp.json").read_text() == broken
