"""SPEC 12.3: secrets stay where they were written, and the files the console makes are its own."""

import json
import os
import stat
import subprocess
import sys

import pytest

from mcpcore import files
from mcpcore.supervisor import transport
from mcpcore.supervisor.session import ServerSession
from tests.live import ROOT

MASK = "********"
REENTER = {"error": "secret values must be entered again when the server's command or url changes"}


def _seed(api, home):
    r = api.post(
        "/v1/mcp",
        {
            "name": "gh",
            "server": {"command": "npx", "args": ["-y", "gh"], "env": {"TOKEN": "ghp_real"}},
        },
    )
    assert r.status_code == 200
    r = api.post(
        "/v1/mcp",
        {
            "name": "web",
            "server": {"url": "https://a.example/mcp", "headers": {"Authorization": "Bearer real"}},
        },
    )
    assert r.status_code == 200
    return (home / "mcp.json").read_bytes()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name, server",
    [
        ("gh", {"command": "sh", "args": ["-c", "env"], "env": {"TOKEN": MASK}}),
        # The same command running another script (issue 41): `args` count as the command.
        ("gh", {"command": "npx", "args": ["-y", "evil"], "env": {"TOKEN": MASK}}),
        ("gh", {"command": "npx", "env": {"TOKEN": MASK}}),
        ("gh", {"url": "https://evil.example/mcp", "env": {"TOKEN": MASK}}),
        ("web", {"url": "https://evil.example/mcp", "headers": {"Authorization": MASK}}),
        ("web", {"command": "sh", "headers": {"Authorization": MASK}}),
    ],
)
def test_it_refuses_a_posted_mask_when_the_command_args_or_url_change(api, agenvoy_home, name, server):
    before = _seed(api, agenvoy_home)
    r = api.post("/v1/mcp", {"name": name, "server": server})
    assert r.status_code == 400 and r.json() == REENTER
    assert (agenvoy_home / "mcp.json").read_bytes() == before


@pytest.mark.django_db
def test_it_keeps_a_masked_secret_while_command_args_and_url_stay(api, agenvoy_home):
    _seed(api, agenvoy_home)
    r = api.post(
        "/v1/mcp",
        {"name": "gh", "server": {"command": "npx", "args": ["-y", "gh"], "env": {"TOKEN": MASK, "N": "2"}}},
    )
    assert r.status_code == 200
    assert json.loads((agenvoy_home / "mcp.json").read_text())["servers"]["gh"]["env"] == {
        "TOKEN": "ghp_real",
        "N": "2",
    }
    # A new value with a new command is fine: nothing stored travels.
    r = api.post("/v1/mcp", {"name": "gh", "server": {"command": "uvx", "env": {"TOKEN": "new"}}})
    assert r.status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("command, args", [("sh", "-c\nenv"), ("npx", "-y\nevil")])
def test_it_refuses_the_same_on_the_edit_page(api, agenvoy_home, client, django_user_model, command, args):
    before = _seed(api, agenvoy_home)
    client.force_login(django_user_model.objects.create_user("op", password="pw-123456789"))
    # An empty value on the edit page means "keep the stored one", i.e. the mask.
    r = client.post(
        "/servers/gh/edit/",
        {"name": "gh", "transport": "stdio", "command": command, "args": args, "env": "TOKEN="},
    )
    assert r.status_code == 400
    assert REENTER["error"].replace("'", "&#x27;") in r.content.decode()
    assert (agenvoy_home / "mcp.json").read_bytes() == before
    # The same command and args keep the stored value.
    r = client.post(
        "/servers/gh/edit/",
        {"name": "gh", "transport": "stdio", "command": "npx", "args": "-y\ngh", "env": "TOKEN=\nN=2"},
    )
    assert r.status_code in (200, 302), r.content.decode()[:500]
    assert json.loads((agenvoy_home / "mcp.json").read_text())["servers"]["gh"]["env"] == {
        "TOKEN": "ghp_real",
        "N": "2",
    }


