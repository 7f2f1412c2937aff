"""The Servers page: each server's row, the first five minutes (the example server, connect an agent), and the actions of a row (remove, disable and enable, reconnect).

No MCP server runs here: servers come from an mcp.json in a temporary $AGENVOY_HOME, and their
state, tools and calls are database rows written directly."""

import json
import re
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from mcpcore import files, serverconfig
from mcpcore.choices import TokenRole
from mcpcore.models import ApiToken, Server
from tests.rows import write_servers

pytestmark = pytest.mark.django_db


def test_it_shows_each_server_with_status_protocol_tools_and_errors(signed_in, every, agenvoy_home):
    Server.objects.filter(name="other").update(state="error", last_error="connection refused")
    html = signed_in.get("/").content.decode()
    row = re.search(r'<tr id="server-every".*?</tr>', html, re.S).group(0)
    assert "connected" in row and "2025-11-25" in row and ">3<" in row and "stdio" in row
    other = re.search(r'<tr id="server-other".*?</tr>', html, re.S).group(0)
    assert "error" in other and "connection refused" in other


def test_it_shows_a_misconfigured_server_as_an_error(signed_in, agenvoy_home):
    write_servers(agenvoy_home, {"broken": {"args": ["x"]}})
    html = signed_in.get("/").content.decode()
    row = re.search(r'<tr id="server-broken".*?</tr>', html, re.S).group(0)
    assert 'data-state="error"' in row and "misconfigured" in row


def test_it_shows_a_shared_file_problem_as_a_banner(signed_in, every, agenvoy_home):
    (agenvoy_home / "mcp.json").write_text("{not json")
    files.sync_servers()
    html = signed_in.get("/").content.decode()
    assert "banner warn" in html and "mcp.json is not valid JSON" in html
    assert 'id="server-every"' in html  # the last good list stays


def test_it_offers_the_example_server_on_an_empty_servers_page_only(signed_in, every, agenvoy_home):
    assert serverconfig.example_installed(), "requirements.txt installs mcp-server-time beside python"
    assert "Add an example server" not in signed_in.get("/").content.decode()
    write_servers(agenvoy_home, {})
    html = signed_in.get("/").content.decode()
    assert 'action="/add-example-server/"' in html and ">Add an example server</button>" in html


def test_it_adds_the_example_server_with_one_post_and_says_what_to_try(signed_in, agenvoy_home):
    r = signed_in.post("/add-example-server/")
    assert r.status_code == 302 and r["Location"] == "/"
    config = json.loads((agenvoy_home / "mcp.json").read_text())["servers"]["time"]
    command = Path(sys.executable).with_name("mcp-server-time")
    assert config == {"command": str(command), "args": []} and command.is_file()
    assert Server.objects.filter(name="time", enabled=True, transport="stdio").exists()
    html = signed_in.get("/").content.decode()
    assert "Added the example server time." in html
    guide = re.search(r'<section class="card first-run".*?</section>', html, re.S).group(0)
    assert "Try the example" in guide and 'href="/servers/time/"' in guide
    assert "Trust a tool, or don't" in guide and "Try it" in guide and 'href="/pending/"' in guide
    assert "Add an example server" not in html


def test_it_says_so_when_the_example_server_exists_already(signed_in, agenvoy_home):
    write_servers(agenvoy_home, {"time": {"command": "uvx", "args": ["mcp-server-time"]}})
    signed_in.post("/add-example-server/")
    config = json.loads((agenvoy_home / "mcp.json").read_text())["servers"]["time"]
    assert config == {"command": "uvx", "args": ["mcp-server-time"]}
    html = signed_in.get("/").content.decode()
    assert "a server named time already exists." in html and "Try the example" not in html


def test_it_says_how_to_install_the_example_server_when_it_is_missing(signed_in, agenvoy_home, monkeypatch):
    monkeypatch.setattr(serverconfig, "example_command", lambda: agenvoy_home / "no-such-program")
    assert "Add an example server" not in signed_in.get("/").content.decode()
    signed_in.post("/add-example-server/")
    assert not (agenvoy_home / "mcp.json").exists()
    assert "The example server is not installed" in signed_in.get("/").content.decode()


def test_it_shows_connect_an_agent_on_the_servers_page_while_no_token_exists(signed_in, agenvoy_home):
    html = signed_in.get("/").content.decode()
    panel = re.search(r'<section class="card connect-agent".*?</section>', html, re.S).group(0)
    steps = re.findall(r"<li>", panel)
    assert "Connect an agent" in panel and len(steps) == 3
    assert 'action="/tokens/create/"' in panel and 'name="role" value="agent"' in panel
    r = signed_in.post("/tokens/create/", {"name": "my-agent", "role": "agent"})
    made = r.content.decode()
    assert 'id="config-claude"' in made and "claude mcp add --transport http" in made
    # The new token's panel holds the snippets; the steps are not repeated below it (issue 47).
    assert 'id="connect-agent"' not in made
    assert ApiToken.objects.get(name="my-agent").role == TokenRole.AGENT
    assert "Connect an agent" not in signed_in.get("/").content.decode()
    ApiToken.objects.update(revoked_at=timezone.now())
    assert "Connect an agent" in signed_in.get("/").content.decode()


def test_it_removes_a_server(signed_in, every, agenvoy_home):
    r = signed_in.post("/servers/every/remove/")
    assert r.status_code == 302
    assert "every" not in json.loads((agenvoy_home / "mcp.json").read_text())["servers"]
    assert not Server.objects.filter(name="every").exists()
    assert "Removed every" in signed_in.get("/").content.decode()


def test_it_disables_and_enables_a_server(signed_in, every, agenvoy_home):
    def config():
        return json.loads((agenvoy_home / "mcp.json").read_text())["servers"]["every"]

    signed_in.post("/servers/every/disable/")
    assert config()["disabled"] is True and Server.objects.get(name="every").state == "disabled"
    r = signed_in.post("/servers/every/enable/", headers={"HX-Request": "true"})
    assert "disabled" not in config()
    html = r.content.decode()
    assert html.lstrip().startswith('<tbody id="server-rows"') and "Enabled every" in html


def test_it_reconnects_and_says_what_became_of_each_server(signed_in, every):
    r = signed_in.post("/reconnect-all/", follow=True)
    html = r.content.decode()
    assert "Reconnect:" in html and "every:" in html and "other:" in html
    r = signed_in.post("/servers/every/reconnect/", headers={"HX-Request": "true"})
    assert 'id="server-rows"' in r.content.decode() and "every:" in r.content.decode()


def test_it_shows_no_table_headers_nor_reconnect_all_with_no_server(signed_in, agenvoy_home, every):
    # Issue 47: an empty Servers page showed seven column headers and a Reconnect all button
    # with nothing behind them.
    html = signed_in.get("/").content.decode()
    assert ">Reconnect all</button>" in html and "<th>Transport</th>" in html
    Server.objects.all().delete()
    html = signed_in.get("/").content.decode()
    assert ">Reconnect all</button>" not in html and "<th>Transport</th>" not in html
    assert "No servers yet." in html
