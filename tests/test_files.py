"""SPEC 2: the shared files `mcp.json` and `allow_tool`: atomic locked writes (also across OS
processes), the file format, unparsable files, the import shapes, and the watcher that mirrors
edits made behind the console's back into the database."""

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcpcore import files
from mcpcore.models import AllowEntry, Server, Tool

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
if not Path(PYTHON).exists():
    PYTHON = sys.executable

# --- (a) two OS processes editing allow_tool at the same time --------------------------------

N_EDITS = 200

# Each process edits only its own entries. Every edit uses a prefix of its own (the process's
# server prefix plus the edit's number) and adds exactly one line, so a write based on a stale
# read would drop a line of the other process for good: the final file shows every lost update,
# not only one at the very end.
WORKER = f"""
import os, sys
import django
django.setup()
from mcpcore import files
who = sys.argv[1]
print("ready", flush=True)
sys.stdin.readline()
for i in range({N_EDITS}):
    prefix = f"mcp__{{who}}__t{{i:03d}}"
    assert files.replace_allow_prefix(prefix, [prefix]) == [prefix]
print("done", flush=True)
"""


def _subprocess_env(tmp: Path) -> dict:
    env = dict(os.environ)
    env.update(
        AGENVOY_DATA_DIR=str(tmp / "data"),
        AGENVOY_HOME=str(tmp / "home"),
        DJANGO_SETTINGS_MODULE="agenvoy_site.settings",
        DJANGO_SECRET_KEY="test-secret-key-not-for-production",
        PYTHONPATH=str(ROOT),
    )
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    return env


