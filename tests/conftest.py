"""Shared fixtures. The run's temporary data folder and $AGENVOY_HOME are set earlier, by
tests/testenv.py (a plugin pytest.ini loads before Django reads its settings)."""

from pathlib import Path

import pytest


@pytest.fixture
def agenvoy_home(settings, tmp_path) -> Path:
    """A fresh, empty $AGENVOY_HOME for one test."""
    home = tmp_path / "agenvoy"
    home.mkdir()
    settings.AGENVOY_HOME = home
    return home


@pytest.fixture
def api_token(db) -> str:
    """An admin token: the tests of the routes themselves run with every right (SPEC 12)."""
    from mcpcore.choices import TokenRole
    from mcpcore.models import ApiToken

    _, token = ApiToken.issue("test", role=TokenRole.ADMIN)
    return token


@pytest.fixture
def api(client, api_token):
    """The Django test client with a bearer token; `api.get(path)`, `api.post(path, body)`."""
    import json

    class Api:
        def get(self, path, **kw):
            return client.get(path, HTTP_AUTHORIZATION=f"Bearer {api_token}", **kw)

        def post(self, path, body=None, raw=None):
            data = raw if raw is not None else json.dumps(body if body is not None else {})
            return client.post(
                path, data=data, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {api_token}"
            )

    return Api()


# --- live consoles (`manage.py serve` in a subprocess, tests/live.py) ----------------------------


class Consoles:
    """Makes live consoles on demand and cleans up after them: each is closed, and every MCP
    server process it started is ended (by pid), even when a test killed the console itself.

    `console(servers, env, start=True, **more_env)`: a `tests.live.Console` with this mcp.json
    (`servers`; None writes none) and these settings (values made strings), started unless
    `start=False` (then write its files and call `console.start(c)`)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.made: list = []
        self._servers: dict = {}

    def __call__(self, servers: dict | None = None, env: dict | None = None, *, start: bool = True, **more):
        from tests.live import Console

        settings = {k: str(v) for k, v in {**(env or {}), **more}.items()}
        c = Console(self.base / f"c{len(self.made)}", servers, settings)
        self.made.append(c)
        return self.start(c) if start else c

    def start(self, c):
        """`Console.start`, with more patience on a loaded machine: start() gives serve 30 s to
        answer; a slow start is not what any test here is about."""
        from tests.live import wait_until

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


@pytest.fixture
def console(tmp_path):
    """Live consoles for one test: `c = console({"echo": our_server("echo.py")}, {...})`."""
    made = Consoles(tmp_path / "consoles")
    yield made
    made.close()


@pytest.fixture(scope="module")
def module_console(tmp_path_factory, request):
    """Live consoles shared by one module's tests (a module-scoped fixture builds on it)."""
    made = Consoles(tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2]))
    yield made
    made.close()
