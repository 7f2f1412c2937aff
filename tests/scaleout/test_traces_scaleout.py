"""Traces across processes (SPEC 27): a call taken by a web process and run by a worker is one
trace, and a person's decision on the other web process joins it; spans received by a real
OTLP/HTTP receiver (`tests.otlp`), each process naming itself (`service.instance.id`)."""

import secrets

import pytest

from tests.live import our_server, wait_until
from tests.otlp import Receiver
from tests.scaleout.cluster import Cluster, all_connected

pytestmark = pytest.mark.scaleout


@pytest.fixture(scope="module")
def traced():
    with Receiver() as otlp:
        cluster = Cluster({"traced": our_server("traced.py")}, ["mcp__traced__traceparent"], otlp.env())
        try:
            wait_until(lambda: all_connected(cluster, ["traced"]), 60, 0.2)
            yield cluster, otlp
        finally:
            cluster.close()


def instance(span) -> str:
    return span.resource["service.instance.id"]


def test_it_makes_one_trace_of_a_call_taken_by_a_web_process_and_run_by_a_worker(traced):
    cluster, otlp = traced
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    with cluster.api(0) as api:
        r = api.post(
            "/v1/mcp/call",
            json={"name": "mcp__traced__traceparent", "arguments": {}},
            headers={"traceparent": f"00-{trace_id}-{span_id}-01"},
        )
    body = r.json()
    assert body["status"] == "done", body
    spans = otlp.trace_of(body["call_id"], {"POST /v1/mcp/call", "gate", "MCP send tools/call traceparent"})
    door, upstream = spans["POST /v1/mcp/call"], spans["MCP send tools/call traceparent"]
    assert (door.trace_id, door.parent_id) == (trace_id, span_id)
    assert instance(door) == instance(spans["gate"]) == "web1"
    assert instance(upstream) in ("w1", "w2")
    assert upstream.parent_id == door.span_id
    assert body["result"] == f"00-{trace_id}-{upstream.span_id}-01"


def test_it_joins_a_decision_made_on_the_other_web_process_to_the_calls_trace(traced):
    cluster, otlp = traced
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    with cluster.api(0) as api:
        r = api.post(
            "/v1/mcp/call",
            json={"name": "mcp__traced__later", "arguments": {}, "wait": 0},
            headers={"traceparent": f"00-{trace_id}-{span_id}-01"},
        )
    body = r.json()
    assert body["status"] == "pending", body
    approver = cluster.manage("create_token", "approver", "--role", "approver").strip()
    with cluster.api(1) as other:
        other.headers["Authorization"] = f"Bearer {approver}"
        reply = other.post(
            f"/v1/session/{body['session_id']}/confirm/{body['confirm_id']}", json={"approve": True}
        )
        assert reply.status_code == 200, reply.text
    names = {"POST /v1/mcp/call", "gate", "confirmation", "MCP send tools/call later"}
    spans = otlp.trace_of(body["call_id"], names, timeout=30)
    door = spans["POST /v1/mcp/call"]
    assert door.trace_id == trace_id and instance(door) == "web1"
    assert instance(spans["confirmation"]) == "web2"
    assert spans["confirmation"].parent_id == spans["MCP send tools/call later"].parent_id == door.span_id
    assert instance(spans["MCP send tools/call later"]) in ("w1", "w2")
