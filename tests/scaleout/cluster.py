"""A scale-out cluster for tests: real Redis and PostgreSQL (tests/services.py), two web
processes (daphne) and two `mcpworker` processes sharing them."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import httpx2

from tests.live import PYTHON, ROOT, free_port, manage, our_server, wait_until
from tests.services import Postgres, Redis

SERVERS = [f"s{i}" for i in range(1, 6)]


class Cluster:
    """Redis, PostgreSQL, two web processes (daphne) and two `mcpworker`s, with five of our
    echo servers (`SERVERS`) in mcp.json, or the mcp.json `servers` given, and `allow` lines in
    allow_tool; `env`: more settings for every process."""

    def __init__(
        self, servers: dict | None = None, allow: list[str] | None = None, env: dict | None = None
    ) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="agenvoy-scale-"))
        os.chmod(self.base, 0o755)
        self.procs: dict[str, subprocess.Popen] = {}
        self.redis: Redis | None = None
        self.pg: Postgres | None = None
        try:
            self._start(servers, allow, env or {})
        except BaseException:
            self.close()  # a start that failed half-way leaves no process behind
            raise

    def _start(self, servers: dict | None, allow: list[str] | None, env: dict) -> None:
        self.redis = Redis(self.base)
        self.pg = Postgres(self.base)
        home = self.base / "home"
        home.mkdir()
        if servers is None:
            servers = {n: our_server("echo.py") for n in SERVERS}
        (home / "mcp.json").write_text(json.dumps({"servers": servers}))
        if allow:
            (home / "allow_tool").write_text("".join(f"{line}\n" for line in allow))
        self.env = {
            **os.environ,
            "DATABASE_URL": self.pg.url,
            "REDIS_URL": self.redis.url,
            "AGENVOY_HOME": str(home),
            "AGENVOY_DATA_DIR": str(self.base / "data"),
            "DJANGO_SECRET_KEY": "scale-test",
            "PYTHONUNBUFFERED": "1",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            **env,
        }
        self.manage("migrate", "--noinput", "-v0")
        self.token = self.manage("create_token", "scale", "--role", "admin").strip()
        self.webs = [self.start_web(f"web{i}") for i in (1, 2)]
        for i in (1, 2):
            self.start_worker(f"w{i}")

    def manage(self, *args: str) -> str:
        return manage(self.env, *args)

    def _spawn(self, name: str, cmd: list[str], **env: str) -> subprocess.Popen:
        with open(self.base / f"{name}.log", "ab") as log:  # the child keeps its own copy
            proc = subprocess.Popen(
                cmd,
                # Each process names itself in its traces' resource (SPEC 27; inert untraced).
                env={**self.env, "OTEL_RESOURCE_ATTRIBUTES": f"service.instance.id={name}", **env},
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[name] = proc
        return proc

    def start_web(self, name: str, **env: str) -> str:
        port = free_port()
        daphne = str(Path(PYTHON).parent / "daphne")
        self._spawn(
            name, [daphne, "-b", "127.0.0.1", "-p", str(port), "agenvoy_site.asgi:application"], **env
        )
        url = f"http://127.0.0.1:{port}"

        def up():
            try:
                return httpx2.get(url + "/v1/openapi.json", timeout=2).status_code == 200
            except httpx2.HTTPError:
                return False

        wait_until(up, 30, 0.1, what=f"{name} up")
        return url

    def start_worker(self, name: str) -> None:
        self._spawn(name, [PYTHON, str(ROOT / "manage.py"), "mcpworker", "--name", name])

    def api(self, web: int = 0) -> httpx2.Client:
        return httpx2.Client(
            base_url=self.webs[web], timeout=60, headers={"Authorization": f"Bearer {self.token}"}
        )

    def status(self, web: int = 0) -> dict:
        with self.api(web) as c:
            return {s["Name"]: s for s in c.get("/v1/mcp/status").json()["servers"]}

    def close(self) -> None:
        """End every process (group) of the cluster, then Redis and PostgreSQL, then its folder."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for service in (self.redis, self.pg):
            if service is not None:
                service.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def all_connected(cluster, names=SERVERS, web=0):
    st = cluster.status(web)
    return st if all(st.get(n, {}).get("state") == "connected" for n in names) else None


def signed_in_browser(cluster, web: int) -> httpx2.Client:
    """A person's session on one web process: sign in through the page like a browser."""
    cluster.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User;"
        " User.objects.filter(username='op').exists() or"
        " User.objects.create_user('op', password='op-pass-123')",
    )
    b = httpx2.Client(base_url=cluster.webs[web], timeout=30, follow_redirects=True)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', b.get("/login/").text).group(1)
    r = b.post(
        "/login/",
        data={"username": "op", "password": "op-pass-123", "csrfmiddlewaretoken": token},
        headers={"Referer": cluster.webs[web] + "/login/"},
    )
    assert "Sign out" in r.text
    return b
