"""Traces (SPEC 27) as a collector receives them: a live console exporting to a real OTLP/HTTP
receiver of ours (`tests.otlp`), called over `/v1` and MCP in both eras, with the SDK's
`MCPServer` upstream (tests/servers/traced.py) reporting the `_meta.traceparent` it got."""

import os
import secrets

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcpcore.calls import traces
from tests.live import our_server
from tests.mcpclients import mcp_client
from tests.otlp import Receiver

SERVER, CLIENT = 2, 3  # OTLP span kinds
ERROR = 2  # OTLP status code
DOOR_ATTRIBUTES = {
    "mcp.method.name",
    "gen_ai.tool.name",
    "agenvoy.server",
    "agenvoy.call_id",
    "agenvoy.token",
}
SECRET = "upstream-secret-" + secrets.token_hex(8)


@pytest.fixture(scope="module")
def traced(module_console):
    """A console exporting its traces to a receiver of ours; its tools allowed but `later`,
    and a `deny` rule for the echo tool's `text:forbidden*`."""
    with Receiver() as otlp:
        c = module_console(
            {"traced": our_server("traced.py", env={"TRACED_API_KEY": SECRET})},
            **otlp.env(),
            start=False,
            allow=["mcp__traced__traceparent", "mcp__traced__echo", "mcp__traced__fail"],
        )
        (c.home / "rules").write_text("deny mcp__traced__echo(text:forbidden*)\n")
        module_console.start(c)
        c.wait_connected("traced")
        yield c, otlp


