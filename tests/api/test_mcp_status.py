"""`GET /v1/mcp/status`: each server's prompts and resources (templates counted with them),
SPEC 20.1; a token limited to views counts them only for servers its views hold whole (20.2).

The rows are written by the supervisor's own registry functions from SDK objects, as a
listing would; the live test reads the counts of a real server-everything."""

import pytest
from mcp_types import Prompt, PromptArgument, Resource, ResourceTemplate

from mcpcore.choices import TokenRole
from mcpcore.models import ApiToken, View
from mcpcore.supervisor import registry
from tests.live import everything_stdio
from tests.rows import add_tools, write_servers


def register(name: str, prompts: int, resources: int, templates: int) -> None:
    rows, _ = registry.prompt_dicts(
        name,
        [Prompt(name=f"p{i}", arguments=[PromptArgument(name="a", required=True)]) for i in range(prompts)],
    )
    registry.replace_prompts(name, rows, registry.listing_signature(rows))
    listed, made = registry.resource_dicts(
        [Resource(uri=f"x://{name}/{i}", name=f"r{i}") for i in range(resources)],
        [ResourceTemplate(uri_template=f"x://{name}/t/{{id}}/{i}", name=f"t{i}") for i in range(templates)],
    )
    registry.replace_resources(name, listed, made, registry.listing_signature(listed, made))


@pytest.fixture
def two(agenvoy_home):
    write_servers(agenvoy_home, {"alpha": {"command": "x"}, "beta": {"command": "y"}})
    add_tools("alpha", ["one", "two"])
    add_tools("beta", ["three"])
    register("alpha", prompts=3, resources=2, templates=1)
    register("beta", prompts=0, resources=0, templates=4)


@pytest.mark.django_db
def test_it_counts_each_servers_prompts_and_resources_with_templates(api, two):
    status = {s["Name"]: s for s in api.get("/v1/mcp/status").json()["servers"]}
    assert {n: (s["tools"], s["prompts"], s["resources"]) for n, s in status.items()} == {
        "alpha": (2, 3, 3),
        "beta": (1, 0, 4),
    }


@pytest.mark.django_db
def test_it_counts_them_for_a_limited_token_only_where_a_view_holds_the_server_whole(client, two):
    View.objects.create(name="whole", include=["mcp__alpha__*"], exclude=[])
    View.objects.create(name="part", include=["mcp__beta__three"], exclude=[])
    _, secret = ApiToken.issue("limited", role=TokenRole.AGENT, views=list(View.objects.all()))
    r = client.get("/v1/mcp/status", HTTP_AUTHORIZATION=f"Bearer {secret}")
    status = {s["Name"]: s for s in r.json()["servers"]}
    assert (status["alpha"]["prompts"], status["alpha"]["resources"]) == (3, 3)
    assert (status["beta"]["tools"], status["beta"]["prompts"], status["beta"]["resources"]) == (1, 0, 0)


@pytest.mark.django_db
def test_it_describes_the_counts_in_the_openapi_document(client):
    doc = client.get("/v1/openapi.json").json()
    answer = doc["paths"]["/v1/mcp/status"]["get"]["responses"]["200"]["content"]["application/json"]
    item = answer["schema"]["properties"]["servers"]["items"]
    assert {"prompts", "resources"} <= set(item["required"])


@pytest.mark.live
def test_it_counts_a_real_servers_prompts_and_resources(console):
    c = console({"every": everything_stdio()})
    c.wait_connected("every")
    item = c.status()["every"]
    assert (item["prompts"], item["resources"]) == (4, 9)  # 7 resources and 2 templates


@pytest.mark.django_db
def test_it_says_which_servers_run_sandboxed(api, agenvoy_home, settings):
    """SPEC 26: `"sandbox"` per server; `AGENVOY_SANDBOX=all` sandboxes the stdio servers that
    don't say `"sandbox": false`, and never an HTTP server (the console does not run it)."""
    write_servers(
        agenvoy_home,
        {
            "walled": {"command": "x", "sandbox": {"read": ["/srv"]}},
            "plain": {"command": "x"},
            "out": {"command": "x", "sandbox": False},
            "remote": {"url": "https://example.com/mcp"},
        },
    )

    def sandboxed() -> dict:
        r = api.get("/v1/mcp/status")
        assert r.status_code == 200
        return {s["Name"]: s["sandbox"] for s in r.json()["servers"]}

    assert sandboxed() == {"walled": True, "plain": False, "out": False, "remote": False}
    settings.AGENVOY_SANDBOX = "all"
    assert sandboxed() == {"walled": True, "plain": True, "out": False, "remote": False}