def test_it_loses_no_update_when_two_processes_edit_allow_tool_at_once(tmp_path):
    env = _subprocess_env(tmp_path)
    subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=60)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "allow_tool").write_text("# someone else's line\nzz__other\n")

    procs = [
        subprocess.Popen(
            [PYTHON, "-c", WORKER, who],
            cwd=ROOT,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for who in ("a", "b")
    ]
    try:
        for p in procs:  # both set up Django before either starts writing
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            assert out.strip() == "done"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    text = (home / "allow_tool").read_text()
    lines = text.splitlines()
    expected = ["zz__other"] + [f"mcp__{w}__t{i:03d}" for w in "ab" for i in range(N_EDITS)]
    assert sorted(lines) == sorted(expected)  # nothing lost, nothing doubled
    assert lines == sorted(lines, key=lambda e: e.encode())
    assert text.endswith("\n") and "\n\n" not in text
    # No temp files are left behind beside it.
    assert sorted(p.name for p in home.iterdir()) == ["allow_tool", "allow_tool.lock"]

    # The database mirrors the file once both writers are done.
    db = sqlite3.connect(tmp_path / "data" / "db.sqlite3")
    try:
        rows = [r[0] for r in db.execute("SELECT entry FROM mcpcore_allowentry")]
    finally:
        db.close()
    assert sorted(rows) == sorted(expected)


def test_it_holds_the_lock_across_read_modify_write(agenvoy_home, db):
    # A second taker of the lock (here: another open file description in this process, which
    # flock treats like another process) must wait until the first lets go.
    import fcntl

    path = agenvoy_home / "allow_tool"
    with files.locked(path):
        fd = os.open(f"{path}.lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    fd = os.open(f"{path}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def test_it_writes_atomically_and_keeps_the_file_mode(tmp_path):
    path = tmp_path / "f"
    files.atomic_write(path, "one\n")
    assert path.read_text() == "one\n"
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    inode = path.stat().st_ino
    files.atomic_write(path, "two\n")
    assert path.read_text() == "two\n"
    assert path.stat().st_mode & 0o777 == 0o644
    assert path.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


# --- (b) the mcp.json format and unknown keys -------------------------------------------------


def _expected_text(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@pytest.mark.django_db
def test_it_writes_mcp_json_with_two_space_indent_sorted_keys_and_a_final_newline(api, agenvoy_home):
    r = api.post(
        "/v1/mcp", {"name": "zeta", "server": {"url": "https://z/mcp", "headers": {"X-B": "2", "X-A": "1"}}}
    )
    assert r.status_code == 200, r.content
    r = api.post(
        "/v1/mcp",
        {"name": "alpha", "server": {"command": "npx", "args": ["-y", "pkg"], "env": {"Z": "z", "A": "a"}}},
    )
    assert r.status_code == 200, r.content
    text = (agenvoy_home / "mcp.json").read_text()
    data = json.loads(text)
    assert data == {
        "servers": {
            "alpha": {"command": "npx", "args": ["-y", "pkg"], "env": {"Z": "z", "A": "a"}},
            "zeta": {"url": "https://z/mcp", "headers": {"X-B": "2", "X-A": "1"}},
        }
    }
    assert text == _expected_text(data)
    assert text.endswith("}\n") and not text.endswith("\n\n")
    assert text.splitlines()[1] == '  "servers": {'
    assert text.index('"alpha"') < text.index('"zeta"')
    assert text.index('"A"') < text.index('"Z"')


@pytest.mark.django_db
def test_it_preserves_unknown_keys_through_post_mcp(api, agenvoy_home):
    original = {
        "x-top": {"keep": [1, 2, 3]},
        "inputs": [{"id": "gh", "type": "promptString"}],
        "servers": {
            "gh": {
                "command": "npx",
                "args": ["a"],
                "env": {"T": "secret"},
                "x-note": "written by the CLI",
                "envFile": "/x/.env",
            },
            "other": {"url": "https://o/mcp", "custom": {"deep": True}},
        },
    }
    (agenvoy_home / "mcp.json").write_text(json.dumps(original))
    r = api.post(
        # Same command and args: the mask keeps the stored secret (SPEC 12.3).
        "/v1/mcp",
        {"name": "gh", "server": {"command": "npx", "args": ["a"], "env": {"T": "********"}}},
    )
    assert r.status_code == 200, r.content
    r = api.post("/v1/mcp", {"name": "new", "server": {"command": "echo"}})
    assert r.status_code == 200, r.content
    text = (agenvoy_home / "mcp.json").read_text()
    data = json.loads(text)
    assert data["x-top"] == {"keep": [1, 2, 3]}
    assert data["inputs"] == [{"id": "gh", "type": "promptString"}]
    assert data["servers"]["gh"] == {
        "command": "npx",
        "args": ["a"],
        "env": {"T": "secret"},
        "x-note": "written by the CLI",
        "envFile": "/x/.env",
    }
    assert data["servers"]["other"] == original["servers"]["other"]
    assert data["servers"]["new"] == {"command": "echo"}
    assert text == _expected_text(data)


@pytest.mark.django_db
def test_it_keeps_unknown_keys_when_removing_another_server(api, agenvoy_home):
    original = {"x-top": 1, "servers": {"a": {"command": "x", "x-k": "v"}, "b": {"command": "y"}}}
    (agenvoy_home / "mcp.json").write_text(json.dumps(original))
    r = api.post("/v1/mcp/remove", {"name": "b"})
    assert r.status_code == 200, r.content
    data = json.loads((agenvoy_home / "mcp.json").read_text())
    assert data == {"x-top": 1, "servers": {"a": {"command": "x", "x-k": "v"}}}


# --- (c) an unparsable mcp.json ---------------------------------------------------------------

GOOD = {"servers": {"a": {"command": "echo"}, "b": {"url": "https://b/mcp"}}}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "garbage",
    [
        '{"servers": {"a": {"command": "echo"}',  # cut short
        "not json at all",
        "[1, 2, 3]",
        '{"servers": [1]}',
        '{"servers": {"a": "echo"}}',
    ],
)
def test_it_reports_an_unparsable_mcp_json_and_keeps_the_last_good_list(agenvoy_home, garbage):
    (agenvoy_home / "mcp.json").write_text(json.dumps(GOOD))
    assert files.sync_servers() == {"a", "b"}
    assert files.file_problem("mcp.json") == ""

    (agenvoy_home / "mcp.json").write_text(garbage)
    assert files.sync_servers() is None
    assert files.file_problem("mcp.json") != ""
    assert sorted(Server.objects.values_list("name", flat=True)) == ["a", "b"]
    assert Server.objects.get(name="a").config == {"command": "echo"}


@pytest.mark.django_db
def test_it_refuses_to_edit_an_unparsable_mcp_json_and_leaves_it_byte_for_byte(api, agenvoy_home):
    (agenvoy_home / "mcp.json").write_text(json.dumps(GOOD))
    files.sync_servers()
    broken = b'{"servers": {"a": {"command": "echo"},,, \xc3\xa9 }\n'
    (agenvoy_home / "mcp.json").write_bytes(broken)

    for path, body in [
        ("/v1/mcp", {"name": "c", "server": {"command": "x"}}),
        ("/v1/mcp", {"name": "a", "server": {"command": "x"}}),
        ("/v1/mcp/remove", {"name": "a"}),
    ]:
        r = api.post(path, body)
        assert 400 <= r.status_code < 500, (path, r.status_code)
        assert r["Content-Type"].startswith("application/json")
        assert isinstance(r.json()["error"], str) and r.json()["error"]
        assert (agenvoy_home / "mcp.json").read_bytes() == broken
    assert sorted(Server.objects.values_list("name", flat=True)) == ["a", "b"]
    assert Server.objects.get(name="a").config == {"command": "echo"}


@pytest.mark.django_db
def test_it_treats_a_missing_or_empty_mcp_json_as_no_servers(agenvoy_home):
    assert files.read_mcp_json() == {"servers": {}}
    (agenvoy_home / "mcp.json").write_text("  \n")
    assert files.read_mcp_json() == {"servers": {}}
    assert files.sync_servers() == set()
    assert files.file_problem("mcp.json") == ""


# --- (d) import shapes ------------------------------------------------------------------------


def test_it_imports_the_mcp_servers_shape():
    data = {
        "mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
            "remote": {"url": "https://r/mcp", "headers": {"Authorization": "tok"}},
        }
    }
    assert files.import_shape(data) == data["mcpServers"]


def test_it_imports_the_servers_shape():
    data = {"servers": {"a": {"command": "x", "env": {"K": "v"}}}}
    assert files.import_shape(data) == {"a": {"command": "x", "env": {"K": "v"}}}


def test_it_imports_the_vs_code_shape_with_type_picking_the_transport():
    from mcpcore.models import transport_of

    data = {
        "inputs": [],
        "servers": {
            "h": {"type": "http", "url": "https://h/mcp"},
            "s": {"type": "sse", "url": "https://s/sse"},
            "io": {"type": "stdio", "command": "node", "args": ["x.js"]},
        },
    }
    out = files.import_shape(data)
    assert transport_of(out["h"]) == "streamable-http"
    assert out["h"]["url"] == "https://h/mcp"
    assert transport_of(out["s"]) == "sse"
    assert transport_of(out["io"]) == "stdio"
    assert out["io"] == {"type": "stdio", "command": "node", "args": ["x.js"]}
    # The input is not modified in place.
    assert data["servers"]["h"]["type"] == "http"


@pytest.mark.parametrize(
    "data",
    [
        {"mcpServers": {"a__b": {"command": "x"}}},
        {"mcpServers": {"_a": {"command": "x"}}},
        {"mcpServers": {"a b": {"command": "x"}}},
        {"mcpServers": {"": {"command": "x"}}},
        {"mcpServers": {"x" * 65: {"command": "x"}}},
        {"servers": {"ok": {"command": "x"}, "bad.name": {"command": "y"}}},
    ],
)
def test_it_rejects_imports_with_bad_server_names(data):
    with pytest.raises(files.ConfigFileError, match="invalid server name"):
        files.import_shape(data)


@pytest.mark.parametrize(
    "config", [{}, {"args": ["x"]}, {"command": ""}, {"url": "  "}, {"command": ["npx"]}, {"type": "http"}]
)
def test_it_rejects_imported_entries_without_command_or_url(config):
    with pytest.raises(files.ConfigFileError, match="command or url is required"):
        files.import_shape({"mcpServers": {"s": config}})


@pytest.mark.parametrize(
    "data",
    [
        [],
        "x",
        None,
        {},
        {"mcpServers": []},
        {"servers": "x"},
        {"mcpServers": {}},
        {"mcpServers": {"s": "npx"}},
    ],
)
def test_it_rejects_import_files_it_cannot_use(data):
    with pytest.raises(files.ConfigFileError):
        files.import_shape(data)


# --- (e) the watcher --------------------------------------------------------------------------


def _write_behind(path: Path, text: str) -> None:
    """Another program's edit: written in place, then the mtime pushed forward so the edit is
    visible to a stat-based watcher even on a file system with a coarse clock."""
    path.write_text(text)
    st = path.stat()
    bump = getattr(_write_behind, "bump", 0) + 1
    _write_behind.bump = bump
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 10_000_000))


