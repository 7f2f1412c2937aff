"""SPEC 18.4 (issue 22): the History page's tool filter reads one index range per matching
tool name and merges them, so a filter is as cheap at a million calls as at ten; its pages
are the same as those of a plain scan."""

import datetime
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mcpcore.models import ToolCall
from mcpcore.web import display


@pytest.fixture
def signed_in(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("op", password="pw-123456789"))
    return client


@pytest.fixture
def calls(db):
    """90 calls, newest first t0..t89, over three tools taking turns."""
    base = timezone.now()
    names = ["mcp__a__get-sum", "mcp__b__get-sum", "mcp__a__echo"]
    ToolCall.objects.bulk_create(
        ToolCall(
            session_id="s",
            tool_name=names[i % 3],
            server_name=names[i % 3].split("__")[1],
            tool=f"t{i}",
            status="done",
            created_at=base - datetime.timedelta(seconds=i),
        )
        for i in range(90)
    )


def page(client, url: str):
    with CaptureQueriesContext(connection) as queries:
        html = client.get(url, headers={"HX-Request": "true"}).content.decode()
    sql = [q["sql"].upper() for q in queries.captured_queries]
    tools = re.findall(r'class="tool-name"[^>]*>([^<]+)</a>', html)
    older = re.search(r'href="(/history/\?[^"]*before=[^"]+)"', html)
    newer = re.search(r'href="(/history/\?[^"]*after=[^"]+)"', html)
    link = lambda m: m and m.group(1).replace("&amp;", "&")  # noqa: E731
    return tools, link(older), link(newer), sql


def test_it_pages_a_tool_filter_over_several_names_newest_first(signed_in, calls):
    wanted = [f"t{i}" for i in range(90) if i % 3 != 2]  # both get-sum tools: 60 calls
    first, older, newer, sql = page(signed_in, "/history/?tool=SUM")  # any case, as before
    assert first == wanted[:50] and older and not newer
    assert not any("LIKE" in q for q in sql)  # no scan of the calls with the filter
    second, older2, newer2, _ = page(signed_in, older)
    assert second == wanted[50:] and not older2 and newer2
    back, _, _, _ = page(signed_in, newer2)
    assert back == first


def test_it_answers_a_tool_filter_matching_nothing_without_reading_calls(signed_in, calls):
    tools, older, newer, sql = page(signed_in, "/history/?tool=no_such_tool")
    assert tools == [] and older is None and newer is None
    assert not any("LIKE" in q for q in sql)


def test_it_falls_back_to_a_filtered_scan_when_very_many_names_match(signed_in, calls, monkeypatch):
    monkeypatch.setattr(display, "TOOL_PARTS", 1)
    tools, _, _, sql = page(signed_in, "/history/?tool=sum")
    assert tools == [f"t{i}" for i in range(90) if i % 3 != 2][:50]
    assert any("LIKE" in q for q in sql)
