"""Shared fixtures. The run's temporary data folder and $AGENVOY_HOME are set earlier, by
tests/testenv.py (a plugin pytest.ini loads before Django reads its settings)."""

import concurrent.futures
from pathlib import Path

import pytest

from tests.live import Consoles


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
        token = api_token

        def get(self, path, **kw):
            return client.get(path, HTTP_AUTHORIZATION=f"Bearer {api_token}", **kw)

        def post(self, path, body=None, raw=None):
            data = raw if raw is not None else json.dumps(body if body is not None else {})
            return client.post(
                path, data=data, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {api_token}"
            )

    return Api()


# --- live consoles (`manage.py serve` in a subprocess, tests/live.py) ----------------------------


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


@pytest.fixture(scope="module")
def pool():
    """Threads for the requests a module's tests hold open while they do something else."""
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        yield ex


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The OAuth lab (tests/servers/oauthlab/) with its defaults, for one module; a module that
    needs other settings (short-lived tokens, machine clients) makes a `lab` of its own."""
    from tests.servers.oauthlab.run import Lab

    lab = Lab(tmp_path_factory.mktemp("lab")).start()
    yield lab
    lab.close()