def _servers() -> list[str]:
    return list(Server.objects.order_by("name").values_list("name", flat=True))


def _allowed() -> list[str]:
    return list(AllowEntry.objects.order_by("entry").values_list("entry", flat=True))


@pytest.mark.django_db
def test_it_follows_edits_to_the_shared_files_made_behind_its_back(agenvoy_home):
    mcp, allow = agenvoy_home / "mcp.json", agenvoy_home / "allow_tool"
    mcp.write_text(json.dumps({"servers": {"a": {"command": "x"}, "b": {"command": "y"}}}))
    allow.write_text("mcp__a__*\n")
    watcher = files.FileWatcher()
    assert watcher.check() == {"a", "b"}
    assert _servers() == ["a", "b"]
    assert _allowed() == ["mcp__a__*"]
    Tool.objects.create(server=Server.objects.get(name="a"), tool_name="t", registered_name="mcp__a__t")

    # Nothing changed: nothing to do.
    assert watcher.check() == set()

    _write_behind(
        mcp, json.dumps({"servers": {"b": {"command": "y", "args": ["1"]}, "c": {"url": "https://c/mcp"}}})
    )
    _write_behind(allow, "# trust\nmcp__b__x\n\nmcp__c__*\n")
    assert watcher.check() == {"a", "b", "c"}
    assert _servers() == ["b", "c"]
    assert Server.objects.get(name="b").config == {"command": "y", "args": ["1"]}
    assert Server.objects.get(name="c").transport == "streamable-http"
    assert not Tool.objects.filter(registered_name="mcp__a__t").exists()  # went with server a
    assert _allowed() == ["mcp__b__x", "mcp__c__*"]

    # An edit that breaks mcp.json: reported, the last good list stays.
    _write_behind(mcp, '{"servers": ')
    assert watcher.check() is None
    assert files.file_problem("mcp.json") != ""
    assert _servers() == ["b", "c"]

    # Fixed again: followed, and the problem is gone.
    _write_behind(mcp, json.dumps({"servers": {"c": {"url": "https://c/mcp"}}}))
    assert watcher.check() == {"b"}
    assert _servers() == ["c"]
    assert files.file_problem("mcp.json") == ""

    # The allow-list file removed altogether: nothing is trusted any more.
    allow.unlink()
    watcher.check()
    assert _allowed() == []


