"""A server's page: its tools, the trust editor, and trying a tool through the gate.

No MCP server runs here: servers come from an mcp.json in a temporary $AGENVOY_HOME, and their
state, tools and calls are database rows written directly."""

import json
import re

import pytest

from mcpcore import calls
from mcpcore.models import Server, Tool, ToolCall
from tests.rows import write_servers
from tests.web.pages import PNG_URL, allow_lines

pytestmark = pytest.mark.django_db


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


def test_it_takes_prompt_and_resource_rules_on_the_rules_page_and_lists_them_on_the_server_page(
    signed_in, every, agenvoy_home
):
    text = (
        "ask prompt:mcp__every__*\n"
        "deny resource:every(uri:file:///etc/*)\n"
        "allow resource:*(uri:https://*)\n"
        "deny resource:other(uri:*)\n"
        "ask mcp__every__echo\n"
    )
    r = signed_in.post("/rules/", {"rules": text})
    assert r.status_code == 302, r.content.decode()
    page = signed_in.get("/rules/").content.decode()
    assert "ask prompt:mcp__every__*" in page and "deny resource:every(uri:file:///etc/*)" in page
    section = re.search(
        r'<section class="card" id="server-rules">.*?</section>',
        signed_in.get("/servers/every/").content.decode(),
        re.S,
    ).group(0)
    listed = re.findall(r'<code class="break">([^<]+)</code>', section)
    assert listed == [
        "ask prompt:mcp__every__*",
        "deny resource:every(uri:file:///etc/*)",
        "allow resource:*(uri:https://*)",
        "ask mcp__every__echo",
    ]
    bad = signed_in.post("/rules/", {"rules": "deny resource:every"})
    assert bad.status_code == 400
    assert "invalid rule on line 1: a resource rule takes exactly one argument, uri" in bad.content.decode()


def test_it_marks_each_tool_with_its_hints_next_to_its_checkbox(signed_in, every):
    # Issue 47: readOnlyHint / destructiveHint were raw JSON in a closed disclosure below the
    # checkboxes; a person trusting a tool sees them beside its checkbox and on its card.
    Tool.objects.filter(tool_name="echo").update(annotations={"readOnlyHint": True})
    Tool.objects.filter(tool_name="add").update(annotations={"destructiveHint": True, "openWorldHint": True})
    html = signed_in.get("/servers/every/").content.decode()
    form = re.search(r'<form id="trust-editor".*?</form>', html, re.S).group(0)
    rows = dict(re.findall(r'<li><label class="check"><input[^>]*>([^<]+)</label>(.*?)</li>', form, re.S))
    assert re.findall(r'class="pill mark[^"]*">([^<]+)<', rows["echo"]) == ["read-only"]
    assert re.findall(r'class="pill mark[^"]*">([^<]+)<', rows["add"]) == ["destructive", "open world"]
    assert "pill mark" not in rows["get-sum"]
    assert "The echo tool." in rows["echo"]  # what it does, beside the box
    card = re.search(
        r'<article class="card tool" id="tool-\d+">\s*<header class="tool-head">\s*<h3 class="break">add</h3>.*?</header>',
        html,
        re.S,
    ).group(0)
    assert re.findall(r'class="pill mark[^"]*">([^<]+)<', card) == ["destructive", "open world"]


def test_it_says_sandbox_on_for_every_stdio_server_under_agenvoy_sandbox_all(
    signed_in, agenvoy_home, settings
):
    write_servers(agenvoy_home, {"plain": {"command": "x"}, "out": {"command": "x", "sandbox": False}})
    assert "Sandbox: off" in signed_in.get("/servers/plain/").content.decode()
    settings.AGENVOY_SANDBOX = "all"
    page = signed_in.get("/servers/plain/").content.decode()
    assert "Sandbox: on" in page and "reads only the system and its own files" in page
    assert "writes only its private /tmp and home; no network" in page
    assert "Sandbox: off" in signed_in.get("/servers/out/").content.decode()
