"""SPEC 2.1 and 7: `GET/POST /v1/mcp` and `POST /v1/mcp/remove` against the real mcp.json."""

import json

import pytest

from mcpcore import files
from mcpcore.models import Server, Tool

MASK = "********"

pytestmark = pytest.mark.django_db


def _file(home) -> dict:
    return json.loads((home / "mcp.json").read_text())


def _write(home, data: dict) -> None:
    (home / "mcp.json").write_text(json.dumps(data))
    files.sync_servers()


# --- GET: secrets masked ----------------------------------------------------------------------


def test_it_masks_every_env_and_headers_value(api, agenvoy_home):
    _write(
        agenvoy_home,
        {
            "servers": {
                "local": {
                    "command": "npx",
                    "args": ["-y", "pkg", "${GH}"],
                    "env": {"TOKEN": "${GH}", "PLAIN": "not-secret-looking", "EMPTY": ""},
                },
                "remote": {
                    "url": "https://host/mcp",
                    "headers": {"Authorization": "Bearer abc", "X-Key": "k"},
                    "x-note": "n",
                },
            }
        },
    )
    r = api.get("/v1/mcp")
    assert r.status_code == 200
    assert r.json() == {
        "servers": {
            "local": {
                "command": "npx",
                "args": ["-y", "pkg", "${GH}"],
                "env": {"TOKEN": MASK, "PLAIN": MASK, "EMPTY": MASK},
            },
            "remote": {
                "url": "https://host/mcp",
                "headers": {"Authorization": MASK, "X-Key": MASK},
                "x-note": "n",
            },
        }
    }
    text = r.content.decode()
    for secret in ("Bearer abc", "not-secret-looking"):
        assert secret not in text


def test_it_lists_no_servers_when_there_are_none(api, agenvoy_home):
    assert api.get("/v1/mcp").json() == {"servers": {}}


def test_it_masks_secrets_written_through_the_api(api, agenvoy_home):
    r = api.post("/v1/mcp", {"name": "s", "server": {"command": "x", "env": {"K": "secret"}}})
    assert r.status_code == 200
    assert api.get("/v1/mcp").json() == {"servers": {"s": {"command": "x", "env": {"K": MASK}}}}


# --- POST: errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body", [{}, {"name": ""}, {"name": "   "}, {"name": None}, {"name": 5}, {"server": {"command": "x"}}]
)
def test_it_answers_400_name_is_required(api, agenvoy_home, body):
    r = api.post("/v1/mcp", body)
    assert r.status_code == 400
    assert r.json() == {"error": "name is required"}
    assert not (agenvoy_home / "mcp.json").exists()


@pytest.mark.parametrize(
    "name, why",
    [
        ("a__b", "must not contain '__'"),
        ("_a", "must not start or end with '_'"),
        ("a_", "must not start or end with '_'"),
        ("a b", "only ASCII letters, digits, '-' and '_' are allowed"),
        ("ü", "only ASCII letters, digits, '-' and '_' are allowed"),
        ("x" * 65, "must be at most 64 characters"),
    ],
)
def test_it_answers_400_for_an_invalid_server_name(api, agenvoy_home, name, why):
    r = api.post("/v1/mcp", {"name": name, "server": {"command": "x"}})
    assert r.status_code == 400
    assert r.json() == {"error": f"invalid server name: {why}"}
    assert not (agenvoy_home / "mcp.json").exists()
    assert not Server.objects.exists()


@pytest.mark.parametrize(
    "server",
    [
        None,
        {},
        {"args": ["x"]},
        {"command": ""},
        {"url": " "},
        {"command": None, "url": None},
        {"command": ["npx"]},
        "npx",
        [],
        {"type": "sse"},
    ],
)
def test_it_answers_400_when_neither_command_nor_url_is_given(api, agenvoy_home, server):
    body = {"name": "s"} if server is None else {"name": "s", "server": server}
    r = api.post("/v1/mcp", body)
    assert r.status_code == 400
    assert r.json() == {"error": "server.command or server.url is required"}
    assert not (agenvoy_home / "mcp.json").exists()


def test_it_leaves_mcp_json_byte_for_byte_after_a_rejected_post(api, agenvoy_home):
    (agenvoy_home / "mcp.json").write_text('{"servers":{"a":{"command":"x"}}}')
    before = (agenvoy_home / "mcp.json").read_bytes()
    for body in (
        {},
        {"name": "a__b", "server": {"command": "x"}},
        {"name": "a", "server": {}},
        {"name": "a", "server": {"command": "x", "args": "not-a-list"}},
        {"name": "a", "server": {"command": "x", "env": {"K": 1}}},
        {"name": "a", "server": {"command": "x", "type": "websocket"}},
    ):
        r = api.post("/v1/mcp", body)
        assert r.status_code == 400, body
        assert set(r.json()) == {"error"}
        assert (agenvoy_home / "mcp.json").read_bytes() == before


