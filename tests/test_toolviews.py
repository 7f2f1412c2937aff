"""Views (SPEC 19) without a live console: the shape of names and patterns, which tools a view
holds, `GET/POST /v1/views` and `/v1/views/remove`, tokens limited to views on the `/v1`
doors (tools, calls, instructions, status), `create_token --view`, the Views page and the
Tokens page's select and snippets. The MCP endpoints with real clients:
tests/mcpserver/test_toolviews_live.py."""

import html as htmllib
import io
import json
import re

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from mcpcore import toolviews
from mcpcore.choices import TokenRole
from mcpcore.models import ApiToken, Server, Tool, View

# --- pure: patterns and selections ----------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern",
    [
        "mcp__github__create_issue",
        "mcp__github__*",
        "mcp__fs__read_*",
        "mcp__git*",
        "mcp__github_*",
        "mcp__*",
        "mc*",
        "*",
        "mcp__a-b__tool with spaces",
    ],
)
def test_it_takes_registered_names_and_their_prefixes_as_patterns(pattern):
    assert toolviews.is_pattern(pattern)


@pytest.mark.parametrize(
    "pattern",
    [
        "",
        "github__*",
        "mcp__github",
        "mcp__github__",
        "mcp__a__b*c",
        "mcp__*__x",
        "**",
        "mcp___x*",
        "mcp__a__b__*x",
        "mcp__bad name__*",
        "mcp__a__b\n",
        "xmcp__*",
        "mcp__" + "a" * 65 + "__*",
    ],
)
def test_it_refuses_what_is_no_registered_name_shape(pattern):
    assert not toolviews.is_pattern(pattern)


def test_it_selects_what_an_include_matches_and_no_exclude_does():
    selection = toolviews.Selection(["mcp__github__*", "mcp__fs__read_file"], ["mcp__github__delete_*"])
    assert selection("mcp__github__create_issue")
    assert selection("mcp__fs__read_file")
    assert not selection("mcp__github__delete_repo")
    assert not selection("mcp__fs__write_file")
    assert not selection("mcp__github_x__tool")  # a prefix ends at the server's `__`
    scope = toolviews.Scope({"a": toolviews.Selection(["mcp__a__*"], []), "b": selection})
    assert scope("mcp__a__x") and scope("mcp__fs__read_file") and not scope("mcp__c__x")
    assert not toolviews.Scope({})("mcp__a__x")


# --- rows ---------------------------------------------------------------------------------------


@pytest.fixture
def tools(db):
    """Servers gh (3 tools) and fs (2 tools), connected."""
    made = {}
    for server, names in (
        ("gh", ["create_issue", "delete_repo", "list"]),
        ("fs", ["read_file", "write_file"]),
    ):
        row = Server.objects.create(
            name=server, state="connected", transport="stdio", instructions=f"Use {server}."
        )
        for i, name in enumerate(names):
            t = Tool.objects.create(
                server=row, tool_name=name, registered_name=f"mcp__{server}__{name}", position=i
            )
            made[t.registered_name] = t
    return made


@pytest.fixture
def admin(client, db):
    _, token = ApiToken.issue("admin", role=TokenRole.ADMIN)
    return Bearer(client, token)


class Bearer:
    def __init__(self, client: Client, token: str) -> None:
        self.client, self.token = client, token

    def get(self, path):
        return self.client.get(path, HTTP_AUTHORIZATION=f"Bearer {self.token}")

    def post(self, path, body):
        return self.client.post(
            path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {self.token}"
        )


def limited(client, *views: str, role=TokenRole.AGENT) -> Bearer:
    _, token = ApiToken.issue(
        f"limited-{'-'.join(views)}", role=role, views=list(View.objects.filter(name__in=views))
    )
    return Bearer(client, token)


GH = {
    "name": "gh",
    "description": "GitHub, less deleting",
    "include": ["mcp__gh__*"],
    "exclude": ["mcp__gh__delete_*"],
}


def test_it_creates_lists_replaces_and_removes_views(admin, tools):
    r = admin.post("/v1/views", GH)
    assert r.status_code == 200, r.content
    view = {**GH, "tools": ["mcp__gh__create_issue", "mcp__gh__list"]}
    assert r.json() == {"ok": True, "view": view}
    admin.post("/v1/views", {"name": "all-fs", "include": ["mcp__fs__*"]})
    listed = admin.get("/v1/views").json()["views"]
    assert [v["name"] for v in listed] == ["all-fs", "gh"] and listed[1] == view
    assert listed[0] == {
        "name": "all-fs",
        "description": "",
        "include": ["mcp__fs__*"],
        "exclude": [],
        "tools": ["mcp__fs__read_file", "mcp__fs__write_file"],
    }
    replaced = admin.post("/v1/views", {"name": "gh", "include": ["mcp__gh__list"]}).json()["view"]
    assert replaced["tools"] == ["mcp__gh__list"] and replaced["description"] == ""
    assert admin.post("/v1/views/remove", {"name": "gh"}).json() == {"ok": True}
    assert [v["name"] for v in admin.get("/v1/views").json()["views"]] == ["all-fs"]
    r = admin.post("/v1/views/remove", {"name": "gh"})
    assert (r.status_code, r.json()) == (404, {"error": "view not found"})