def test_it_never_expands_the_consoles_own_settings():
    env = {
        "DJANGO_SECRET_KEY": "k",
        "AGENVOY_HOME": "/h",
        "DATABASE_URL": "postgres://u:pw@db/x",
        "REDIS_URL": "redis://r",
        "GH": "ghp",
    }
    text = "$DJANGO_SECRET_KEY ${AGENVOY_HOME} $DATABASE_URL ${REDIS_URL} $GH ${GH} $NOPE."
    assert (
        transport.expand(text, env)
        == "$DJANGO_SECRET_KEY ${AGENVOY_HOME} $DATABASE_URL ${REDIS_URL} ghp ghp ."
    )


def test_it_does_not_expand_the_url(monkeypatch, tmp_path):
    monkeypatch.setenv("HOST_X", "evil.example")
    monkeypatch.setenv("TOKEN_X", "tok-123")
    config = {"url": "https://$HOST_X/mcp", "headers": {"Authorization": "$TOKEN_X"}}
    with open(os.devnull, "w") as errlog:
        target = transport.make_target(config, "streamable-http", errlog)
    assert target.url == "https://$HOST_X/mcp"
    assert target.client.headers["Authorization"] == "Bearer tok-123"


def test_it_masks_expanded_values_in_the_errors_it_stores(monkeypatch):
    monkeypatch.setenv("TOKEN_X", "tok-1234567")
    monkeypatch.setenv("ARG_X", "arg-secret-9")
    config = {
        "command": "srv",
        "args": ["--key=$ARG_X"],
        "env": {"T": "${TOKEN_X}", "PLAIN": "literal-secret"},
        "headers": {"Authorization": "$TOKEN_X"},
    }
    session = ServerSession.__new__(ServerSession)
    session.secrets = transport.secret_values(config)
    exc = RuntimeError("rejected Bearer tok-1234567 for --key=arg-secret-9 (literal-secret)")
    assert session.describe(exc) == "rejected ******** for --key=******** (********)"
    group = ExceptionGroup("x", [ConnectionError("bad tok-1234567")])
    assert "tok-1234567" not in session.describe(group)


# --- modes of what the console creates ----------------------------------------------------------


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_it_creates_its_folders_0700_and_its_files_0600(settings, tmp_path):
    settings.AGENVOY_HOME = tmp_path / "new" / "agenvoy"
    files.atomic_write(files.path_of(files.ALLOW_TOOL), "mcp__a__b\n")
    with files.locked(files.path_of(files.MCP_JSON)):
        pass
    assert _mode(settings.AGENVOY_HOME) == 0o700
    assert _mode(files.path_of(files.ALLOW_TOOL)) == 0o600
    assert _mode(f"{files.path_of(files.MCP_JSON)}.lock") == 0o600
    with files.open_private(tmp_path / "new" / "x.log") as f:
        f.write("line\n")
    assert _mode(tmp_path / "new" / "x.log") == 0o600


def test_it_creates_the_data_folder_database_and_secret_key_owner_only(tmp_path):
    data = tmp_path / "fresh" / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENVOY_", "DJANGO_"))}
    env |= {"AGENVOY_DATA_DIR": str(data), "AGENVOY_HOME": str(tmp_path / "home")}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
        umask=0o022,
        timeout=120,
    )
    assert _mode(data) == 0o700
    assert _mode(data / "db.sqlite3") == 0o600
    assert _mode(data / "secret_key") == 0o600


def test_it_logs_no_content_of_a_server_line_that_is_not_json_rpc(caplog):
    # A server can echo its arguments or environment, expanded secrets included (SPEC 12.3).
    from mcpcore.supervisor import stdio

    with caplog.at_level("WARNING", logger="mcpcore"):
        outcome = stdio._parse(b"junk sekrit-value-42")
    assert isinstance(outcome, Exception)
    assert "not JSON-RPC" in caplog.text and "sekrit" not in caplog.text