@pytest.mark.django_db
def test_it_notices_a_file_replaced_by_rename(agenvoy_home):
    allow = agenvoy_home / "allow_tool"
    allow.write_text("mcp__a__x\n")
    watcher = files.FileWatcher()
    watcher.check()
    assert _allowed() == ["mcp__a__x"]
    tmp = agenvoy_home / ".allow_tool.new"
    tmp.write_text("mcp__a__y\n")  # same size, new inode
    os.replace(tmp, allow)
    watcher.check()
    assert _allowed() == ["mcp__a__y"]


@pytest.mark.django_db
def test_it_shows_a_server_without_command_or_url_from_the_file_as_misconfigured(agenvoy_home):
    (agenvoy_home / "mcp.json").write_text(json.dumps({"servers": {"m": {"args": ["x"]}}}))
    files.FileWatcher().check()
    row = Server.objects.get(name="m")
    assert row.state == "error"
    assert row.misconfigured
    assert "command or url" in row.last_error


@pytest.mark.django_db
def test_it_records_the_edit_of_a_file_between_two_checks_quickly(agenvoy_home):
    # The watcher's check is cheap: a stat per file. Bounded, not a benchmark.
    watcher = files.FileWatcher()
    watcher.check()
    start = time.perf_counter()
    for _ in range(50):
        watcher.check()
    assert time.perf_counter() - start < 2


