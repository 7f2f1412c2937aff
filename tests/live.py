"""A real console for tests: `manage.py serve` in a subprocess with its own data folder,
$AGENVOY_HOME and token, talked to over HTTP like any agent would."""

import asyncio
import contextlib
import datetime
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
SERVERS = ROOT / "tests" / "servers"
EVERYTHING = ROOT / "tests/servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
TIME_SERVER = ROOT / ".venv-servers/bin/mcp-server-time"
_TEMPLATE: Path | None = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def our_server(script: str, *args: str, env: dict | None = None) -> dict:
    """An mcp.json entry for one of our test servers under tests/servers."""
    entry = {"command": PYTHON, "args": [str(SERVERS / script), *args]}
    if env:
        entry["env"] = env
    return entry


def everything_stdio() -> dict:
    return {"command": "node", "args": [str(EVERYTHING), "stdio"]}


def manage(env: dict, *args: str) -> str:
    """Run a management command the way an operator would; its output, or an error."""
    out = subprocess.run(
        [PYTHON, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if out.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed: {out.stderr[-2000:]}")
    return out.stdout


def stop_process(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
    """Send `sig` to a process started in a group of its own; kill the group if it outlives
    `timeout` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


@contextlib.contextmanager
def over_http(script: str, *args: str, port_variable: str, timeout: float = 30):
    """One of our test servers over streamable HTTP on the port its `port_variable` names,
    started as a remote server would be: its URL once it answers; stopped on leaving."""
    port = free_port()
    proc = subprocess.Popen(
        [PYTHON, str(SERVERS / script), *args],
        env={**os.environ, port_variable: str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"

    def up() -> bool:
        try:
            return httpx2.get(url, timeout=1).status_code > 0
        except httpx2.TransportError:
            return False

    try:
        wait_until(up, timeout, what=f"{script} {' '.join(args)} listening")
        yield url
    finally:
        stop_process(proc)


@contextlib.contextmanager
def background(target, *args: tuple, join: float = 70):
    """Run `target(stop, *a)` in a thread for each tuple `a` of `args` while the block runs;
    yields `stop`, a threading.Event. However the block ends, pass or fail, `stop` is set and
    each thread is joined within `join` seconds in all; a thread still alive after a block that
    passed fails the test. The threads are daemons and a loop in them waits on `stop` between
    tries (`stop.wait(...)`, never a bare retry), so a failing test neither spins nor keeps the
    run from ending once it has printed its summary."""
    stop = threading.Event()
    threads = [threading.Thread(target=target, args=(stop, *a), daemon=True) for a in args]
    for t in threads:
        t.start()
    try:
        yield stop
    finally:
        stop.set()
        deadline = time.monotonic() + join
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"threads still running {join}s after their block ended: {alive}"


def wait_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds. The
    tests' one poll (`await_until` is the same for async tests)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(_not_reached(what, timeout, last))


async def await_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    """`wait_until` in an async test: `predicate` (sync; it may touch the database or make an
    HTTP request) runs through `sync_to_async` between awaits, so the code under test keeps
    the event loop and Django's thread while the test waits."""
    from asgiref.sync import sync_to_async

    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await sync_to_async(predicate)()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(_not_reached(what, timeout, last))


def _not_reached(what: str, timeout: float, last) -> str:
    return f"{what} not reached within {timeout}s (last: {last!r})"


class Console:
    """One `manage.py serve` process."""

    def __init__(self, base: Path, servers: dict | None = None, env: dict | None = None) -> None:
        self.base = base
        self.home = base / "home"
        self.data = base / "data"
        self.home.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "AGENVOY_HOME": str(self.home),
            "AGENVOY_DATA_DIR": str(self.data),
            "DJANGO_SECRET_KEY": "live-test",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.env.pop("DATABASE_URL", None) if "DATABASE_URL" not in (env or {}) else None
        # A PostgreSQL console (the scale-out layout) when the caller names one; else SQLite.
        self.database_url = self.env.get("DATABASE_URL", "")
        self.proc: subprocess.Popen | None = None
        if servers is not None:
            (self.home / "mcp.json").write_text(json.dumps({"servers": servers}, indent=2))
        self._fresh_database()
        self.token = self._insert_token("tests")
        self.http = httpx2.Client(
            base_url=self.url, timeout=120, headers={"Authorization": f"Bearer {self.token}"}
        )
        # Replies come from another token: no token may answer its own call (SPEC 12.1).
        self.approver_token = self._insert_token("tests-approver", "approver")
        self.approver = httpx2.Client(
            base_url=self.url, timeout=120, headers={"Authorization": f"Bearer {self.approver_token}"}
        )

    def _fresh_database(self) -> None:
        """A copy of a database migrated once per test run: migrate costs seconds a console.
        A PostgreSQL database is migrated in place."""
        global _TEMPLATE
        if self.database_url:
            self.manage("migrate", "--noinput", "-v0")
            return
        if _TEMPLATE is None:
            folder = Path(tempfile.mkdtemp(prefix="agenvoy-template-"))
            env = {**self.env, "AGENVOY_DATA_DIR": str(folder)}
            subprocess.run(
                [PYTHON, str(ROOT / "manage.py"), "migrate", "--noinput", "-v0"],
                env=env,
                cwd=ROOT,
                check=True,
                timeout=120,
            )
            _TEMPLATE = folder / "db.sqlite3"
        shutil.copyfile(_TEMPLATE, self.data / "db.sqlite3")

    def _insert_token(self, name: str, role: str = "admin", may_auto: bool = True) -> str:
        """What `create_token` does, without starting Python again: only the hash is stored.
        The console's own token (`self.token`) is an admin; tests make agents and approvers."""
        token = "agv_" + secrets.token_urlsafe(32)
        row = (name, role, hashlib.sha256(token.encode()).hexdigest(), token[:8], may_auto)
        insert = "insert into mcpcore_apitoken (name, role, token_hash, hint, may_auto, created_at) values "
        if self.database_url:
            import psycopg

            with psycopg.connect(self.database_url) as conn:
                conn.execute(insert + "(%s, %s, %s, %s, %s, now())", row)
            return token
        conn = sqlite3.connect(self.data / "db.sqlite3")
        with conn:
            conn.execute(insert + "(?, ?, ?, ?, ?, datetime('now'))", (*row[:4], int(may_auto)))
        conn.close()
        return token

    def manage(self, *args: str) -> str:
        return manage(self.env, *args)

    def client_for(self, role: str, name: str | None = None, may_auto: bool = True) -> "httpx2.Client":
        """An HTTP client carrying a new token of `role` (the caller closes it)."""
        token = self._insert_token(name or f"{role}-{secrets.token_hex(3)}", role, may_auto)
        return httpx2.Client(base_url=self.url, timeout=120, headers={"Authorization": f"Bearer {token}"})

    def start(self) -> "Console":
        self.log = open(self.base / f"serve-{self.port}.log", "ab")
        self.proc = subprocess.Popen(
            [PYTHON, str(ROOT / "manage.py"), "serve", "--port", str(self.port)],
            env=self.env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(self._answers, 30, what="serve answering")
        return self

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"serve exited with {self.proc.returncode}: {self.log_text()[-3000:]}")
        try:
            return httpx2.get(f"{self.url}/v1/openapi.json", timeout=2).status_code == 200
        except httpx2.HTTPError:
            return False

    def log_text(self) -> str:
        return (self.base / f"serve-{self.port}.log").read_text(errors="replace")

    def tracebacks(self) -> list[str]:
        """Each traceback in serve's log, with the log line before it (what was being done)."""
        lines = self.log_text().splitlines()
        found, at = [], 0
        while at < len(lines):
            if lines[at].startswith("Traceback"):
                end = at + 1
                while end < len(lines) and not lines[end][:4].isdigit():
                    end += 1
                found.append("\n".join(lines[max(at - 1, 0) : end]))
                at = end
            else:
                at += 1
        return found

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> float:
        """Stop serve; returns how long it took to exit."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        started = time.monotonic()
        stop_process(self.proc, sig, timeout)
        took = time.monotonic() - started
        self.log.close()  # serve is gone; `start` opens it again
        return took

    def close(self) -> None:
        self.stop()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        if self.proc is not None:
            self.log.close()
        self.http.close()
        self.approver.close()

    # --- API helpers ---------------------------------------------------------------------------

    def get(self, path: str, **params):
        return self.http.get(path, params=params or None)

    def post(self, path: str, body: dict | None = None):
        return self.http.post(path, json=body or {})

    def status(self) -> dict:
        return {s["Name"]: s for s in self.get("/v1/mcp/status").json()["servers"]}

    def tools(self) -> dict:
        return {t["name"]: t for t in self.get("/v1/mcp/tools").json()["tools"]}

    def wait_connected(self, *names: str, timeout: float = 30) -> dict:
        def ok():
            st = self.status()
            return (
                st
                if all(st.get(n, {}).get("state") == "connected" and st[n]["tools"] for n in names)
                else None
            )

        return wait_until(ok, timeout, 0.1, what=f"{names} connected")

    def reply(self, session_id: str, confirm_id: str, body: dict | None = None):
        """Reply to a confirmation as a person's script would: with the approver token."""
        return self.approver.post(f"/v1/session/{session_id}/confirm/{confirm_id}", json=body or {})

    def call(self, name: str, arguments: dict | None = None, **extra):
        body = {"name": name, "arguments": arguments or {}, **extra}
        return self.post("/v1/mcp/call", body)

    def write_servers(self, servers: dict) -> None:
        path = self.home / "mcp.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"servers": servers}, indent=2))
        os.replace(tmp, path)


class Consoles:
    """Makes live consoles on demand and cleans up after them: each is closed, and every MCP
    server process it started is ended (by pid), even when a test killed the console itself.

    `console(servers, env, start=True, allow=None, **more_env)`: a `tests.live.Console` with
    this mcp.json (`servers`; None writes none), this `allow_tool` (its lines) and these settings
    (values made strings), started unless `start=False` (then write its files and call
    `console.start(c)`)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.made: list = []
        self._servers: dict = {}

    def __call__(
        self,
        servers: dict | None = None,
        env: dict | None = None,
        *,
        start: bool = True,
        allow: list[str] | None = None,
        **more,
    ):
        settings = {k: str(v) for k, v in {**(env or {}), **more}.items()}
        c = Console(self.base / f"c{len(self.made)}", servers, settings)
        self.made.append(c)
        if allow is not None:
            (c.home / "allow_tool").write_text("".join(f"{entry}\n" for entry in allow))
        return self.start(c) if start else c

    def start(self, c):
        """`Console.start`, with more patience on a loaded machine: start() gives serve 30 s to
        answer; a slow start is not what any test here is about."""
        try:
            return c.start()
        except AssertionError:
            wait_until(c._answers, 90, 0.2, what="serve answering (slow start)")
            return c

    def track(self, c) -> None:
        """Remember the MCP server processes `c` runs now (before a test kills `c` itself)."""
        import psutil

        try:
            children = psutil.Process(c.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for proc in children:
            self._servers[proc.pid] = proc

    def close(self) -> None:
        import psutil

        for c in self.made:
            if c.proc is not None and c.proc.poll() is None:
                self.track(c)
            c.close()
        for proc in self._servers.values():
            try:
                if proc.is_running():  # same pid *and* creation time: never a reused pid
                    proc.kill()
            except psutil.NoSuchProcess:
                pass


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (to check no MCP server process is left behind)."""
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def server_pids(console: Console, script: str) -> list[int]:
    """The live processes below `console` whose command line mentions `script`."""
    import psutil

    found = []
    for pid in descendants(console.proc.pid):
        try:
            if any(script in part for part in psutil.Process(pid).cmdline()):
                found.append(pid)
        except psutil.NoSuchProcess:
            pass
    return found


def db_rows(console: Console, sql: str, *params) -> list[tuple]:
    """Read the console's own SQLite database (read-only; WAL readers don't block it)."""
    db = sqlite3.connect(f"file:{console.data / 'db.sqlite3'}?mode=ro", uri=True, timeout=20)
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


def token_id(console: Console, name: str) -> int:
    """The database id of the console's token called `name`."""
    return db_rows(console, "select id from mcpcore_apitoken where name = ?", name)[0][0]


def signed_in(console: Console, user: str = "op", password: str = "roles-pw-123") -> httpx2.Client:
    """A new person, and a browser-like session of theirs on the console's pages (cookies,
    CSRF); the caller closes it."""
    console.manage(
        "shell",
        "-c",
        f"from django.contrib.auth.models import User; User.objects.create_user({user!r}, password={password!r})",
    )
    web = httpx2.Client(base_url=console.url, timeout=60)
    web.get("/login/")  # sets the CSRF cookie
    r = web.post(
        "/login/",
        data={"username": user, "password": password, "csrfmiddlewaretoken": web.cookies["csrftoken"]},
        headers={"Referer": console.url + "/login/"},
    )
    assert r.status_code == 302, r.text
    return web


def at_once(clients: list, body: dict) -> list:
    """POST /v1/mcp/call through every client (httpx2) at the same moment; the answers in order."""
    start, answers = threading.Barrier(len(clients)), [None] * len(clients)

    def send(i: int) -> None:
        start.wait(10)
        answers[i] = clients[i].post("/v1/mcp/call", json=body)

    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


# --- call rows written straight into a console's SQLite file --------------------------------------

CALL_COLUMNS = (
    "id", "kind", "confirm_id", "session_id", "tool_name", "server_name", "tool", "arguments",
    "mode", "token_id", "requested_by", "status", "decision", "decided_by", "decided_at", "reason",
    "created_at", "expires_at", "started_at", "ended_at", "worker", "result",
    "is_error", "truncated", "result_bytes", "raw_result", "raw_truncated", "rule",
    "definition_changed", "repeated", "notified", "via", "cwd", "native_result", "agent_left_at",
    "client_asks", "requested_arguments", "edited_by", "for_group", "approvals_needed", "approvals",
    "escalated_to", "escalated_at", "traceparent",
)  # fmt: skip
_CALL_DEFAULTS = {
    "kind": "tool_confirm", "confirm_id": None, "session_id": "s-1", "tool_name": "mcp__srv__tool",
    "server_name": "srv", "tool": "tool", "arguments": {}, "mode": "auto", "token_id": None,
    "requested_by": "tests", "status": "done", "decision": "auto", "decided_by": "", "decided_at": None,
    "reason": "", "expires_at": None, "started_at": None, "ended_at": None, "worker": "",
    "result": "", "is_error": False, "truncated": False, "result_bytes": 0, "raw_result": "",
    "raw_truncated": False, "rule": "", "definition_changed": False, "notified": 2, "via": "rest",
    "cwd": "", "native_result": None, "agent_left_at": None, "client_asks": "",
    "requested_arguments": None, "edited_by": "", "traceparent": "", "repeated": 0, "for_group": "",
    "approvals_needed": 1, "approvals": [], "escalated_to": "", "escalated_at": None,
}  # fmt: skip
_CALL_INSERT = (
    f"INSERT INTO mcpcore_toolcall ({', '.join(CALL_COLUMNS)}) VALUES ({', '.join('?' * len(CALL_COLUMNS))})"
)


def _sqlite_value(v):
    if isinstance(v, uuid.UUID):
        return v.hex
    if isinstance(v, datetime.datetime):
        return v.astimezone(datetime.UTC).replace(tzinfo=None).isoformat(" ")
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    if isinstance(v, bool):
        return int(v)
    return v


def call_row(created_at: datetime.datetime, **fields) -> tuple:
    """One call row created at `created_at`, as Django stores it on SQLite (for many calls, or
    calls of another time, faster than the ORM makes them); an ended status gets its times filled in."""
    values = {**_CALL_DEFAULTS, "id": uuid.uuid4(), "created_at": created_at, **fields}
    if values["status"] not in ("pending", "running"):
        values.setdefault("started_at", None)
        values["started_at"] = values["started_at"] or created_at
        values["ended_at"] = values["ended_at"] or created_at + datetime.timedelta(milliseconds=5)
    if values["status"] == "pending" and values["confirm_id"] is None:
        values["confirm_id"] = uuid.uuid4()
        values["decision"] = ""
    return tuple(_sqlite_value(values[c]) for c in CALL_COLUMNS)


def insert_call_rows(db_path: Path, rows) -> None:
    """Write call rows (from `call_row`) into a console's SQLite file in one transaction."""
    conn = sqlite3.connect(db_path)
    try:
        with conn:
            conn.executemany(_CALL_INSERT, rows)
    finally:
        conn.close()


@contextlib.contextmanager
def rules(client, *lines: str):
    """These rules in force over `/v1` (an admin client) while the block runs; none after."""
    r = client.post("/v1/rules", {"rules": list(lines)})
    assert r.status_code == 200, r.text
    try:
        yield
    finally:
        assert client.post("/v1/rules", {"rules": []}).status_code == 200
