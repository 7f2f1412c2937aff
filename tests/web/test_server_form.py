"""Add server and Edit: the server form, its secrets never shown back, unknown keys kept.

No MCP server runs here: servers come from an mcp.json in a temporary $AGENVOY_HOME, and their
state, tools and calls are database rows written directly."""

import json

import pytest

from mcpcore.models import AuditEntry, Server
from tests.rows import write_servers

pytestmark = pytest.mark.django_db


def test_it_adds_a_server_from_the_form(signed_in, agenvoy_home):
    r = signed_in.post(
        "/add-server/",
        {
            "name": "fresh",
            "transport": "stdio",
            "command": "node",
            "args": "a.js\nstdio\n",
            "env": "TOKEN=abc\nEMPTY=\n",
            "timeout": "12",
        },
    )
    assert r.status_code == 302 and r["Location"] == "/"
    config = json.loads((agenvoy_home / "mcp.json").read_text())["servers"]["fresh"]
    assert config == {
        "type": "stdio",
        "command": "node",
        "args": ["a.js", "stdio"],
        "env": {"TOKEN": "abc", "EMPTY": ""},
        "timeout": 12,
    }
    assert Server.objects.filter(name="fresh", transport="stdio").exists()


def test_it_adds_an_http_server_with_headers(signed_in, agenvoy_home):
    server = {"name": "remote", "transport": "streamable-http", "url": "https://h/mcp"}
    r = signed_in.post("/add-server/", {**server, "headers": "Authorization: ${TOK}", "disabled": "on"})
    assert r.status_code == 302
    config = json.loads((agenvoy_home / "mcp.json").read_text())["servers"]["remote"]
    assert config == {
        "type": "streamable-http",
        "url": "https://h/mcp",
        "headers": {"Authorization": "${TOK}"},
        "disabled": True,
    }
    assert Server.objects.get(name="remote").state == "disabled"


@pytest.mark.parametrize(
    "data,message",
    [
        ({"name": "a__b", "transport": "stdio", "command": "x"}, "invalid server name"),
        ({"name": "ok", "transport": "stdio"}, "needs a command"),
        ({"name": "ok", "transport": "sse"}, "needs a URL"),
        ({"name": "ok", "transport": "stdio", "command": "x", "env": "no equals sign"}, "expected KEY=VALUE"),
        ({"name": "every", "transport": "stdio", "command": "x"}, "already exists"),
    ],
)
def test_it_explains_a_server_it_cannot_add(signed_in, every, data, message):
    r = signed_in.post("/add-server/", data)
    assert r.status_code == 400 and message in r.content.decode()


def test_it_never_shows_secret_values_back_and_keeps_them_on_edit(signed_in, every, agenvoy_home):
    html = signed_in.get("/servers/every/edit/").content.decode()
    assert "API_KEY=" in html and "s3cret-value" not in html
    detail = signed_in.get("/servers/every/").content.decode()
    assert "s3cret-value" not in detail and "API_KEY" in detail
    r = signed_in.post(
        "/servers/every/edit/",
        {
            "name": "ignored",
            "transport": "stdio",
            "command": "node",
            "args": "index.js\nstdio",
            "env": "API_KEY=\nNEW=v\n",
        },
    )
    assert r.status_code == 302 and r["Location"] == "/servers/every/"
    config = json.loads((agenvoy_home / "mcp.json").read_text())["servers"]
    assert config["every"]["env"] == {"API_KEY": "s3cret-value", "NEW": "v"}
    assert "ignored" not in config


def test_it_keeps_unknown_keys_on_edit(signed_in, agenvoy_home):
    write_servers(agenvoy_home, {"s": {"command": "x", "x-note": "mine", "disabled": True}})
    signed_in.post("/servers/s/edit/", {"transport": "stdio", "command": "y"})
    assert json.loads((agenvoy_home / "mcp.json").read_text())["servers"]["s"] == {
        "type": "stdio",
        "command": "y",
        "x-note": "mine",
    }


def test_it_sets_the_sandbox_from_the_form_and_shows_it_back(signed_in, agenvoy_home, tmp_path):
    """SPEC 26: the sandbox fields of the form are the `sandbox` key, and an edit of them is
    an audited server edit."""
    base = {"name": "walled", "transport": "stdio", "command": "node", "args": "srv.js"}
    r = signed_in.post(
        "/add-server/",
        {**base, "sandbox": "on", "sandbox_read": "/srv/data\n\n/opt/models\n", "sandbox_write": "/srv/out"},
    )
    assert r.status_code == 302, r.content.decode()[:2000]
    servers = lambda: json.loads((agenvoy_home / "mcp.json").read_text())["servers"]  # noqa: E731
    assert servers()["walled"]["sandbox"] == {"read": ["/srv/data", "/opt/models"], "write": ["/srv/out"]}
    html = signed_in.get("/servers/walled/edit/").content.decode()
    assert '<option value="on" selected>' in html and "/srv/data\n/opt/models</textarea>" in html
    detail = signed_in.get("/servers/walled/").content.decode()
    assert "Sandbox: on" in detail
    assert "reads /srv/data, /opt/models; writes /srv/out; no network" in detail
    r = signed_in.post("/servers/walled/edit/", {**base, "sandbox": "on", "sandbox_network": "on"})
    assert r.status_code == 302 and servers()["walled"]["sandbox"] == {"network": True}
    assert "with network" in signed_in.get("/servers/walled/").content.decode()
    r = signed_in.post("/servers/walled/edit/", {**base, "sandbox": "on"})
    assert r.status_code == 302 and servers()["walled"]["sandbox"] is True
    r = signed_in.post("/servers/walled/edit/", {**base, "sandbox": "off"})
    assert r.status_code == 302 and servers()["walled"]["sandbox"] is False
    assert "Sandbox: off" in signed_in.get("/servers/walled/").content.decode()
    r = signed_in.post("/servers/walled/edit/", base)
    assert r.status_code == 302 and "sandbox" not in servers()["walled"]
    edits = AuditEntry.objects.filter(action="server.edit", object="walled")
    assert edits.count() == 4
    # Paths without the sandbox on, and a relative path, are refused with the reason.
    r = signed_in.post("/servers/walled/edit/", {**base, "sandbox_read": "/srv/data"})
    assert r.status_code == 400 and "apply when the sandbox is on" in r.content.decode()
    r = signed_in.post("/servers/walled/edit/", {**base, "sandbox": "on", "sandbox_write": "out"})
    assert (
        r.status_code == 400 and "server.sandbox.write must be a list of absolute paths" in r.content.decode()
    )