def caller() -> tuple[str, str, str]:
    """A caller's own trace: (trace id, span id, its `traceparent`)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def post_call(c, body: dict, traceparent: str):
    return c.http.post("/v1/mcp/call", json=body, headers={"traceparent": traceparent})


def test_it_continues_the_callers_trace_through_the_gate_to_the_server_on_an_auto_call(traced):
    c, otlp = traced
    trace_id, span_id, traceparent = caller()
    r = post_call(c, {"name": "mcp__traced__traceparent", "arguments": {}, "mode": "auto"}, traceparent)
    body = r.json()
    assert (r.status_code, body["status"]) == (200, "done"), body
    spans = otlp.trace_of(body["call_id"], {"POST /v1/mcp/call", "gate", "MCP send tools/call traceparent"})
    door, gate, upstream = spans["POST /v1/mcp/call"], spans["gate"], spans["MCP send tools/call traceparent"]
    assert (door.trace_id, door.parent_id, door.kind) == (trace_id, span_id, SERVER)
    assert door.attributes == {
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "mcp__traced__traceparent",
        "agenvoy.server": "traced",
        "agenvoy.call_id": body["call_id"],
        "agenvoy.token": "tests",
    }
    assert door.status != ERROR
    assert (gate.parent_id, gate.attributes) == (door.span_id, {"agenvoy.decision": "auto"})
    assert (upstream.parent_id, upstream.kind) == (door.span_id, CLIENT)
    assert "confirmation" not in spans
    # The server got the client span's context in `_meta.traceparent`: the same trace.
    assert body["result"] == f"00-{trace_id}-{upstream.span_id}-01"
    assert door.resource["service.name"] == "agenvoy-console"


def test_it_puts_the_time_a_person_took_in_a_confirmation_span_of_a_held_call(traced):
    c, otlp = traced
    trace_id, _span_id, traceparent = caller()
    r = post_call(c, {"name": "mcp__traced__later", "arguments": {}, "wait": 0}, traceparent)
    body = r.json()
    assert (r.status_code, body["status"]) == (202, "pending"), body
    assert c.reply(body["session_id"], body["confirm_id"], {"approve": True}).status_code == 200
    done = c.get(f"/v1/mcp/calls/{body['call_id']}", wait=15).json()
    assert done["status"] == "done", done
    names = {"POST /v1/mcp/call", "gate", "confirmation", "MCP send tools/call later"}
    spans = otlp.trace_of(body["call_id"], names)
    door, confirmation = spans["POST /v1/mcp/call"], spans["confirmation"]
    assert door.trace_id == trace_id
    assert spans["gate"].attributes == {"agenvoy.decision": "ask"}
    assert spans["POST /v1/mcp/call"].attributes["gen_ai.tool.name"] == "mcp__traced__later"
    assert confirmation.parent_id == door.span_id
    assert confirmation.attributes == {
        "agenvoy.decided_by": "token:tests-approver",
        "agenvoy.call_id": body["call_id"],
    }
    assert spans["MCP send tools/call later"].start >= confirmation.end > confirmation.start
    assert spans["MCP send tools/call later"].parent_id == door.span_id
    assert done["result"] == f"00-{trace_id}-{spans['MCP send tools/call later'].span_id}-01"


def test_it_marks_a_rules_deny_with_the_rule_and_an_error_and_sends_nothing_upstream(traced):
    c, otlp = traced
    _trace_id, _span_id, traceparent = caller()
    r = post_call(c, {"name": "mcp__traced__echo", "arguments": {"text": "forbidden!"}}, traceparent)
    body = r.json()
    assert body["status"] == "skipped", body
    spans = otlp.trace_of(body["call_id"], {"POST /v1/mcp/call", "gate"})
    assert spans["gate"].attributes == {
        "agenvoy.decision": "deny",
        "agenvoy.rule": "deny mcp__traced__echo(text:forbidden*)",
    }
    assert spans["POST /v1/mcp/call"].status == ERROR
    assert not [
        s for s in otlp.spans if s.name.startswith("MCP send") and s.parent_id == spans["gate"].parent_id
    ]


def test_it_marks_a_call_that_ends_in_error(traced):
    c, otlp = traced
    r = c.call("mcp__traced__fail", {}, mode="auto")
    body = r.json()
    assert (body["status"], body["is_error"]) == ("error", True), body
    spans = otlp.trace_of(body["call_id"], {"POST /v1/mcp/call", "gate", "MCP send tools/call fail"})
    assert spans["POST /v1/mcp/call"].status == ERROR
    assert spans["POST /v1/mcp/call"].parent_id == ""  # no caller's trace: a new one


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_it_continues_an_mcp_clients_trace_from_meta_in_both_eras(traced, mode):
    c, otlp = traced
    trace_id, span_id, traceparent = caller()

    async def go():
        async with mcp_client(c, mode=mode) as client:
            return await client.call_tool("traced__traceparent", {}, meta={"traceparent": traceparent})

    result = anyio.run(go)
    spans = otlp.wait_for(
        lambda got: (
            [s for s in got if s.trace_id == trace_id and s.name == "MCP send tools/call traceparent"]
            and [s for s in got if s.trace_id == trace_id and s.name == "tools/call"]
            and [s for s in got if s.trace_id == trace_id and s.name == "gate"]
        )
    )
    door = next(s for s in otlp.spans if s.trace_id == trace_id and s.name == "tools/call")
    upstream = next(s for s in otlp.spans if s.trace_id == trace_id and s.name.startswith("MCP send"))
    assert spans
    assert (door.parent_id, door.kind) == (span_id, SERVER)
    assert set(door.attributes) == DOOR_ATTRIBUTES
    assert door.attributes["gen_ai.tool.name"] == "mcp__traced__traceparent"
    assert upstream.parent_id == door.span_id
    assert result.content[0].text == f"00-{trace_id}-{upstream.span_id}-01"


def test_it_continues_a_trace_from_the_http_header_of_an_mcp_request(traced):
    c, otlp = traced
    trace_id, span_id, traceparent = caller()

    async def go():
        headers = {"Authorization": f"Bearer {c.token}", "traceparent": traceparent}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            async with Client(streamable_http_client(c.url + "/mcp", http_client=http)) as client:
                return await client.call_tool("traced__traceparent", {})

    result = anyio.run(go)
    otlp.wait_for(lambda got: any(s.trace_id == trace_id and s.name.startswith("MCP send") for s in got))
    door = next(s for s in otlp.spans if s.trace_id == trace_id and s.name == "tools/call")
    assert door.parent_id == span_id
    assert result.content[0].text.startswith(f"00-{trace_id}-")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_it_traces_a_prompt_get_and_a_resource_read(traced, mode):
    c, otlp = traced
    get_trace, _s, get_parent = caller()
    read_trace, _s, read_parent = caller()

    async def go():
        async with mcp_client(c, mode=mode) as client:
            prompt = await client.get_prompt(
                "traced__greet", {"name": "Ada"}, meta={"traceparent": get_parent}
            )
            read = await client.read_resource("note://traced/readme", meta={"traceparent": read_parent})
            return prompt, read

    prompt, read = anyio.run(go)
    assert prompt.messages and read.contents

    def of(trace_id, names):
        def complete(got):
            mine = {s.name: s for s in got if s.trace_id == trace_id}
            return mine if names <= set(mine) else None

        return otlp.wait_for(complete, what=f"{names}")

    got = of(get_trace, {"prompts/get", "gate", "MCP send prompts/get greet"})
    door = got["prompts/get"]
    assert door.attributes["mcp.method.name"] == "prompts/get"
    assert door.attributes["gen_ai.tool.name"] == "mcp__traced__greet"
    assert got["gate"].attributes == {"agenvoy.decision": "default"}
    assert got["MCP send prompts/get greet"].parent_id == door.span_id
    got = of(read_trace, {"resources/read", "gate", "MCP send resources/read"})
    door = got["resources/read"]
    # The URI is the read's argument: never an attribute.
    assert set(door.attributes) == DOOR_ATTRIBUTES - {"gen_ai.tool.name"}
    assert door.attributes["agenvoy.server"] == "traced"
    assert got["MCP send resources/read"].parent_id == door.span_id


def test_it_exports_no_argument_result_or_secret(traced):
    c, otlp = traced
    argument = "needle-" + secrets.token_hex(8)
    r = c.call("mcp__traced__echo", {"text": argument}, mode="auto")
    body = r.json()
    assert body["result"] == argument, body

    async def go():
        async with mcp_client(c, mode="auto") as client:
            await client.call_tool("traced__echo", {"text": argument + "-mcp"})
            await client.get_prompt("traced__greet", {"name": argument + "-prompt"})
            await client.read_resource("note://traced/readme")

    anyio.run(go)
    otlp.trace_of(body["call_id"], {"POST /v1/mcp/call", "gate", "MCP send tools/call echo"})
    otlp.wait_for(lambda got: any(s.name == "MCP send resources/read" for s in got))
    exported = otlp.everything()
    for needle in (argument, "Hello", "the traced server's note", SECRET, c.token, c.approver_token):
        assert needle.encode() not in exported, needle
    assert "readme" not in exported.decode("latin-1")
    assert b"note://" not in exported


def test_it_sets_nothing_up_without_an_endpoint():
    saved = {k: os.environ.pop(k) for k in traces.ENDPOINT_VARIABLES if k in os.environ}
    try:
        assert traces.setup() is False
        assert traces.current() == ""
        assert traces.server_span("x", "tools/call", {"traceparent": caller()[2]}).__enter__() is None
    finally:
        os.environ.update(saved)


def test_it_sends_what_is_batched_when_the_console_stops(console):
    with Receiver() as otlp:
        # A batch delay of ten minutes: nothing leaves before the console stops.
        c = console(
            {"traced": our_server("traced.py")},
            otlp.env(OTEL_BSP_SCHEDULE_DELAY="600000"),
            allow=["mcp__traced__echo"],
        )
        c.wait_connected("traced")
        body = c.call("mcp__traced__echo", {"text": "last"}, mode="auto").json()
        assert body["status"] == "done", body
        assert not [s for s in otlp.spans if s.attributes.get("agenvoy.call_id") == body["call_id"]]
        c.stop()
        otlp.trace_of(body["call_id"], {"POST /v1/mcp/call", "gate", "MCP send tools/call echo"}, timeout=5)
