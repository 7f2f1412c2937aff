"""Servers in a sandbox (SPEC 26) against a real console: a stdio server under bubblewrap sees
only what it is given. The probe server (tests/servers/probe.py) tries what a hostile server
would; each attempt is made unsandboxed too, so its failure sandboxed means something."""

import json
import os
import signal
import socket
import uuid
from pathlib import Path

import psutil
import pytest

from tests.live import TIME_SERVER, descendants, everything_stdio, our_server, server_pids, wait_until

pytestmark = pytest.mark.live


@pytest.fixture
def listener():
    """A port the test listens on: what a server would send the console's secrets to."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


@pytest.fixture
def person_file():
    """A file in a person's home: the home of the user the console runs as."""
    path = Path.home() / f"agenvoy-sandbox-{uuid.uuid4().hex[:8]}.txt"
    path.write_text("a person's secret")
    yield path
    path.unlink(missing_ok=True)


def _tool(c, server: str, tool: str, arguments: dict) -> dict:
    r = c.call(f"mcp__{server}__{tool}", arguments, mode="auto")
    assert r.status_code == 200, r.text
    return r.json()


def _ok(body: dict) -> str:
    assert body["status"] == "done", body
    return body["result"]


def _refused(body: dict) -> None:
    assert body["status"] == "error", body


def _lingering(mark: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if mark in proc.cmdline():
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _gone(procs: list[psutil.Process]) -> bool:
    return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs)


def test_it_keeps_a_sandboxed_server_from_what_an_unsandboxed_one_reaches(
    console, tmp_path, listener, person_file
):
    readable, writable = tmp_path / "readable", tmp_path / "writable"
    readable.mkdir()
    writable.mkdir()
    (readable / "in.txt").write_text("given to read")
    walls = {"read": [str(readable)], "write": [str(writable)]}
    c = console(
        {
            "jailed": {**our_server("probe.py"), "sandbox": walls},
            "netted": {**our_server("probe.py"), "sandbox": {"network": True}},
            "free": our_server("probe.py"),
        }
    )
    status = c.wait_connected("jailed", "netted", "free")
    assert [status[n]["sandbox"] for n in ("jailed", "netted", "free")] == [True, True, False]

    hostile = [
        ("read_file", {"path": str(c.home / "mcp.json")}),  # every server's secrets
        ("read_file", {"path": str(c.data / "db.sqlite3")}),  # tokens, calls, OAuth tokens
        ("read_file", {"path": str(person_file)}),
        ("connect", {"port": listener}),
    ]
    for tool, arguments in hostile:
        _ok(_tool(c, "free", tool, arguments))
        _refused(_tool(c, "jailed", tool, arguments))
    assert "servers" in _ok(_tool(c, "free", "read_file", {"path": str(c.home / "mcp.json")}))
    # Writing outside: into the console's own folder, and beside the server's own files.
    for name in ("free", "jailed"):
        body = _tool(c, name, "write_file", {"path": str(c.home / f"planted-{name}"), "text": "x"})
        if name == "free":
            _ok(body)
        else:
            _refused(body)
    assert (c.home / "planted-free").exists() and not (c.home / "planted-jailed").exists()
    _refused(_tool(c, "jailed", "write_file", {"path": our_server("probe.py")["args"][0], "text": "x"}))
    # Other processes: the console among them unsandboxed; only its own sandboxed.
    assert any("manage.py serve" in line for line in _ok(_tool(c, "free", "processes", {})).splitlines())
    seen = _ok(_tool(c, "jailed", "processes", {})).splitlines()
    assert not any("manage.py" in line for line in seen) and len(seen) <= 3, seen
    # What it is given works as declared, and its home is its own.
    assert _ok(_tool(c, "jailed", "read_file", {"path": str(readable / "in.txt")})) == "given to read"
    _refused(_tool(c, "jailed", "write_file", {"path": str(readable / "new.txt"), "text": "x"}))
    _ok(_tool(c, "jailed", "write_file", {"path": str(writable / "out.txt"), "text": "written inside"}))
    assert (writable / "out.txt").read_text() == "written inside"
    assert json.loads(_ok(_tool(c, "jailed", "where", {}))) == {
        "home": "/home/sandbox",
        "cwd": "/home/sandbox",
    }
    _ok(_tool(c, "jailed", "write_file", {"path": "/home/sandbox/scratch", "text": "x"}))
    _ok(_tool(c, "jailed", "write_file", {"path": "/tmp/scratch", "text": "x"}))
    # "network": true is the one way out, and it reaches the host's loopback.
    assert _ok(_tool(c, "netted", "connect", {"port": listener})) == "connected"
    _refused(_tool(c, "netted", "read_file", {"path": str(c.home / "mcp.json")}))


def test_it_hides_the_consoles_folders_inside_a_tree_it_may_read(console, tmp_path):
    # A filesystem server given a whole tree (here the one holding the console's data folder
    # and AGENVOY_HOME, as `~` holds ~/.config/agenvoy) still sees neither of them.
    (tmp_path / "notes.txt").write_text("the operator's notes")
    c = console({"wide": {**our_server("probe.py"), "sandbox": {"read": [str(tmp_path)]}}})
    c.wait_connected("wide")
    assert str(c.home).startswith(str(tmp_path)) and str(c.data).startswith(str(tmp_path))
    assert _ok(_tool(c, "wide", "read_file", {"path": str(tmp_path / "notes.txt")})) == "the operator's notes"
    _refused(_tool(c, "wide", "read_file", {"path": str(c.home / "mcp.json")}))
    _refused(_tool(c, "wide", "read_file", {"path": str(c.data / "db.sqlite3")}))
    assert json.loads(_ok(_tool(c, "wide", "where", {}))) == {"home": "/home/sandbox", "cwd": "/home/sandbox"}


