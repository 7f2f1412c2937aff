"""SPEC 8 / issue 5: the browser console's pages and actions, with the Django test client.

No MCP server runs here: servers come from an mcp.json in a temporary $AGENVOY_HOME, and their
state, tools and calls are database rows written directly.
"""

import datetime
import hashlib
import json
import re
import sys
import uuid
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mcpcore import calls, files, serverconfig
from mcpcore.choices import TokenRole
from mcpcore.models import ApiToken, Server, SessionAllowance, Tool, ToolCall
from mcpcore.web import live
from tests.rows import add_tools, make_call, write_servers

pytestmark = pytest.mark.django_db

PNG_URL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDw"
    "ADhgGAWjR9awAAAABJRU5ErkJggg=="
)


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def user(db) -> User:
    return User.objects.create_user("op")  # no password: force_login, and no slow hashing


@pytest.fixture
def signed_in(client, user) -> Client:
    client.force_login(user)
    return client


@pytest.fixture
def csrf_client(user) -> Client:
    c = Client(enforce_csrf_checks=True)
    c.force_login(user)
    return c


@pytest.fixture
def every(agenvoy_home) -> Server:
    write_servers(
        agenvoy_home,
        {
            "every": {"command": "node", "args": ["index.js", "stdio"], "env": {"API_KEY": "s3cret-value"}},
            "other": {"url": "https://example.invalid/mcp", "headers": {"Authorization": "Bearer hush"}},
        },
    )
    add_tools("other", ["x"])
    return add_tools("every", ["echo", "get-sum", "add"])


def allow_lines(home) -> list[str]:
    path = home / "allow_tool"
    return path.read_text().splitlines() if path.exists() else []


# --- every page: signed in, htmx fragment, signed out -----------------------------------------

PAGES = [
    # (url or callable, the fragment's element id)
    ("/", "server-rows"),
    ("/servers/every/", "server-status"),
    ("/pending/", "pending-list"),
    ("/history/", "call-table"),
    ("/tokens/", "token-list"),
    ("call", "call-result-"),
]


def _url(page: str) -> str:
    if page == "call":
        return f"/history/{make_call(status='done', result='ok').id}/"
    return page


@pytest.mark.parametrize("page,fragment", PAGES)
def test_it_renders_every_page_in_full_when_signed_in(signed_in, every, page, fragment):
    r = signed_in.get(_url(page))
    assert r.status_code == 200
    html = r.content.decode()
    assert "<html" in html and 'id="' + fragment in html
    for link in ("Servers", "Pending", "History", "Tokens"):
        assert f">{link}" in html
    assert 'id="pending-badge"' in html


@pytest.mark.parametrize("page,fragment", PAGES)
def test_it_answers_htmx_with_the_fragment_alone(signed_in, every, page, fragment):
    r = signed_in.get(_url(page), headers={"HX-Request": "true"})
    assert r.status_code == 200
    html = r.content.decode().strip()
    assert html.startswith("<") and 'id="' + fragment in html.split(">", 1)[0]
    assert "<html" not in html and "topbar" not in html and 'aria-label="Main"' not in html


@pytest.mark.parametrize(
    "page",
    [
        "/",
        "/servers/every/",
        "/pending/",
        "/history/",
        "/tokens/",
        "/add-server/",
        "/import-servers/",
        "/servers/every/edit/",
        "call",
    ],
)
def test_it_sends_signed_out_visitors_to_sign_in(client, every, page):
    url = _url(page)
    r = client.get(url)
    assert r.status_code == 302
    assert r["Location"].startswith("/login/?next=")


@pytest.mark.parametrize("page", ["/add-server/", "/import-servers/", "/servers/every/edit/"])
def test_it_renders_the_form_pages(signed_in, every, page):
    r = signed_in.get(page)
    assert r.status_code == 200 and b"<form" in r.content


def test_it_answers_404_for_an_unknown_server_or_call(signed_in, every):
    assert signed_in.get("/servers/nope/").status_code == 404
    assert signed_in.get(f"/history/{uuid.uuid4()}/").status_code == 404


