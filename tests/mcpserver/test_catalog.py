"""What an audience of the MCP endpoints sees of prompts, resources and templates, and where a
prompt name, a URI or a bare tool name goes (SPEC 20.2, 20.5), from rows written directly (the
live endpoint with real servers and clients: test_rest_of_mcp.py)."""

import pytest

from mcpcore import toolviewstore
from mcpcore.mcpserver import catalog
from mcpcore.models import ApiToken, Prompt, Resource, ResourceTemplate, Server, Tool, View
from tests.rows import add_tools, write_servers

pytestmark = pytest.mark.django_db


@pytest.fixture
def servers(settings, tmp_path):
    settings.AGENVOY_HOME = str(tmp_path)
    write_servers(tmp_path, {n: {"command": "x"} for n in ("a", "b", "down")})
    for name in ("a", "b"):
        add_tools(name, ["echo", f"only_{name}"])
    add_tools("down", ["echo"], state="error")
    a, b, down = (Server.objects.get(name=n) for n in ("a", "b", "down"))
    Tool.objects.filter(registered_name="mcp__a__only_a").update(
        meta={"ui": {"resourceUri": "ui://a/app", "visibility": ["app"]}}
    )
    Prompt.objects.create(server=a, name="greet", registered_name="mcp__a__greet", description="Say hi.")
    Prompt.objects.create(
        server=b,
        name="review",
        registered_name="mcp__b__review",
        arguments=[{"name": "code", "required": True}],
    )
    Prompt.objects.create(server=down, name="gone", registered_name="mcp__down__gone")
    for server, uri in ((a, "test://a/one"), (a, "test://shared"), (b, "test://shared"), (b, "test://b/two")):
        Resource.objects.create(server=server, uri=uri, name=uri.rsplit("/", 1)[-1], mime_type="text/plain")
    ResourceTemplate.objects.create(server=b, uri_template="test://b/items/{id}", name="item")
    return a, b


def test_it_names_prompts_and_resources_as_tools_are_named(servers):
    made = catalog.build("", None)
    assert [p["name"] for p in made.prompts] == ["a__greet", "b__review"]
    assert made.prompts[1]["arguments"] == [{"name": "code", "required": True}]
    assert [(r["uri"], r["name"]) for r in made.resources] == [
        ("test://a/one", "a__one"),
        ("test://b/two", "b__two"),
    ]
    assert made.templates == [{"uriTemplate": "test://b/items/{id}", "name": "b__item"}]
    own = catalog.build("b", None)
    assert [p["name"] for p in own.prompts] == ["review"]
    assert [(r["uri"], r["name"]) for r in own.resources] == [
        ("test://shared", "shared"),
        ("test://b/two", "two"),
    ]


def test_it_routes_by_listing_then_template_then_ui_resource(servers):
    made = catalog.build("", None)
    assert catalog.route(made, "test://a/one").server == "a"
    assert catalog.route(made, "test://b/items/42").server == "b"
    assert catalog.route(made, "ui://a/app").server == "a"
    assert catalog.route(made, "test://nowhere").servers == ()
    assert catalog.route(made, "test://shared").servers == ("a", "b")
    assert catalog.route(catalog.build("a", None), "test://shared").server == "a"
    assert catalog.template_server(made, "test://b/items/{id}") == "b"


def test_it_counts_a_listing_a_template_and_a_ui_resource_alike_as_claims(servers):
    a, b = servers
    # b lists a's app; a's template claims a URI b lists; neither outranks the other.
    Resource.objects.create(server=b, uri="ui://a/app", name="app")
    ResourceTemplate.objects.create(server=a, uri_template="test://b/{name}", name="any")
    made = catalog.build("", None)
    assert catalog.route(made, "ui://a/app").servers == ("a", "b")
    assert catalog.route(made, "test://b/two").servers == ("a", "b")
    assert catalog.route(made, "test://b/items/42").server == "b"
    assert [r["uri"] for r in made.resources] == ["test://a/one"]
    assert catalog.route(catalog.build("b", None), "ui://a/app").server == "b"


def test_it_keeps_the_tools_meta_and_the_bare_names_of_their_own(servers):
    made = catalog.build("", None)
    app = next(t for t in made.tools if t["name"] == "a__only_a")
    assert app["_meta"] == {"ui": {"resourceUri": "ui://a/app", "visibility": ["app"]}}
    assert made.own_tools["only_a"] == ["mcp__a__only_a"]
    assert sorted(made.own_tools["echo"]) == ["mcp__a__echo", "mcp__b__echo"]


def test_it_shows_a_view_the_servers_it_holds_whole(servers):
    toolviewstore.save("whole", "", ["mcp__b__*"], [])
    toolviewstore.save("part", "", ["mcp__a__echo"], [])
    toolviewstore.save("cut", "", ["mcp__a__*"], ["mcp__a__only_a"])
    assert [p["name"] for p in catalog.build("v/whole", None).prompts] == ["b__review"]
    assert catalog.build("v/part", None).prompts == []
    assert catalog.build("v/cut", None).resources == []


def test_it_shows_a_limited_token_only_its_views_servers(servers):
    toolviewstore.save("whole", "", ["mcp__b__*"], [])
    limited, _clear = ApiToken.issue("limited", views=list(View.objects.filter(name="whole")))
    made = catalog.build("", limited)
    assert [p["name"] for p in made.prompts] == ["b__review"]
    # `test://shared` is b's alone for this token: listed, and read from b.
    assert catalog.route(made, "test://shared").server == "b"
    assert catalog.route(made, "test://a/one").servers == ()
    assert catalog.build("a", limited).prompts == []
