"""A server's page lists its prompts and resources beside its tools (SPEC 20.1), with the
warnings of a failed listing. Rows written by the supervisor's registry functions from SDK
objects, as a listing would; no MCP server runs."""

import re

import pytest
from mcp_types import Prompt, PromptArgument, Resource, ResourceTemplate

from mcpcore.models import Resource as ResourceRow
from mcpcore.models import Server
from mcpcore.supervisor import registry

pytestmark = pytest.mark.django_db


def listed(name: str) -> None:
    rows, _ = registry.prompt_dicts(
        name,
        [
            Prompt(
                name="review",
                title="Code review",
                description="Reviews a change.",
                arguments=[
                    PromptArgument(name="diff", description="the change to review", required=True),
                    PromptArgument(name="tone"),
                ],
            ),
            Prompt(name="plain"),
        ],
    )
    registry.replace_prompts(name, rows, registry.listing_signature(rows))
    resources, templates = registry.resource_dicts(
        [
            Resource(
                uri="file:///docs/readme.md",
                name="readme",
                title="Read me",
                mime_type="text/markdown",
                size=2048,
            ),
            Resource(uri="ui://every/app.html", name="app", mime_type="text/html;profile=mcp-app"),
        ],
        [ResourceTemplate(uri_template="file:///docs/{path}", name="doc", description="Any doc.")],
    )
    registry.replace_resources(name, resources, templates, registry.listing_signature(resources, templates))


def test_it_lists_prompts_with_their_arguments(signed_in, every):
    listed("every")
    html = signed_in.get("/servers/every/").content.decode()
    section = re.search(r'<section class="tools-section" id="prompts">.*?</section>', html, re.S).group(0)
    assert 'Prompts <span class="muted">(2)</span>' in section
    assert "review" in section and "Code review" in section and "Reviews a change." in section
    assert "mcp__every__review" in section
    assert (
        "<code>diff</code>" in section and 'title="required"' in section and "the change to review" in section
    )
    assert "<code>tone</code>" in section and "No arguments." in section  # `plain` has none


def test_it_lists_resources_and_templates(signed_in, every):
    listed("every")
    html = signed_in.get("/servers/every/").content.decode()
    section = re.search(r'<section class="tools-section" id="resources">.*?</section>', html, re.S).group(0)
    assert "(2, 1 template)" in section
    assert "file:///docs/readme.md" in section and "Read me" in section and "text/markdown" in section
    assert "2.0\xa0KB" in section  # the size, as a person reads it
    assert "ui://every/app.html" in section and "text/html;profile=mcp-app" in section
    assert "file:///docs/{path}" in section and "Any doc." in section


def test_it_says_when_there_are_none_and_shows_the_listings_warning(signed_in, every):
    Server.objects.filter(name="every").update(warnings=["prompts/list failed: boom"])
    html = signed_in.get("/servers/every/").content.decode()
    assert "This server lists no prompts." in html and "This server lists no resources." in html
    assert '<p class="banner warn">prompts/list failed: boom</p>' in html
    assert html.index('id="server-status"') < html.index('id="prompts"') < html.index('id="resources"')


def test_it_warns_of_a_uri_another_server_lists_too(signed_in, every):
    listed("every")
    other = Server.objects.get(name="other")
    ResourceRow.objects.create(server=other, uri="file:///docs/readme.md", name="readme")
    registry.record_claims()  # what the supervisor does once it registered a change
    html = signed_in.get("/servers/every/").content.decode()
    section = re.search(r'<section class="tools-section" id="resources">.*?</section>', html, re.S).group(0)
    rows = {
        re.search(r"<code[^>]*>(.*?)</code>", row).group(1): row
        for row in re.findall(r"<tr>\s*<td data-label=\"URI.*?</tr>", section, re.S)
    }
    # The shared URI, and the template it matches (SPEC 20.2: a claim too); not the app's page.
    assert "URI also served by other" in rows["file:///docs/readme.md"]
    assert "URI also served by other" in rows["file:///docs/{path}"]
    assert "URI also served by" not in rows["ui://every/app.html"]
    assert "URI also served by every" in signed_in.get("/servers/other/").content.decode()