def test_it_keeps_the_sign_in_button_and_form(client, db):
    r = client.get("/login/")
    assert r.status_code == 200 and b">Sign in</button>" in r.content


# --- actions: POST only, signed in, CSRF --------------------------------------------------------

ACTIONS = [
    "/reconnect-all/",
    "/servers/every/reconnect/",
    "/add-example-server/",
    "/servers/every/enable/",
    "/servers/every/disable/",
    "/servers/every/remove/",
    "/servers/every/trust/",
    "/servers/every/try/",
    "/pending/{confirm}/reply/",
    "/pending/allowances/{allowance}/revoke/",
    "/tokens/create/",
    "/tokens/{token}/revoke/",
]


@pytest.fixture
def action_ids(every) -> dict:
    call = make_call()
    allowance = SessionAllowance.objects.create(session_id="s", granted_by="op")
    token, _ = ApiToken.issue("t")
    return {"confirm": call.confirm_id, "allowance": allowance.pk, "token": token.pk}


@pytest.mark.parametrize("action", ACTIONS)
def test_it_refuses_get_on_actions_with_405(signed_in, action_ids, action):
    assert signed_in.get(action.format(**action_ids)).status_code == 405


@pytest.mark.parametrize("action", ACTIONS)
def test_it_sends_signed_out_posts_to_sign_in(client, action_ids, action):
    r = client.post(action.format(**action_ids))
    assert r.status_code == 302 and r["Location"].startswith("/login/")


@pytest.mark.parametrize("action", ACTIONS + ["/add-server/", "/import-servers/", "/servers/every/edit/"])
def test_it_refuses_posts_without_a_csrf_token(csrf_client, action_ids, action):
    assert csrf_client.post(action.format(**action_ids)).status_code == 403


def test_it_accepts_a_post_with_the_csrf_header_htmx_sends(csrf_client, action_ids):
    page = csrf_client.get("/tokens/")
    token = re.search(r'"X-CSRFToken": "([^"]+)"', page.content.decode()).group(1)
    r = csrf_client.post(f"/tokens/{action_ids['token']}/revoke/", headers={"X-CSRFToken": token})
    assert r.status_code == 302


# --- servers page --------------------------------------------------------------------------------


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


# --- the first five minutes (issue 24) ----------------------------------------------------------


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
    assert 'href="#client-config"' in made  # the panel points at the snippets made with it
    assert ApiToken.objects.get(name="my-agent").role == TokenRole.AGENT
    assert "Connect an agent" not in signed_in.get("/").content.decode()
    ApiToken.objects.update(revoked_at=timezone.now())
    assert "Connect an agent" in signed_in.get("/").content.decode()


def test_it_shows_connect_an_agent_on_the_tokens_page(signed_in, db):
    ApiToken.issue("t")
    html = signed_in.get("/tokens/").content.decode()
    panel = re.search(r'<section class="card connect-agent".*?</section>', html, re.S).group(0)
    assert len(re.findall(r"<li>", panel)) == 3 and 'href="#new-token-form"' in panel
    assert 'id="new-token-form"' in html


def test_it_names_the_pending_link_by_its_text_and_count_alone(signed_in, every):
    html = signed_in.get("/history/").content.decode()
    link = re.search(r'<a href="/pending/"[^>]*>(.*?)</a>', html, re.S).group(1)
    assert "title=" not in link and re.sub(r"<[^>]+>", "", link).strip() == "Pending"
    make_call()
    link = re.search(r'<a href="/pending/"[^>]*>(.*?)</a>', signed_in.get("/history/").content.decode(), re.S)
    assert re.sub(r"<[^>]+>", "", link.group(1)).split() == ["Pending", "1"]


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