@pytest.mark.parametrize(
    "body, message",
    [
        ({}, "invalid view name: must not be empty"),
        ({"name": "a__b"}, "invalid view name: must not contain '__'"),
        ({"name": "_a"}, "invalid view name: must not start or end with '_'"),
        ({"name": "x" * 65}, "invalid view name: must be at most 64 characters"),
        ({"name": "a b"}, "invalid view name: only ASCII letters, digits, '-' and '_' are allowed"),
        ({"name": "ok", "include": ["mcp__gh__*", "gh__*"]}, "invalid pattern: gh__*"),
        ({"name": "ok", "exclude": ["mcp__gh__a*b"]}, "invalid pattern: mcp__gh__a*b"),
        ({"name": "ok", "include": [""]}, "invalid pattern: "),
        ({"name": "ok", "include": ["mcp__gh__*", " "]}, "invalid pattern:  "),
        ({"name": "ok", "include": ["mcp__gh__*"], "exclude": [""]}, "invalid pattern: "),
        ({"name": "ok", "include": "mcp__gh__*"}, "include must be a list of patterns"),
    ],
)
def test_it_refuses_a_bad_name_or_pattern_and_saves_nothing(admin, tools, body, message):
    admin.post("/v1/views", GH)
    r = admin.post("/v1/views", {**body, "name": body.get("name")} if "name" in body else body)
    assert (r.status_code, r.json()) == (400, {"error": message})
    assert list(View.objects.values_list("name", "include")) == [("gh", ["mcp__gh__*"])]


def test_it_lets_only_an_admin_change_views(client, tools):
    for role in (TokenRole.AGENT, TokenRole.APPROVER):
        _, token = ApiToken.issue(role, role=role)
        who = Bearer(client, token)
        for path in ("/v1/views", "/v1/views/remove"):
            r = who.post(path, GH)
            assert (r.status_code, r.json()) == (403, {"error": "this token may not change views"})
        assert who.get("/v1/views").json() == {"views": []}
    assert not View.objects.exists()


# --- a token limited to views, on the /v1 doors ------------------------------------------------------


def test_it_shows_a_limited_token_only_its_views_tools(admin, client, tools):
    admin.post("/v1/views", GH)
    admin.post("/v1/views", {"name": "fs-read", "include": ["mcp__fs__read_*"]})
    agent = limited(client, "gh")
    names = [t["name"] for t in agent.get("/v1/mcp/tools").json()["tools"]]
    assert names == ["mcp__gh__create_issue", "mcp__gh__list"]
    assert [v["name"] for v in agent.get("/v1/views").json()["views"]] == ["gh"]
    assert [s["Name"] for s in agent.get("/v1/mcp/status").json()["servers"]] == ["gh"]
    assert agent.get("/v1/mcp/status").json()["servers"][0]["tools"] == 2
    text = agent.get("/v1/mcp/instructions").json()["text"]
    assert "### gh" in text and "fs" not in text
    both = limited(client, "gh", "fs-read")
    names = [t["name"] for t in both.get("/v1/mcp/tools").json()["tools"]]
    assert names == ["mcp__fs__read_file", "mcp__gh__create_issue", "mcp__gh__list"]
    # Unlimited tokens see everything, as before.
    assert len(admin.get("/v1/mcp/tools").json()["tools"]) == 5


def test_it_answers_a_limited_tokens_call_outside_its_views_as_an_unknown_tool(
    admin, client, tools, agenvoy_home
):
    admin.post("/v1/views", GH)
    agent = limited(client, "gh")
    answers = {}
    for name in ("mcp__gh__delete_repo", "mcp__fs__read_file", "mcp__gh__nope", "mcp__none__x"):
        r = agent.post("/v1/mcp/call", {"name": name, "wait": 0})
        answers[name] = (r.status_code, r.content.replace(name.encode(), b"<name>"))
    assert set(answers.values()) == {(404, b'{"error": "unknown tool: <name>"}')}
    r = agent.post("/v1/mcp/call", {"name": "mcp__gh__list", "wait": 0})
    assert r.status_code == 202 and r.json()["status"] == "pending"
    # The admin (unlimited) reaches the hidden one.
    assert admin.post("/v1/mcp/call", {"name": "mcp__gh__delete_repo", "wait": 0}).status_code == 202


def test_it_takes_a_removed_view_from_its_tokens_which_then_see_nothing(admin, client, tools, agenvoy_home):
    admin.post("/v1/views", GH)
    agent = limited(client, "gh")
    assert admin.post("/v1/views/remove", {"name": "gh"}).status_code == 200
    assert agent.get("/v1/mcp/tools").json() == {"tools": []}
    r = agent.post("/v1/mcp/call", {"name": "mcp__gh__list", "wait": 0})
    assert (r.status_code, r.json()) == (404, {"error": "unknown tool: mcp__gh__list"})
    # A new view of the same name is not the old one: the token stays without views.
    admin.post("/v1/views", GH)
    assert agent.get("/v1/mcp/tools").json() == {"tools": []}


