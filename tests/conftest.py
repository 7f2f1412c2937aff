"""Shared fixtures. The data folder and $AGENVOY_HOME of the test run are temporary folders,
set before Django reads its settings, so no test touches a real configuration."""

import os
import tempfile
from pathlib import Path

_RUN_DIR = Path(tempfile.mkdtemp(prefix="agenvoy-test-"))
os.environ["AGENVOY_DATA_DIR"] = str(_RUN_DIR / "data")
os.environ["AGENVOY_HOME"] = str(_RUN_DIR / "home")
os.environ.setdefault("DJANGO_SECRET_KEY", "test-secret-key-not-for-production")

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


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