def test_it_previews_an_import_then_imports_on_confirm(signed_in, every, agenvoy_home):
    doc = {
        "mcpServers": {
            "gh": {"command": "npx", "args": ["-y", "gh"], "env": {"GH_TOKEN": "ghp_secret"}},
            "every": {"type": "http", "url": "https://h/mcp"},
        }
    }
    r = signed_in.post("/import-servers/", {"text": json.dumps(doc)})
    html = r.content.decode()
    assert r.status_code == 200 and "npx -y gh" in html and "GH_TOKEN" in html
    assert "replaces the existing one" in html and "Import 2 servers" in html
    assert "gh" not in json.loads((agenvoy_home / "mcp.json").read_text())["servers"]
    payload = re.search(r'name="payload" value="([^"]+)"', html).group(1)
    import html as htmllib

    r = signed_in.post("/import-servers/", {"confirm": "1", "payload": htmllib.unescape(payload)})
    assert r.status_code == 302
    servers = json.loads((agenvoy_home / "mcp.json").read_text())["servers"]
    assert servers["gh"]["env"] == {"GH_TOKEN": "ghp_secret"}
    assert servers["every"] == {"type": "streamable-http", "url": "https://h/mcp"}


def test_it_imports_an_uploaded_file(signed_in, agenvoy_home):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("mcp.json", json.dumps({"servers": {"u": {"command": "x"}}}).encode())
    r = signed_in.post("/import-servers/", {"file": upload})
    assert r.status_code == 200 and "Import 1 server" in r.content.decode()


@pytest.mark.parametrize(
    "text,message",
    [
        ("{nope", "not valid JSON"),
        ('{"other": {}}', "no &quot;servers&quot; or &quot;mcpServers&quot;"),
        ('{"servers": {"a__b": {"command": "x"}}}', "invalid server name"),
        ('{"servers": {"a": {"command": "x", "args": "not a list"}}}', "server.args must be a list"),
    ],
)
def test_it_explains_an_import_it_cannot_use(signed_in, agenvoy_home, text, message):
    r = signed_in.post("/import-servers/", {"text": text})
    assert r.status_code == 400 and message in r.content.decode()


# --- server detail and the trust editor ----------------------------------------------------------


def test_it_shows_tools_with_schema_annotations_and_llm_warning(signed_in, every):
    Tool.objects.filter(registered_name="mcp__every__add").update(
        llm_safe=False, annotations={"readOnlyHint": True}
    )
    Server.objects.filter(name="every").update(
        instructions="Use echo politely.", warnings=["tool 'x' maps to ..., rejected"]
    )
    html = signed_in.get("/servers/every/").content.decode()
    assert "mcp__every__get-sum" in html and "The echo tool." in html
    assert "&quot;message&quot;" in html and "readOnlyHint" in html
    assert html.count("name not LLM-safe") == 1
    assert "Use echo politely." in html and "rejected" in html


def test_it_labels_one_checkbox_per_tool_with_the_tool_name(signed_in, every):
    html = signed_in.get("/servers/every/").content.decode()
    form = re.search(r'<form id="trust-editor".*?</form>', html, re.S).group(0)
    labels = re.findall(r'<input type="checkbox" name="tools" value="([^"]+)"[^>]*>([^<]+)</label>', form)
    assert labels == [
        ("mcp__every__echo", "echo"),
        ("mcp__every__get-sum", "get-sum"),
        ("mcp__every__add", "add"),
    ]
    assert "All tools" in form and ">Save</button>" in form


def test_it_writes_exactly_the_ticked_tools_and_leaves_other_prefixes(signed_in, every, agenvoy_home):
    (agenvoy_home / "allow_tool").write_text("mcp__other__x\nmcp__every__add\n")
    r = signed_in.post("/servers/every/trust/", {"tools": ["mcp__every__echo", "mcp__every__get-sum"]})
    assert r.status_code == 302
    assert allow_lines(agenvoy_home) == ["mcp__every__echo", "mcp__every__get-sum", "mcp__other__x"]


def test_it_writes_the_star_line_for_all_tools(signed_in, every, agenvoy_home):
    (agenvoy_home / "allow_tool").write_text("mcp__every__echo\nmcp__other__x\n")
    signed_in.post("/servers/every/trust/", {"all": "1", "tools": ["mcp__every__echo"]})
    assert allow_lines(agenvoy_home) == ["mcp__every__*", "mcp__other__x"]
    html = signed_in.get("/servers/every/").content.decode()
    assert re.search(r'name="all" value="1" data-all-tools checked', html)