def test_it_makes_a_token_limited_to_views_from_the_command_line(tools):
    View.objects.create(name="a", include=["mcp__gh__*"])
    View.objects.create(name="b", include=["mcp__fs__*"])
    out = io.StringIO()
    call_command("create_token", "cli", "--view", "a", "--view", "b", stdout=out)
    token = ApiToken.objects.get(token_hash=ApiToken.hash(out.getvalue().strip()))
    assert token.view_limited and sorted(token.views.values_list("name", flat=True)) == ["a", "b"]
    with pytest.raises(CommandError, match="unknown view: nope"):
        call_command("create_token", "bad", "--view", "a", "--view", "nope", stdout=io.StringIO())
    assert not ApiToken.objects.filter(name="bad").exists()
    call_command("create_token", "free", stdout=io.StringIO())
    assert not ApiToken.objects.get(name="free").view_limited


# --- pages --------------------------------------------------------------------------------------


@pytest.fixture
def signed_in(client, db) -> Client:
    client.force_login(User.objects.create_user("op"))
    return client


def test_it_lists_adds_edits_and_removes_views_on_the_views_page(signed_in, tools):
    page = signed_in.get("/views/").content.decode()
    assert 'aria-current="page">Views</a>' in page and "No views yet" in page
    r = signed_in.post(
        "/views/",
        {"name": "gh", "description": "GitHub", "include": "mcp__gh__*\n", "exclude": "mcp__gh__delete_*"},
    )
    assert r.status_code == 302
    page = signed_in.get("/views/").content.decode()
    listed = re.search(r'<ul class="tool-names" id="view-gh-tools">(.*?)</ul>', page, re.S).group(1)
    assert "mcp__gh__create_issue" in listed and "mcp__gh__list" in listed and "delete_repo" not in listed
    assert "/mcp/v/gh" in page
    form = signed_in.get("/views/?edit=gh").content.decode()
    assert 'value="gh"' in form and "mcp__gh__delete_*</textarea>" in form
    bad = signed_in.post("/views/", {"name": "gh", "include": "gh__*"})
    assert bad.status_code == 400 and "Not saved: invalid pattern: gh__*" in bad.content.decode()
    assert View.objects.get(name="gh").include == ["mcp__gh__*"]
    assert signed_in.post("/views/gh/remove/").status_code == 302
    assert not View.objects.exists()


def test_it_makes_a_token_limited_to_views_on_the_tokens_page_with_the_views_url(signed_in, tools, settings):
    settings.AGENVOY_PUBLIC_URL = "https://console.example"
    View.objects.create(name="gh", include=["mcp__gh__*"])
    View.objects.create(name="fs", include=["mcp__fs__*"])
    page = signed_in.get("/tokens/").content.decode()
    assert re.search(r'<label>Views <select name="views"[^>]*multiple', page)
    made = signed_in.post("/tokens/create/", {"name": "bot", "views": ["gh"]}).content.decode()
    token = ApiToken.objects.get(name="bot")
    assert token.view_limited and list(token.views.values_list("name", flat=True)) == ["gh"]
    clear = re.search(r'<pre class="token" id="new-token">(agv_[^<]+)</pre>', made).group(1)
    block = htmllib.unescape(re.search(r'<pre id="config-mcp-servers">(.*?)</pre>', made, re.S).group(1))
    server = {
        "type": "http",
        "url": "https://console.example/mcp/v/gh",
        "headers": {"Authorization": f"Bearer {clear}"},
    }
    assert json.loads(block) == {"mcpServers": {"agenvoy-gh": server}}
    assert "https://console.example/mcp/v/gh" in htmllib.unescape(
        re.search(r'id="config-claude">(.*?)</pre>', made).group(1)
    )
    listing = signed_in.get("/tokens/").content.decode()
    row = re.search(rf'<tr id="token-{token.pk}".*?</tr>', listing, re.S).group(0)
    assert ">gh</a>" in row
    # Unlimited: /mcp, with each view offered.
    made = htmllib.unescape(signed_in.post("/tokens/create/", {"name": "free"}).content.decode())
    assert not ApiToken.objects.get(name="free").view_limited
    assert '"url": "https://console.example/mcp"' in made and "https://console.example/mcp/v/fs" in made
    View.objects.get(name="gh").delete()
    row = re.search(
        rf'<tr id="token-{token.pk}".*?</tr>', signed_in.get("/tokens/").content.decode(), re.S
    ).group(0)
    assert "none left: sees no tools" in row


def test_it_keeps_a_views_patterns_case_exact_where_sql_would_not(admin, client, tools):
    upper = Server.objects.create(name="GH", state="connected", transport="stdio")
    Tool.objects.create(server=upper, tool_name="list", registered_name="mcp__GH__list")
    admin.post("/v1/views", {"name": "gh", "include": ["mcp__gh__*", "mcp__fs__READ_FILE"]})
    agent = limited(client, "gh")
    names = [t["name"] for t in agent.get("/v1/mcp/tools").json()["tools"]]
    assert names == ["mcp__gh__create_issue", "mcp__gh__delete_repo", "mcp__gh__list"]
