"""The supervisor against real MCP servers over real pipes and sockets (SPEC 6, issue 3)."""

import os
import signal
import subprocess
import time

import httpx2
import psutil
import pytest

from tests.live import (
    EVERYTHING,
    PYTHON,
    SERVERS,
    TIME_SERVER,
    descendants,
    everything_stdio,
    free_port,
    our_server,
    over_http,
    server_pids,
    wait_until,
)

pytestmark = pytest.mark.live


@pytest.fixture
def everything_http():
    """server-everything over streamable HTTP on a free port."""
    port = free_port()
    proc = subprocess.Popen(
        ["node", str(EVERYTHING), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"

    def up():
        try:
            httpx2.get(url, timeout=1)
            return True
        except httpx2.HTTPError:
            return False

    try:
        wait_until(up, 20, what="server-everything HTTP")
        yield url
    finally:  # also when it never came up: no server outlives the test
        proc.terminate()
        proc.wait(5)


def test_it_registers_real_servers_over_stdio_and_http(console, everything_http):
    c = console(
        {
            "every": everything_stdio(),
            "everyhttp": {"url": everything_http},
            "time": {"command": str(TIME_SERVER)},
        }
    )
    status = c.wait_connected("every", "everyhttp", "time")
    assert status["every"]["Transport"] == "stdio"
    assert status["everyhttp"]["Transport"] == "streamable-http"
    assert status["every"]["Error"] == "" and status["every"]["Connected"] is True
    tools = c.tools()
    for prefix in ("mcp__every__", "mcp__everyhttp__"):
        names = {n for n in tools if n.startswith(prefix)}
        # 13, and the two that ask the client (it registers them only for a client that
        # declares form and URL elicitation, as the console does: SPEC 20.4).
        assert len(names) == 15, names
        assert {prefix + "echo", prefix + "get-sum", prefix + "get-tiny-image"} <= names
        assert {prefix + "trigger-elicitation-request", prefix + "trigger-url-elicitation"} <= names
    get_sum = tools["mcp__every__get-sum"]["parameters"]
    assert set(get_sum["properties"]) >= {"a", "b"}
    assert tools["mcp__time__get_current_time"]["server"] == "time"
    assert "timezone" in tools["mcp__time__get_current_time"]["parameters"]["properties"]
    text = c.get("/v1/mcp/instructions").json()["text"]
    assert text.startswith("## MCP Server Instructions\n\nEach block below is the operating contract")
    assert "\n### every\n\n" in text and "\n### everyhttp\n\n" in text


def test_it_serves_the_instructions_block_exactly(console):
    c = console(
        {"zeta": our_server("echo.py"), "alpha": our_server("echo.py"), "quiet": our_server("progress.py")}
    )
    c.wait_connected("zeta", "alpha", "quiet")
    text = c.get("/v1/mcp/instructions").json()["text"]
    head = (
        "## MCP Server Instructions\n\nEach block below is the operating contract of one MCP "
        "server: follow it when you use that server's tools.\n"
    )
    assert (
        text
        == head + "\n### alpha\n\nEcho server instructions.\n" + "\n### zeta\n\nEcho server instructions.\n"
    )


@pytest.mark.parametrize("era", ["2026", "2025"])
def test_it_registers_a_tool_added_at_runtime_within_2s_of_list_changed(console, era):
    env = {"DYN_LEGACY": "1"} if era == "2025" else {}
    c = console({"dyn": our_server("dynamic.py", env=env)}, AGENVOY_POLL_SECONDS=3600)
    c.wait_connected("dyn")
    assert c.status()["dyn"]["protocol"].startswith(era)
    assert "mcp__dyn__first" in c.tools()
    r = c.call("mcp__dyn__add_tool", {"name": "fresh"}, mode="auto")
    assert r.status_code == 200 and r.json()["status"] == "done", r.text
    started = time.monotonic()
    wait_until(lambda: "mcp__dyn__fresh" in c.tools(), 2.0, what="new tool registered")
    assert time.monotonic() - started < 2.0


def test_it_picks_up_a_silent_change_by_polling(console):
    c = console({"quiet": our_server("silent.py", env={"SILENT_CHANGE_AFTER": "1"})}, AGENVOY_POLL_SECONDS=1)
    c.wait_connected("quiet")
    before = c.tools()["mcp__quiet__changing"]["description"]
    wait_until(
        lambda: c.tools()["mcp__quiet__changing"]["description"] != before, 10, what="poll noticed the change"
    )


def test_it_follows_every_page_of_a_paginated_tool_list(console):
    c = console({"paged": our_server("paged.py")})
    c.wait_connected("paged")
    assert len([n for n in c.tools() if n.startswith("mcp__paged__")]) == 25


def test_it_stops_on_a_repeated_cursor_with_a_clear_error(console):
    c = console({"loop": our_server("paged.py", env={"PAGED_LOOP": "1"}), "echo": our_server("echo.py")})
    c.wait_connected("echo")
    status = wait_until(lambda: (s := c.status()) and s["loop"]["Error"] and s, 15)
    assert "repeated the cursor" in status["loop"]["Error"]


@pytest.fixture
def echo_http():
    """Our echo server over streamable HTTP and over legacy SSE."""
    procs, urls = [], {}
    for kind in ("http", "sse"):
        port = free_port()
        env = {**os.environ, "MCP_ECHO_PORT": str(port)}
        if kind == "sse":
            env["MCP_ECHO_TRANSPORT"] = "sse"
        procs.append(
            subprocess.Popen(
                [PYTHON, str(SERVERS / "echo.py")],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        urls[kind] = f"http://127.0.0.1:{port}/{'sse' if kind == 'sse' else 'mcp'}"

    def up(url):
        try:
            with httpx2.stream("GET", url, timeout=1):
                return True
        except httpx2.HTTPError:
            return False

    try:
        for url in urls.values():
            wait_until(lambda url=url: up(url), 20, what=f"{url} up")
        yield urls
    finally:  # also when one never came up: no server outlives the test
        for p in procs:
            p.kill()  # uvicorn waits for open SSE streams on SIGTERM
            p.wait(5)


def test_it_sends_expanded_headers_over_http_and_sse(console, echo_http):
    c = console(
        {
            "web": {
                "url": echo_http["http"],
                "headers": {"Authorization": "${ECHO_TOKEN}", "X-Team": "$TEAM"},
            },
            "legacy": {"url": echo_http["sse"], "type": "sse", "headers": {"Authorization": "Basic abc"}},
        },
        ECHO_TOKEN="s3cret",
        TEAM="blue",
    )
    status = c.wait_connected("web", "legacy")
    assert status["web"]["Transport"] == "streamable-http" and status["legacy"]["Transport"] == "sse"

    def header(server, name):
        return c.call(f"mcp__{server}__header", {"name": name}, mode="auto").json()["result"]

    assert header("web", "authorization") == "Bearer s3cret"
    assert header("web", "x-team") == "blue"
    assert header("legacy", "authorization") == "Basic abc"
    # The file keeps the variables, and the API never shows the values.
    assert "${ECHO_TOKEN}" in (c.home / "mcp.json").read_text()
    shown = c.get("/v1/mcp").json()["servers"]["web"]["headers"]
    assert shown == {"Authorization": "********", "X-Team": "********"}


@pytest.fixture
def headers_http():
    """tests/servers/headers.py over streamable HTTP (set up before `console`, so it stops
    after the console)."""
    with over_http("headers.py", port_variable="MCP_HEADERS_PORT") as url:
        yield url


def test_it_lists_a_tool_again_when_the_server_refuses_its_stale_headers(headers_http, console):
    """A 2026-07-28 server that renamed a tool's `Mcp-Param-*` header without a list_changed
    refuses the next call with HEADER_MISMATCH: the console lists the tools again and sends
    the same call once more (SEP-2243's recovery, as the SDK's `Client.call_tool` does it)."""
    c = console({"h": {"type": "http", "url": headers_http}}, AGENVOY_POLL_SECONDS=3600)
    assert c.wait_connected("h")["h"]["protocol"] == "2026-07-28"
    r = c.call("mcp__h__fetch", {"region": "eu"}, mode="auto")
    assert (r.json()["status"], r.json()["result"]) == ("done", "fetched for eu"), r.text
    assert c.call("mcp__h__rename", {}, mode="auto").json()["result"] == "renamed"
    r = c.call("mcp__h__fetch", {"region": "us"}, mode="auto")
    assert (r.json()["status"], r.json()["result"]) == ("done", "fetched for us"), r.text


def test_it_renews_the_session_when_the_server_process_is_killed(console):
    c = console({"echo": our_server("echo.py")})
    c.wait_connected("echo")
    pids = server_pids(c, "echo.py")
    assert len(pids) == 1
    os.kill(pids[0], signal.SIGKILL)

    # The status shows the loss, then the session is renewed without restarting the console.
    def renewed():
        now = server_pids(c, "echo.py")
        return now and now != pids and c.status()["echo"]["state"] == "connected"

    wait_until(renewed, 20, what="session renewed")
    assert "mcp__echo__echo" in c.tools()
    r = c.call("mcp__echo__echo", {"text": "back"}, mode="auto")
    assert r.json()["result"] == "back"


def test_it_renews_an_idle_2025_session_whose_server_died(console):
    c = console({"every": everything_stdio()}, AGENVOY_PING_SECONDS=1, AGENVOY_POLL_SECONDS=3600)
    c.wait_connected("every")
    assert c.status()["every"]["protocol"].startswith("2025")
    pids = server_pids(c, "server-everything")
    os.kill(pids[0], signal.SIGKILL)

    def renewed():
        now = server_pids(c, "server-everything")
        return now and now != pids and c.status()["every"]["state"] == "connected"

    wait_until(renewed, 20, what="session renewed")
    r = c.call("mcp__every__echo", {"message": "back"}, mode="auto")
    assert "back" in r.json()["result"]


def test_it_keeps_idle_sessions_of_both_eras_up_across_pings(console):
    c = console(
        {"echo": our_server("echo.py"), "every": everything_stdio(), "time": {"command": str(TIME_SERVER)}},
        AGENVOY_PING_SECONDS=1,
    )
    c.wait_connected("echo", "every", "time")
    before = {
        n: server_pids(c, s)
        for n, s in (("echo", "echo.py"), ("every", "server-everything"), ("time", "mcp-server-time"))
    }
    # Idle for four pings on purpose: the wait is what is tested (nothing may renew meanwhile).
    time.sleep(4)
    after = {
        n: server_pids(c, s)
        for n, s in (("echo", "echo.py"), ("every", "server-everything"), ("time", "mcp-server-time"))
    }
    assert after == before
    assert all(s["state"] == "connected" for s in c.status().values())
    assert "ping failed" not in c.log_text()


def test_it_renews_an_idle_2026_session_without_listen_support_whose_server_died(console):
    c = console({"time": {"command": str(TIME_SERVER)}}, AGENVOY_PING_SECONDS=1, AGENVOY_POLL_SECONDS=3600)
    c.wait_connected("time")
    assert c.status()["time"]["protocol"].startswith("2026")
    pids = server_pids(c, "mcp-server-time")
    os.kill(pids[0], signal.SIGKILL)
    wait_until(
        lambda: (
            (now := server_pids(c, "mcp-server-time"))
            and now != pids
            and c.status()["time"]["state"] == "connected"
        ),
        20,
        what="session renewed",
    )


def test_it_polls_a_2026_server_without_listen_support_and_says_so_once(console):
    # mcp-server-time answers subscriptions/listen with "method not found": the stream is not
    # opened again each second (a CI console logged "listen ended" every second for minutes).
    c = console({"time": {"command": str(TIME_SERVER)}}, AGENVOY_PING_SECONDS=1, AGENVOY_POLL_SECONDS=3600)
    c.wait_connected("time")
    wait_until(lambda: "time: no listen support" in c.log_text(), 10, what="the server's lack of listen told")
    # Watched for three seconds (before the fix the stream was opened again each second).
    watch_until = time.monotonic() + 3
    while time.monotonic() < watch_until:
        assert "listen ended" not in c.log_text()
        time.sleep(0.2)
    assert c.log_text().count("no listen support") == 1
    assert c.status()["time"]["state"] == "connected"


def test_it_leaves_no_child_of_a_server_behind(console, tmp_path):
    script = tmp_path / "spawner.sh"
    # A "server" that starts a child and then serves through exec: the child must not outlive it.
    script.write_text(f"#!/bin/sh\nsleep 300 &\nexec {PYTHON} {SERVERS / 'echo.py'}\n")
    script.chmod(0o755)
    c = console({"spawner": {"command": str(script)}})
    c.wait_connected("spawner")
    sleepers = [p for p in descendants(c.proc.pid) if psutil.Process(p).name() == "sleep"]
    assert len(sleepers) == 1
    c.post("/v1/mcp/remove", {"name": "spawner"})
    wait_until(
        lambda: not psutil.pid_exists(sleepers[0]) or psutil.Process(sleepers[0]).status() == "zombie",
        10,
        what="child ended",
    )


def test_it_keeps_serving_when_one_server_hangs_and_one_prints_garbage(console):
    c = console(
        {
            "hang": our_server("hang.py"),
            "garbage": our_server("garbage.py"),
            "echo": our_server("echo.py"),
        },
        AGENVOY_CONNECT_TIMEOUT=3,
    )
    c.wait_connected("echo")
    r = c.call("mcp__echo__echo", {"text": "fine"}, mode="auto")
    assert r.json()["result"] == "fine"
    status = wait_until(
        lambda: (s := c.status()) and s["hang"]["Error"] and s["garbage"]["Error"] and s,
        15,
        what="errors shown",
    )
    assert status["hang"]["state"] in ("error", "connecting")
    assert "timed out" in status["hang"]["Error"]
    assert status["garbage"]["Error"]
    assert httpx2.get(c.url + "/login/", timeout=5).status_code == 200


def test_it_reports_a_missing_command_and_retries(console):
    c = console({"ghost": {"command": "definitely-not-a-command-xyz"}, "echo": our_server("echo.py")})
    c.wait_connected("echo")
    status = wait_until(lambda: (s := c.status()) and s["ghost"]["Error"] and s, 10)
    assert "definitely-not-a-command-xyz" in status["ghost"]["Error"]
    assert status["ghost"]["state"] == "error"


def test_it_connects_and_removes_servers_edited_in_mcp_json(console):
    c = console({"one": our_server("echo.py")})
    c.wait_connected("one")
    c.write_servers({"one": our_server("echo.py"), "two": our_server("echo.py")})
    c.wait_connected("one", "two", timeout=10)
    c.write_servers({"two": our_server("echo.py")})
    wait_until(
        lambda: "one" not in c.status() and not any(n.startswith("mcp__one__") for n in c.tools()),
        10,
        what="server one removed",
    )
    wait_until(lambda: len(server_pids(c, "echo.py")) == 1, 10, what="its process gone")


def test_it_connects_a_server_posted_to_the_api_and_disconnects_it_on_remove(console):
    c = console({})
    r = c.post("/v1/mcp", {"name": "posted", "server": our_server("echo.py")})
    assert r.json() == {"ok": True}
    c.wait_connected("posted", timeout=15)
    r = c.post("/v1/mcp/remove", {"name": "posted"})
    assert r.json() == {"ok": True}
    assert "posted" not in c.status()
    wait_until(lambda: not server_pids(c, "echo.py"), 10, what="process stopped")
    assert not any(n.startswith("mcp__posted__") for n in c.tools())


def test_it_reconnects_one_or_all_servers_within_the_bound(console):
    c = console({"a": our_server("echo.py"), "b": our_server("echo.py")})
    c.wait_connected("a", "b")
    r = c.post("/v1/mcp/reconnect", {"name": "a"})
    assert r.status_code == 200
    assert r.json() == {"ok": True, "servers": {"a": "connected"}}
    r = c.post("/v1/mcp/reconnect")
    assert r.json() == {"ok": True, "servers": {"a": "connected", "b": "connected"}}
    r = c.post("/v1/mcp/reconnect", {"name": "nope"})
    assert r.status_code == 404 and r.json() == {"error": "server not found"}


def test_it_shuts_down_on_sigterm_within_5s_leaving_no_server_process(console):
    c = console(
        {"a": our_server("echo.py"), "every": everything_stdio(), "time": {"command": str(TIME_SERVER)}}
    )
    c.wait_connected("a", "every", "time")
    children = descendants(c.proc.pid)
    assert len(children) >= 3
    took = c.stop(signal.SIGTERM)
    assert took < 5

    def left() -> list[int]:
        alive = []
        for p in children:
            try:
                if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        return alive

    # Within the same 5 s: serve has exited, its servers may still be being reaped.
    wait_until(lambda: not left(), max(0.5, 5 - took), what="no server process left")


def test_it_answers_pages_while_servers_are_still_connecting(console, tmp_path):
    c = console({"hang": our_server("hang.py")}, AGENVOY_CONNECT_TIMEOUT=20)
    started = time.monotonic()
    r = httpx2.get(c.url + "/login/", timeout=5)
    assert r.status_code == 200 and time.monotonic() - started < 2
    assert c.status()["hang"]["state"] == "connecting"