def test_it_clears_the_prefix_when_nothing_is_ticked(signed_in, every, agenvoy_home):
    (agenvoy_home / "allow_tool").write_text("mcp__every__*\nmcp__other__x\n")
    signed_in.post("/servers/every/trust/", {})
    assert allow_lines(agenvoy_home) == ["mcp__other__x"]


def test_it_ignores_ticked_names_that_are_not_this_servers_tools(signed_in, every, agenvoy_home):
    signed_in.post(
        "/servers/every/trust/", {"tools": ["mcp__other__x", "mcp__every__nope", "mcp__every__add"]}
    )
    assert allow_lines(agenvoy_home) == ["mcp__every__add"]


def test_it_ticks_the_tools_allow_tool_allows(signed_in, every, agenvoy_home):
    (agenvoy_home / "allow_tool").write_text("mcp__every__get-sum\n")
    html = signed_in.get("/servers/every/").content.decode()
    assert 'value="mcp__every__get-sum" checked' in html
    assert 'value="mcp__every__echo" checked' not in html


def test_it_answers_the_trust_editor_over_htmx_with_its_fragment(signed_in, every, agenvoy_home):
    r = signed_in.post(
        "/servers/every/trust/", {"tools": ["mcp__every__echo"]}, headers={"HX-Request": "true"}
    )
    html = r.content.decode()
    assert html.lstrip().startswith('<form id="trust-editor"') and "Saved" in html
    assert 'value="mcp__every__echo" checked' in html


# --- try a tool --------------------------------------------------------------------------------


def test_it_tries_a_tool_through_the_gate_as_a_pending_call(signed_in, every):
    r = signed_in.post(
        "/servers/every/try/",
        {"tool": "echo", "arg:message": "hello", "arg:count": "3", "arg:loud": "true"},
        headers={"HX-Request": "true"},
    )
    call = ToolCall.objects.get()
    assert call.status == "pending" and call.mode == "confirm" and call.requested_by == "op"
    assert call.arguments == {"message": "hello", "count": 3, "loud": True}
    html = r.content.decode()
    assert f'id="call-result-{call.id}"' in html and "/pending/" in html
    assert 'id="pending-badge" class="badge"' in html and ">1<" in html


def test_it_tries_an_allowed_tool_at_once_and_shows_the_result(signed_in, every, agenvoy_home, monkeypatch):
    from mcpcore.web import views

    (agenvoy_home / "allow_tool").write_text("mcp__every__*\n")
    monkeypatch.setattr(views, "TRY_WAIT", 0.05)
    dispatched = []

    async def fake_dispatch(call, local=None):
        dispatched.append(call.id)
        await __import__("asgiref.sync").sync.sync_to_async(calls.finish)(
            call.id, "done", json.dumps({"image_0": PNG_URL, "text": "a picture"})
        )

    monkeypatch.setattr(calls, "dispatch", fake_dispatch)
    r = signed_in.post(
        "/servers/every/try/",
        {"tool": "echo", "raw_json": '{"message": "x"}'},
        headers={"HX-Request": "true"},
    )
    assert dispatched and ToolCall.objects.get().status == "done"
    html = r.content.decode()
    assert f'<img src="{PNG_URL}"' in html and "a picture" in html


def test_it_explains_arguments_it_cannot_use(signed_in, every):
    r = signed_in.post(
        "/servers/every/try/", {"tool": "echo", "raw_json": "[1, 2"}, headers={"HX-Request": "true"}
    )
    assert "not valid JSON" in r.content.decode() and not ToolCall.objects.exists()
    r = signed_in.post("/servers/every/try/", {"tool": "echo", "arg:count": "many"})
    assert r.status_code == 302 and not ToolCall.objects.exists()


def test_it_says_when_the_server_is_down_instead_of_trying(signed_in, every):
    Server.objects.filter(name="every").update(state="error", last_error="boom")
    r = signed_in.post(
        "/servers/every/try/", {"tool": "echo", "arg:message": "x"}, headers={"HX-Request": "true"}
    )
    assert "not connected: boom" in r.content.decode()


