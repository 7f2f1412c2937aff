"""A held call's trace (SPEC 27) when a person approves it in a real Chromium: the receiver
(`tests.otlp`) gets the `/v1` call's span, the gate's `ask`, the `confirmation` with the
person's name, and the upstream call, in the caller's trace. Its picture (the span tree as
received) goes to artifacts/traces/held-call.svg (not committed; docs/traces-held-call.svg is
one such run). Run on its own: `pytest -m e2e tests/e2e/test_traces_browser.py`."""

import secrets

import pytest
from playwright.sync_api import expect

from tests.e2e.browser import console_with_user, sign_in
from tests.live import ROOT, our_server
from tests.otlp import Receiver, svg

pytestmark = pytest.mark.e2e

USER, PASSWORD = "ada", "e2e-password-46"
PICTURE = ROOT / "artifacts" / "traces" / "held-call.svg"


@pytest.fixture(scope="module")
def otlp():
    with Receiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def console(module_console, otlp):
    c = console_with_user(module_console, {"traced": our_server("traced.py")}, USER, PASSWORD, otlp.env())
    module_console.start(c)
    c.wait_connected("traced")
    return c


def test_it_traces_a_call_a_person_approves_in_the_browser(page, console, otlp, pool):
    page.goto("/login/")
    sign_in(page, USER, PASSWORD)
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    waiting = pool.submit(
        console.http.post,
        "/v1/mcp/call",
        json={"name": "mcp__traced__later", "arguments": {}, "wait": 60},
        headers={"traceparent": f"00-{trace_id}-{span_id}-01"},
    )
    page.goto("/pending/")
    item = page.locator("article.pending", has_text="mcp__traced__later")
    item.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_text("Approved: mcp__traced__later.")).to_be_visible()
    done = waiting.result(60).json()
    assert done["status"] == "done", done
    body = done
    names = {"POST /v1/mcp/call", "gate", "confirmation", "MCP send tools/call later"}
    spans = otlp.trace_of(body["call_id"], names)
    door, confirmation = spans["POST /v1/mcp/call"], spans["confirmation"]
    assert (door.trace_id, door.parent_id) == (trace_id, span_id)
    assert spans["gate"].attributes == {"agenvoy.decision": "ask"}
    assert confirmation.attributes["agenvoy.decided_by"] == USER
    assert confirmation.parent_id == spans["MCP send tools/call later"].parent_id == door.span_id
    assert done["result"] == f"00-{trace_id}-{spans['MCP send tools/call later'].span_id}-01"
    PICTURE.parent.mkdir(parents=True, exist_ok=True)
    PICTURE.write_text(svg(list(spans.values()), "A held call approved in the browser (SPEC 27)"))