# --- POST: success ----------------------------------------------------------------------------


def test_it_adds_a_stdio_server_to_the_file_and_the_database(api, agenvoy_home):
    config = {"command": "npx", "args": ["-y", "pkg"], "env": {"TOKEN": "${GH}"}}
    r = api.post("/v1/mcp", {"name": "github", "server": config})
    assert r.status_code == 200
    assert r.json() == {"ok": True}
    assert _file(agenvoy_home) == {"servers": {"github": config}}
    row = Server.objects.get(name="github")
    assert row.config == config
    assert row.transport == "stdio"
    assert row.enabled
    assert row.state != "error"


@pytest.mark.parametrize(
    "config, transport",
    [
        ({"url": "https://h/mcp"}, "streamable-http"),
        ({"url": "https://h/mcp", "command": "npx"}, "streamable-http"),  # url wins over command
        ({"url": "  ", "command": "npx"}, "stdio"),  # an empty url doesn't
        ({"url": "https://h/sse", "type": "sse"}, "sse"),
        ({"url": "https://h/mcp", "type": "streamable-http"}, "streamable-http"),
        ({"url": "https://h/mcp", "type": "http"}, "streamable-http"),
        ({"command": "npx", "type": "stdio"}, "stdio"),
    ],
)
def test_it_derives_the_transport(api, agenvoy_home, config, transport):
    r = api.post("/v1/mcp", {"name": "s", "server": config})
    assert r.status_code == 200, r.content
    assert Server.objects.get(name="s").transport == transport
    assert files.sync_servers() == set()  # the row already matches the file
    assert Server.objects.get(name="s").transport == transport


def test_it_keeps_disabled_and_timeout_settings(api, agenvoy_home):
    r = api.post("/v1/mcp", {"name": "s", "server": {"command": "x", "disabled": True, "timeout": 12.5}})
    assert r.status_code == 200
    row = Server.objects.get(name="s")
    assert not row.enabled and row.state == "disabled"
    assert row.call_timeout == 12.5
    assert _file(agenvoy_home)["servers"]["s"] == {"command": "x", "disabled": True, "timeout": 12.5}


def test_it_replaces_an_existing_server(api, agenvoy_home):
    api.post("/v1/mcp", {"name": "s", "server": {"command": "x", "args": ["1"]}})
    r = api.post("/v1/mcp", {"name": "s", "server": {"url": "https://h/mcp"}})
    assert r.status_code == 200
    assert _file(agenvoy_home) == {"servers": {"s": {"url": "https://h/mcp"}}}
    row = Server.objects.get(name="s")
    assert row.transport == "streamable-http"
    assert row.config == {"url": "https://h/mcp"}


def test_it_keeps_the_stored_secret_when_the_mask_is_posted_back(api, agenvoy_home):
    api.post(
        "/v1/mcp",
        {
            "name": "gh",
            "server": {
                "command": "npx",
                "env": {"TOKEN": "s3cret", "OTHER": "o"},
            },
        },
    )
    api.post(
        "/v1/mcp",
        {
            "name": "web",
            "server": {
                "url": "https://h/mcp",
                "headers": {"Authorization": "Bearer xyz"},
            },
        },
    )
    shown = api.get("/v1/mcp").json()["servers"]
    assert shown["gh"]["env"] == {"TOKEN": MASK, "OTHER": MASK}

    # Post back what GET showed, changing one secret (not the args: SPEC 12.3, test_secrets.py).
    edited = dict(shown["gh"], env={"TOKEN": MASK, "OTHER": "changed"})
    assert api.post("/v1/mcp", {"name": "gh", "server": edited}).status_code == 200
    assert api.post("/v1/mcp", {"name": "web", "server": shown["web"]}).status_code == 200

    servers = _file(agenvoy_home)["servers"]
    assert {k: v for k, v in servers["gh"].items() if v != []} == {
        "command": "npx",
        "env": {"TOKEN": "s3cret", "OTHER": "changed"},
    }
    assert servers["web"] == {"url": "https://h/mcp", "headers": {"Authorization": "Bearer xyz"}}
    assert MASK not in (agenvoy_home / "mcp.json").read_text()
    assert Server.objects.get(name="gh").config["env"]["TOKEN"] == "s3cret"