# --- pending confirmations ---------------------------------------------------------------------


def test_it_lists_pending_calls_with_arguments_time_left_and_the_four_buttons(signed_in, every):
    call = make_call(arguments={"message": "hi", "n": 2})
    html = signed_in.get("/pending/").content.decode()
    item = re.search(
        rf'<article class="card pending" id="pending-{call.confirm_id}".*?</article>', html, re.S
    ).group(0)
    assert "echo" in item and "every" in item and "sess-1" in item
    assert "&quot;message&quot;: &quot;hi&quot;,\n  &quot;n&quot;: 2" in item
    assert re.search(r'data-expires="[^"]+"[^>]*>4:5\d</time> left', item)
    for button in ("Approve", "Approve and remember", "Approve for session", "Deny"):
        assert f">{button}</button>" in item
    assert re.search(r'<label for="reason-[^"]+">Reason</label>', item)
    assert re.search(r'id="pending-badge"[^>]*>1</span>', html)


@pytest.mark.parametrize("action", ["approve", "remember", "session", "deny"])
def test_it_applies_a_reply_to_a_pending_call(signed_in, every, agenvoy_home, action):
    status = "skipped" if action == "deny" else "running"
    call = make_call()
    r = signed_in.post(
        f"/pending/{call.confirm_id}/reply/",
        {"session_id": "sess-1", "action": action, "reason": "not today"},
    )
    assert r.status_code == 302 and r["Location"] == "/pending/"
    call.refresh_from_db()
    assert (call.status, call.decision, call.decided_by) == (status, action, "op")
    if action == "deny":
        assert call.result == "Skipped by user. Reason: not today" and call.reason == "not today"
    if action == "remember":
        assert allow_lines(agenvoy_home) == ["mcp__every__echo"]
    if action == "session":
        assert SessionAllowance.objects.filter(session_id="sess-1", revoked_at__isnull=True).exists()


def test_it_denies_without_a_reason(signed_in, every):
    call = make_call()
    signed_in.post(f"/pending/{call.confirm_id}/reply/", {"session_id": "sess-1", "action": "deny"})
    call.refresh_from_db()
    assert call.status == "skipped" and call.result == "Skipped by user"


def test_it_says_so_when_a_confirmation_is_already_decided_or_unknown(signed_in, every):
    call = make_call()
    signed_in.post(f"/pending/{call.confirm_id}/reply/", {"session_id": "sess-1", "action": "approve"})
    r = signed_in.post(
        f"/pending/{call.confirm_id}/reply/", {"session_id": "sess-1", "action": "deny"}, follow=True
    )
    assert r.status_code == 200 and "confirmation already resolved or expired" in r.content.decode()
    r = signed_in.post(
        f"/pending/{uuid.uuid4()}/reply/", {"session_id": "sess-1", "action": "approve"}, follow=True
    )
    assert "confirmation not found" in r.content.decode()
    r = signed_in.post("/pending/not-a-uuid/reply/", {"session_id": "x", "action": "approve"}, follow=True)
    assert r.status_code == 200 and "confirmation not found" in r.content.decode()
    r = signed_in.post(f"/pending/{call.confirm_id}/reply/", {"action": "maybe"}, follow=True)
    assert r.status_code == 200 and "not understood" in r.content.decode()


