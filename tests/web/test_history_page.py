"""The History page and a call's page: arguments, decision, duration and result, images, huge results kept out of the list, filters and pages.

No MCP server runs here: servers come from an mcp.json in a temporary $AGENVOY_HOME, and their
state, tools and calls are database rows written directly."""

import datetime
import json
import re
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mcpcore.models import ToolCall
from tests.rows import make_call
from tests.web.pages import PNG_URL

pytestmark = pytest.mark.django_db


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


# --- prompts and resources (SPEC 20.3) ------------------------------------------------------------

LONG_URI = "file:///srv/docs/" + "d" * 800 + ".md"


def make_prompt_and_resource_calls():
    """A tool call, a prompt get, a resource read (its URI longer than tool_name keeps) and a
    permission prompt, as the call path records them."""
    make_call(status="done", tool="echo")
    prompt = make_call(
        status="done",
        tool="review",
        tool_name="mcp__every__review",
        kind="prompt",
        arguments={"style": "terse"},
        result="user: review this",
    )
    resource = make_call(
        status="done",
        tool="",
        tool_name=LONG_URI[:700],
        kind="resource",
        arguments={"uri": LONG_URI},
        result="the readme",
    )
    make_call(status="done", tool="Bash", tool_name="Bash", server="", kind="permission_prompt")
    return prompt, resource


def test_it_shows_prompt_gets_and_resource_reads_in_the_history(signed_in, every):
    prompt, resource = make_prompt_and_resource_calls()
    html = signed_in.get("/history/").content.decode()
    assert "Get prompt mcp__every__review" in html and "&quot;style&quot;: &quot;terse&quot;" in html
    assert f"Read {LONG_URI} from every" in html
    detail = signed_in.get(f"/history/{resource.id}/").content.decode()
    assert f'<h1 class="break">Read {LONG_URI} from every</h1>' in detail
    assert f"<code>{LONG_URI}</code>" in detail
    detail = signed_in.get(f"/history/{prompt.id}/").content.decode()
    assert '<h1 class="break">Get prompt mcp__every__review</h1>' in detail and "terse" in detail


@pytest.mark.parametrize(
    "kind,expected",
    [
        ("tool", ["mcp__every__echo"]),
        ("prompt", ["prompt"]),
        ("resource", ["resource"]),
        ("permission_prompt", ["Bash"]),
        ("", ["Bash", "resource", "prompt", "mcp__every__echo"]),
    ],
)
def test_it_filters_history_by_kind(signed_in, every, kind, expected):
    make_prompt_and_resource_calls()
    html = signed_in.get(f"/history/?kind={kind}", headers={"HX-Request": "true"}).content.decode()
    found = []
    for row in re.findall(r'<tr id="call-.*?</tr>', html, re.S):
        if "Get prompt" in row:
            found.append("prompt")
        elif "Read file:" in row:
            found.append("resource")
        else:
            found.append(re.search(r'class="tool-name"[^>]*>([^<]+)</a>', row).group(1))
    assert found == [n.replace("mcp__every__", "") for n in expected]


def test_it_offers_the_kinds_and_ignores_an_unknown_one(signed_in, every):
    make_prompt_and_resource_calls()
    html = signed_in.get("/history/?kind=prompt").content.decode()
    assert '<option value="prompt" selected>Prompt</option>' in html
    for value, label in (
        ("tool", "Tool"),
        ("resource", "Resource"),
        ("permission_prompt", "Permission prompt"),
    ):
        assert f'<option value="{value}">{label}</option>' in html
    everything = signed_in.get("/history/?kind=tool_confirm").content.decode()
    assert everything.count('<tr id="call-') == 4  # a bad filter filters nothing, as for status


def test_it_carries_the_kind_and_a_resource_uri_in_the_call_api(api, every):
    prompt, resource = make_prompt_and_resource_calls()
    tool = ToolCall.objects.get(kind="tool_confirm")
    assert api.get(f"/v1/mcp/calls/{tool.id}").json()["kind"] == "tool"
    body = api.get(f"/v1/mcp/calls/{prompt.id}").json()
    assert body["kind"] == "prompt" and "uri" not in body and body["tool"] == "mcp__every__review"
    body = api.get(f"/v1/mcp/calls/{resource.id}").json()
    assert body["kind"] == "resource" and body["uri"] == LONG_URI