def test_it_drops_a_secret_left_out_of_a_post(api, agenvoy_home):
    api.post("/v1/mcp", {"name": "gh", "server": {"command": "npx", "env": {"A": "1", "B": "2"}}})
    api.post("/v1/mcp", {"name": "gh", "server": {"command": "npx", "env": {"A": MASK}}})
    assert _file(agenvoy_home)["servers"]["gh"]["env"] == {"A": "1"}


# --- remove -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nope", "a__b"])
def test_it_answers_404_when_removing_an_unknown_server(api, agenvoy_home, name):
    _write(agenvoy_home, {"servers": {"a": {"command": "x"}}})
    r = api.post("/v1/mcp/remove", {"name": name})
    assert r.status_code == 404
    assert r.json() == {"error": "server not found"}
    assert _file(agenvoy_home) == {"servers": {"a": {"command": "x"}}}
    assert Server.objects.filter(name="a").exists()


def test_it_answers_400_when_removing_without_a_name(api, agenvoy_home):
    r = api.post("/v1/mcp/remove", {})
    assert r.status_code == 400
    assert r.json() == {"error": "name is required"}


def test_it_removes_a_server_from_the_file_and_the_database_with_its_tools(api, agenvoy_home):
    _write(agenvoy_home, {"servers": {"a": {"command": "x"}, "b": {"url": "https://b/mcp"}}})
    a = Server.objects.get(name="a")
    Tool.objects.create(server=a, tool_name="t1", registered_name="mcp__a__t1")
    Tool.objects.create(server=a, tool_name="t2", registered_name="mcp__a__t2")
    b_tool = Tool.objects.create(
        server=Server.objects.get(name="b"), tool_name="t", registered_name="mcp__b__t"
    )

    r = api.post("/v1/mcp/remove", {"name": "a"})
    assert r.status_code == 200
    assert r.json() == {"ok": True}
    assert _file(agenvoy_home) == {"servers": {"b": {"url": "https://b/mcp"}}}
    assert list(Server.objects.values_list("name", flat=True)) == ["b"]
    assert list(Tool.objects.values_list("registered_name", flat=True)) == ["mcp__b__t"]
    assert Tool.objects.get(pk=b_tool.pk).server.name == "b"
    assert "a" not in api.get("/v1/mcp").json()["servers"]
    assert [t["name"] for t in api.get("/v1/mcp/tools").json()["tools"]] == ["mcp__b__t"]

    # Removed twice: the second time it is unknown.
    r = api.post("/v1/mcp/remove", {"name": "a"})
    assert r.status_code == 404
    assert r.json() == {"error": "server not found"}


# --- misconfigured servers written by someone else --------------------------------------------


def test_it_shows_a_server_without_command_or_url_as_misconfigured(api, agenvoy_home):
    _write(
        agenvoy_home, {"servers": {"broken": {"args": ["x"], "env": {"K": "v"}}, "fine": {"command": "x"}}}
    )
    row = Server.objects.get(name="broken")
    assert row.state == "error"
    assert row.last_error
    assert row.misconfigured

    listed = api.get("/v1/mcp").json()["servers"]
    assert listed["broken"] == {"args": ["x"], "env": {"K": MASK}}
    status = {s["Name"]: s for s in api.get("/v1/mcp/status").json()["servers"]}
    assert status["broken"]["state"] == "error"
    assert status["broken"]["Connected"] is False
    assert status["broken"]["Error"] != ""
    assert status["broken"]["Transport"] == ""
    assert "fine" in status

    # Mended in the file: no longer misconfigured.
    _write(agenvoy_home, {"servers": {"broken": {"command": "y"}, "fine": {"command": "x"}}})
    row = Server.objects.get(name="broken")
    assert row.transport == "stdio"
    assert row.state != "error" and row.last_error == ""


def test_it_keeps_a_misconfigured_server_through_an_api_edit_of_another(api, agenvoy_home):
    _write(agenvoy_home, {"servers": {"broken": {"args": ["x"]}}})
    r = api.post("/v1/mcp", {"name": "ok", "server": {"command": "x"}})
    assert r.status_code == 200
    assert _file(agenvoy_home)["servers"]["broken"] == {"args": ["x"]}
    assert sorted(Server.objects.values_list("name", flat=True)) == ["broken", "ok"]
    assert Server.objects.get(name="broken").state == "error"