def test_it_says_so_when_a_confirmation_has_expired(signed_in, every):
    call = make_call(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    r = signed_in.post(
        f"/pending/{call.confirm_id}/reply/", {"session_id": "sess-1", "action": "approve"}, follow=True
    )
    assert "already resolved or expired" in r.content.decode()
    call.refresh_from_db()
    assert call.status == "expired"


def test_it_answers_an_htmx_reply_with_the_list_badge_and_message(signed_in, every):
    first, second = make_call(), make_call(session_id="sess-2")
    r = signed_in.post(
        f"/pending/{first.confirm_id}/reply/",
        {"session_id": "sess-1", "action": "approve"},
        headers={"HX-Request": "true"},
    )
    html = r.content.decode()
    assert html.lstrip().startswith('<div id="pending-list"')
    assert f"pending-{second.confirm_id}" in html and f"pending-{first.confirm_id}" not in html
    assert re.search(r'id="pending-badge"[^>]*hx-swap-oob="true">1</span>', html)
    assert 'id="messages"' in html and "Approved: mcp__every__echo." in html
    assert 'id="allowances"' in html


def test_it_revokes_a_session_allowance(signed_in, every):
    row = SessionAllowance.objects.create(session_id="sess-9", granted_by="op")
    assert "sess-9" in signed_in.get("/pending/").content.decode()
    r = signed_in.post(f"/pending/allowances/{row.pk}/revoke/", headers={"HX-Request": "true"})
    row.refresh_from_db()
    assert row.revoked_at is not None and "sess-9" not in r.content.decode().split('id="messages"')[0]
    assert not calls.session_allowed(None, "sess-9")


def test_it_shows_the_pending_count_badge_on_every_page(signed_in, every):
    make_call()
    make_call(session_id="b")
    for page in ("/", "/history/", "/tokens/", "/servers/every/"):
        assert re.search(r'id="pending-badge"[^>]*>2</span>', signed_in.get(page).content.decode())


# --- history -----------------------------------------------------------------------------------


def test_it_shows_calls_with_arguments_decision_duration_and_result(signed_in, every):
    now = timezone.now()
    make_call(
        status="skipped",
        decision="deny",
        decided_by="op",
        reason="too risky",
        result="Skipped by user. Reason: too risky",
        confirm_id=uuid.uuid4(),
    )
    make_call(
        status="done",
        tool="get-sum",
        arguments={"a": 1, "b": 2},
        decision="auto",
        started_at=now,
        ended_at=now + datetime.timedelta(seconds=1.5),
        result="3",
    )
    html = signed_in.get("/history/").content.decode()
    assert "too risky" in html and "by op" in html and "get-sum" in html
    assert "1.50 s" in html and "&quot;a&quot;: 1" in html


def test_it_renders_images_in_history_and_notes_truncation(signed_in, every):
    big = "x" * 20
    call = make_call(
        status="done",
        result=json.dumps({"image_0": PNG_URL, "text": "tiny"}),
        raw_result=json.dumps({"image_0": PNG_URL, "text": "tiny" + big}),
        truncated=True,
        result_bytes=2_000_000,
    )
    html = signed_in.get("/history/").content.decode()
    assert f'<img src="{PNG_URL}"' in html and "full result" in html
    detail = signed_in.get(f"/history/{call.id}/").content.decode()
    assert detail.count(f'<img src="{PNG_URL}"') == 2 and "tiny" + big in detail
    assert "truncated" in detail


def test_it_keeps_huge_results_out_of_the_list(signed_in, every):
    call = make_call(status="done", result="y" * 500_000)
    html = signed_in.get("/history/").content.decode()
    assert len(html) < 50_000 and "full result" in html
    assert "y" * 500_000 in signed_in.get(f"/history/{call.id}/").content.decode()


@pytest.mark.parametrize(
    "query,expected",
    [
        ("server=other", {"x"}),
        ("tool=sum", {"get-sum"}),
        ("status=error", {"add"}),
        ("session=s-2", {"get-sum"}),
        ("", {"x", "get-sum", "add", "echo"}),
    ],
)
def test_it_filters_history(signed_in, every, query, expected):
    make_call(status="done", tool="echo", session_id="s-1")
    make_call(status="done", tool="get-sum", session_id="s-2")
    make_call(status="error", tool="add", session_id="s-1")
    make_call(status="done", tool="x", server="other", session_id="s-1")
    r = signed_in.get(f"/history/?{query}", headers={"HX-Request": "true"})
    tools = set(re.findall(r'class="tool-name"[^>]*>([^<]+)</a>', r.content.decode()))
    assert tools == expected


def test_it_pages_history_newest_first_without_counting(signed_in, every):
    base = timezone.now()
    ToolCall.objects.bulk_create(
        [
            ToolCall(
                session_id="s",
                tool_name="mcp__every__echo",
                server_name="every",
                tool=f"t{i}",
                status="done",
                created_at=base - datetime.timedelta(seconds=i),
            )
            for i in range(120)
        ]
    )

    def page(url):
        with CaptureQueriesContext(connection) as queries:
            html = signed_in.get(url, headers={"HX-Request": "true"}).content.decode()
        assert not any("COUNT(" in q["sql"].upper() for q in queries.captured_queries)
        tools = re.findall(r'class="tool-name"[^>]*>([^<]+)</a>', html)
        older = re.search(r'href="(/history/\?before=[^"]+)"', html)
        newer = re.search(r'href="(/history/\?after=[^"]+)"', html)
        return (
            tools,
            older and older.group(1).replace("&amp;", "&"),
            newer and newer.group(1).replace("&amp;", "&"),
        )

    first, older, newer = page("/history/")
    assert first == [f"t{i}" for i in range(50)] and older and not newer
    second, older2, newer2 = page(older)
    assert second == [f"t{i}" for i in range(50, 100)] and newer2
    third, older3, _ = page(older2)
    assert third == [f"t{i}" for i in range(100, 120)] and not older3
    back, _, _ = page(newer2)
    assert back == first


def test_it_shows_the_full_raw_result_of_a_call(signed_in, every):
    call = make_call(
        status="done",
        result="short",
        raw_result="the whole long thing",
        truncated=True,
        raw_truncated=True,
        result_bytes=3_000_000,
    )
    html = signed_in.get(f"/history/{call.id}/").content.decode()
    assert "the whole long thing" in html and "truncated at the cap" in html
    assert "cut there" in html


# --- tokens ------------------------------------------------------------------------------------


def test_it_shows_a_new_token_once_and_stores_only_its_hash(signed_in, db):
    r = signed_in.post("/tokens/create/", {"name": "agent-1"})
    html = r.content.decode()
    token = re.search(r'<pre class="token" id="new-token">(agv_[^<]+)</pre>', html).group(1)
    row = ApiToken.objects.get(name="agent-1")
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest() and not row.may_auto
    assert token not in json.dumps([str(v) for v in ApiToken.objects.values().get().values()])
    assert r["Cache-Control"] == "no-store"
    again = signed_in.get("/tokens/").content.decode()
    assert token not in again and "agent-1" in again and token[:8] in again


def test_it_creates_a_token_that_may_use_auto_when_ticked(signed_in, db):
    signed_in.post("/tokens/create/", {"name": "a", "may_auto": "on"})
    assert ApiToken.objects.get(name="a").may_auto


def test_it_explains_a_token_it_cannot_create(signed_in, db):
    r = signed_in.post("/tokens/create/", {"name": ""})
    assert r.status_code == 400 and not ApiToken.objects.exists()


def test_it_revokes_a_token(signed_in, db):
    row, _ = ApiToken.issue("old")
    r = signed_in.post(f"/tokens/{row.pk}/revoke/", headers={"HX-Request": "true"})
    row.refresh_from_db()
    assert row.revoked_at is not None and "revoked" in r.content.decode()
    assert r.content.decode().lstrip().startswith('<div id="token-list"')


# --- live pushes -------------------------------------------------------------------------------


def _scope(user, page: str = "", sig: str = "") -> dict:
    query = f"page={page}" + (f"&sig={sig}" if sig else "")
    return {"user": user, "query_string": query.encode()}


def push(event: dict, scope: dict) -> str:
    return async_to_sync(live.render_push)(event, scope)


def test_it_pushes_the_server_rows_to_the_servers_page_in_one_query(every, user, django_assert_num_queries):
    Server.objects.filter(name="every").update(state="error", last_error="gone")
    with django_assert_num_queries(1):
        html = push({"type": "status.changed", "server": "every"}, _scope(user, "servers"))
    assert html.lstrip().startswith('<tbody id="server-rows" hx-swap-oob="true"')
    assert 'data-state="error"' in html and "gone" in html


def test_it_pushes_the_status_panel_to_that_servers_page(every, user, django_assert_num_queries):
    with django_assert_num_queries(1):
        html = push({"type": "status.changed", "server": "every"}, _scope(user, "server:every", "old"))
    assert '<section id="server-status"' in html and 'hx-swap-oob="true"' in html
    assert "The tool list has changed" in html
    assert push({"type": "status.changed", "server": "every"}, _scope(user, "server:other")) == ""
    assert push({"type": "status.changed", "server": "every"}, _scope(user, "pending")) == ""


def test_it_pushes_the_pending_list_and_badge(every, user, django_assert_num_queries):
    call = make_call()
    # The list, and on the Pending page its session allowances (revoked tokens drop theirs).
    with django_assert_num_queries(2):
        html = push({"type": "pending.changed", "call_id": str(call.id)}, _scope(user, "pending"))
    assert '<div id="allowances" hx-swap-oob="true">' in html
    assert re.search(r'<div id="pending-list" class="pending-list" data-sig="\w+" hx-swap-oob="true"', html)
    assert f"pending-{call.confirm_id}" in html
    assert re.search(r'<span id="pending-badge"[^>]*hx-swap-oob="true">1</span>', html)
    with django_assert_num_queries(1):
        other = push({"type": "pending.changed", "call_id": str(call.id)}, _scope(user, "servers"))
    assert "pending-list" not in other and re.search(r'id="pending-badge"[^>]*>1</span>', other)


def test_it_pushes_nothing_to_a_signed_out_socket(every):
    assert push({"type": "pending.changed", "call_id": "x"}, _scope(AnonymousUser(), "pending")) == ""


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_delivers_a_push_over_the_live_socket(agenvoy_home):
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from mcpcore import control
    from mcpcore.web.consumers import LiveConsumer

    op = await sync_to_async(User.objects.create_user)("ws-op")
    app = LiveConsumer.as_asgi()
    anon = WebsocketCommunicator(app, "/ws/live/?page=pending")
    anon.scope["user"] = AnonymousUser()
    connected, _ = await anon.connect()
    assert not connected
    comm = WebsocketCommunicator(app, "/ws/live/?page=pending")
    comm.scope["user"] = op
    connected, _ = await comm.connect()
    assert connected
    await control.asend_group(control.PENDING, {"type": "pending.changed", "call_id": "x"})
    html = await comm.receive_from(timeout=5)
    assert 'id="pending-list"' in html and 'id="pending-badge"' in html
    await comm.disconnect()


def test_it_signs_the_pending_list_by_what_it_shows(signed_in, every):
    def sig():
        html = signed_in.get("/pending/", headers={"HX-Request": "true"}).content.decode()
        return re.search(r'data-sig="(\w+)"', html).group(1)

    empty = sig()
    call = make_call()
    one = sig()
    assert one != empty and sig() == one
    ToolCall.objects.filter(pk=call.pk).update(status="skipped")
    assert sig() == empty


def test_it_builds_a_try_form_only_when_it_is_opened(signed_in, every):
    page = signed_in.get("/servers/every/").content.decode()
    assert 'name="raw_json"' not in page
    assert 'hx-get="/servers/every/try-form/?tool=echo"' in page
    r = signed_in.get("/servers/every/try-form/?tool=echo", headers={"HX-Request": "true"})
    form = r.content.decode()
    assert r.status_code == 200 and form.lstrip().startswith("<form")
    assert 'name="raw_json"' in form and 'value="echo"' in form and "csrfmiddlewaretoken" in form
    # Without JavaScript the link opens the page with that one form.
    r = signed_in.get("/servers/every/try-form/?tool=echo")
    assert r.status_code == 302 and r["Location"] == "/servers/every/?try=echo"
    page = signed_in.get("/servers/every/?try=echo").content.decode()
    assert page.count('name="raw_json"') == 1
    assert (
        signed_in.get("/servers/every/try-form/?tool=nope", headers={"HX-Request": "true"}).status_code == 404
    )