# --- the database mirror follows the last write, also when two writers race -------------------


def _race(monkeypatch, target: str, hook_call: int, first, second) -> None:
    """Run `first` in thread A and `second` in thread B. Thread A is held for up to 0.5 s at its
    `hook_call`-th call of `files.<target>` (after the file write, before the database is
    updated) while B tries to do its whole edit. A correct writer holds the file lock across
    that gap, so B simply waits for it; a writer that updates the database after letting go of
    the lock lets B slip in, and A then writes a stale copy."""
    import threading

    from django.db import connection

    real = getattr(files, target)
    calls = {"n": 0}
    a_in_gap, b_done = threading.Event(), threading.Event()

    def hooked(*args, **kwargs):
        if threading.current_thread().name == "A":
            calls["n"] += 1
            if calls["n"] == hook_call:
                out = real(*args, **kwargs) if target == "read_mcp_json" else None
                a_in_gap.set()
                b_done.wait(timeout=0.5)
                return out if target == "read_mcp_json" else real(*args, **kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(files, target, hooked)
    errors = []

    def run(fn, wait_for=None, done=None):
        try:
            if wait_for is not None:
                assert wait_for.wait(timeout=5)
            fn()
        except BaseException as exc:  # pragma: no cover - shown by the assert below
            errors.append(exc)
        finally:
            if done is not None:
                done.set()
            connection.close()

    a = threading.Thread(target=run, args=(first,), name="A", daemon=True)
    b = threading.Thread(target=run, args=(second, a_in_gap, b_done), name="B", daemon=True)
    a.start()
    b.start()
    a.join(timeout=10)
    b.join(timeout=10)
    assert not a.is_alive() and not b.is_alive()
    assert errors == []


@pytest.mark.django_db(transaction=True)
def test_it_keeps_allow_entries_mirroring_the_file_when_two_writers_race(agenvoy_home, monkeypatch):
    _race(
        monkeypatch,
        "_mirror_allow",
        1,
        lambda: files.replace_allow_prefix("mcp__a__", ["mcp__a__x"]),
        lambda: files.replace_allow_prefix("mcp__b__", ["mcp__b__y"]),
    )
    assert files.read_allow_tool() == ["mcp__a__x", "mcp__b__y"]
    assert _allowed() == ["mcp__a__x", "mcp__b__y"]


@pytest.mark.django_db(transaction=True)
def test_it_keeps_remembered_entries_mirroring_the_file_when_two_writers_race(agenvoy_home, monkeypatch):
    _race(
        monkeypatch,
        "_mirror_allow",
        1,
        lambda: files.add_allow_entry("mcp__a__x"),
        lambda: files.add_allow_entry("mcp__b__y"),
    )
    assert files.read_allow_tool() == ["mcp__a__x", "mcp__b__y"]
    assert _allowed() == ["mcp__a__x", "mcp__b__y"]


@pytest.mark.django_db(transaction=True)
def test_it_keeps_server_rows_mirroring_mcp_json_when_two_writers_race(agenvoy_home, monkeypatch):
    def add(name):
        def mutate(servers):
            servers[name] = {"command": "echo"}

        return lambda: files.update_servers(mutate)

    # The second read of thread A is the one of its mirroring step (the first is its edit's).
    _race(monkeypatch, "read_mcp_json", 2, add("a"), add("b"))
    assert sorted(json.loads((agenvoy_home / "mcp.json").read_text())["servers"]) == ["a", "b"]
    assert _servers() == ["a", "b"]


def test_it_sweeps_only_old_temp_files_left_by_killed_writers(agenvoy_home):
    old = agenvoy_home / ".allow_tool.abc123.tmp"
    old.write_text("mcp__a__")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    young = agenvoy_home / ".mcp.json.def456.tmp"
    young.write_text("{")
    keep = agenvoy_home / "allow_tool"
    keep.write_text("mcp__a__b\n")
    os.utime(keep, (time.time() - 3600, time.time() - 3600))
    assert files.sweep_stale_temp_files() == 1
    assert not old.exists() and young.exists() and keep.read_text() == "mcp__a__b\n"