def test_it_runs_real_servers_sandboxed_and_leaves_no_process_behind(console):
    c = console(
        {
            "time": {"command": str(TIME_SERVER), "sandbox": True},
            "every": {**everything_stdio(), "sandbox": True},
        }
    )
    status = c.wait_connected("time", "every", timeout=60)
    assert status["time"]["sandbox"] is True and status["every"]["sandbox"] is True
    tools = c.tools()
    assert {"mcp__time__get_current_time", "mcp__every__echo", "mcp__every__get-sum"} <= set(tools)
    now = json.loads(_ok(_tool(c, "time", "get_current_time", {"timezone": "UTC"})))
    assert now["timezone"] == "UTC"
    assert "sandboxed hello" in _ok(_tool(c, "every", "echo", {"message": "sandboxed hello"}))
    children = [psutil.Process(pid) for pid in descendants(c.proc.pid)]
    assert any("bwrap" in p.name() for p in children), [p.cmdline() for p in children]
    c.stop()
    wait_until(lambda: _gone(children), 10, what="every server process ended with the console")


def test_it_leaves_no_sandboxed_process_when_the_console_is_killed(console):
    c = console({"jailed": {**our_server("probe.py"), "sandbox": True}, "free": our_server("probe.py")})
    c.wait_connected("jailed", "free")
    marks = {name: f"agenvoy-linger-{name}-{uuid.uuid4().hex[:8]}" for name in ("jailed", "free")}
    for name, mark in marks.items():
        _ok(_tool(c, name, "linger", {"mark": mark}))
    jailed = _lingering(marks["jailed"])
    free = _lingering(marks["free"])
    assert jailed and free
    console.track(c)
    left = {p.pid for p in free}
    children = [psutil.Process(pid) for pid in descendants(c.proc.pid) if pid not in left]
    c.stop(signal.SIGKILL)
    try:
        wait_until(lambda: _gone(jailed + children), 10, what="the sandboxed processes ended")
        # Unsandboxed, the same helper outlives the console: the end above is the sandbox's.
        assert not _gone(free)
    finally:
        for proc in free:
            if proc.is_running():
                os.kill(proc.pid, signal.SIGKILL)


def test_it_never_runs_a_sandboxed_server_without_a_working_bubblewrap(console, tmp_path):
    """bwrap missing, bwrap failing and a `sandbox` value that can't be used: the server is not
    started, its Error says why, and the unsandboxed server beside it is unaffected."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    servers = {
        "jailed": {**our_server("probe.py"), "sandbox": True},
        "garbled": {**our_server("probe.py"), "sandbox": "yes"},
        "free": our_server("probe.py"),
    }
    c = console(servers, PATH=str(fake))
    c.wait_connected("free")
    status = wait_until(
        lambda: (s := c.status())["jailed"]["state"] == "error" and s["garbled"]["state"] == "error" and s,
        30,
        what="both sandboxed servers refused",
    )
    assert (
        status["jailed"]["Error"]
        == "sandbox unavailable: bwrap not found (install the Debian package bubblewrap)"
    )
    assert status["garbled"]["Error"] == (
        "sandbox unavailable: server.sandbox must be true, false or an object of read, write and network"
    )
    assert status["jailed"]["sandbox"] is True and status["garbled"]["sandbox"] is True
    assert not any(n.startswith(("mcp__jailed__", "mcp__garbled__")) for n in c.tools())
    assert len(server_pids(c, "probe.py")) == 1  # the unsandboxed one only
    c.stop()
    # A bwrap that can't make namespaces (a kernel or container that forbids them).
    (fake / "bwrap").write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n"
    )
    (fake / "bwrap").chmod(0o755)
    c = console(servers, PATH=str(fake))
    c.wait_connected("free")
    status = wait_until(
        lambda: (s := c.status())["jailed"]["state"] == "error" and s, 30, what="the sandboxed server refused"
    )
    assert status["jailed"]["Error"] == "sandbox unavailable: bwrap: No permissions to create a new namespace"
    assert len(server_pids(c, "probe.py")) == 1


def test_it_reconnects_a_server_whose_sandbox_is_changed(console):
    c = console({"probe": our_server("probe.py")})
    c.wait_connected("probe")
    assert any("manage.py serve" in line for line in _ok(_tool(c, "probe", "processes", {})).splitlines())
    r = c.post("/v1/mcp", {"name": "probe", "server": {**our_server("probe.py"), "sandbox": True}})
    assert r.status_code == 200, r.text
    assert c.status()["probe"]["sandbox"] is True

    def walled_in() -> bool:
        # The old session may answer until the new one is up: wait for the sandboxed one.
        body = _tool(c, "probe", "processes", {})
        return body["status"] == "done" and not any(
            "manage.py" in line for line in body["result"].splitlines()
        )

    wait_until(walled_in, 30, what="the server reconnected in its sandbox")
    edits = [json.loads(line) for line in c.get("/v1/audit", action="server.edit").text.splitlines()]
    assert [(e["object"], e["after"]["sandbox"]) for e in edits] == [("probe", True)], edits
