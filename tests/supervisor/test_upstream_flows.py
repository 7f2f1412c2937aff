"""Several people's authorization-code flows at once (SPEC 16.2, issue 29.3): flows that wait
for their callbacks hold up nothing else. Two started through `POST /v1/mcp/authorize` and
one through a person's `Authorize` on the server page, all at the same moment, each answered
with its authorization URL within 2 s."""

import asyncio
import concurrent.futures
import threading
import time

import pytest

from tests.live import signed_in, wait_until

pytestmark = pytest.mark.live

NAMES = ("one", "two", "three")
BOUND = 2.0  # seconds from the request to the authorization URL, for each flow


def test_it_answers_three_flows_started_at_once_each_within_2s(module_console, lab):
    c = module_console({n: {"url": lab.mcp_url} for n in NAMES}, start=False)
    c.env["AGENVOY_PUBLIC_URL"] = c.url
    module_console.start(c)
    wait_until(
        lambda: all(c.status()[n]["state"] == "needs_authorization" for n in NAMES),
        30,
        0.1,
        what="every server waiting for a person",
    )
    web = signed_in(c)

    def by_api(name: str) -> tuple[str, float, str]:
        started = time.monotonic()
        r = c.post("/v1/mcp/authorize", {"name": name})
        assert r.status_code == 200, r.text
        return name, time.monotonic() - started, r.json()["url"]

    def by_page(name: str) -> tuple[str, float, str]:
        started = time.monotonic()
        r = web.post(
            f"/servers/{name}/authorize/",
            data={"csrfmiddlewaretoken": web.cookies["csrftoken"]},
            headers={"Referer": f"{c.url}/servers/{name}/"},
        )
        assert r.status_code == 302, r.text
        return name, time.monotonic() - started, r.headers["location"]

    try:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            # Two flows waiting for their callbacks first, then all three at once.
            first = [pool.submit(by_api, n) for n in NAMES[:2]]
            for f in first:
                f.result(60)
            again = [
                pool.submit(by_api, NAMES[0]),
                pool.submit(by_api, NAMES[1]),
                pool.submit(by_page, NAMES[2]),
            ]
            answers = [f.result(60) for f in first + again]
    finally:
        web.close()
    for name, took, url in answers:
        assert url.startswith(lab.url + "/authorize?"), (name, url)
        assert took < BOUND, f"{name}: the authorization URL came after {took:.1f}s"


@pytest.mark.asyncio
async def test_a_callback_that_comes_while_the_row_is_read_is_not_lost(monkeypatch):
    """`/oauth/callback` wakes the holder's flow; a wake-up that arrives while the flow reads
    its row must not wait for the next poll (FLOW_POLL seconds): flows ended 2 s apart."""
    from mcpcore.choices import FlowStatus
    from mcpcore.models import Server
    from mcpcore.oauth import upstream as oauth_upstream
    from mcpcore.supervisor import upstream

    loop = asyncio.get_running_loop()
    flow = upstream.Flow(Server(name="srv", config={"url": "http://127.0.0.1:9/mcp"}), "flow-1")
    reads = []

    def flow_code(flow_id: str):
        reads.append(flow_id)
        if len(reads) == 1:  # the code arrives (and its wake-up) while this read runs
            woken = threading.Event()
            loop.call_soon_threadsafe(lambda: (flow.wake(), woken.set()))
            assert woken.wait(10)
            return FlowStatus.WAITING, {}, "", ""
        return FlowStatus.CODE, {"code": "the-code"}, "", "someone"

    monkeypatch.setattr(oauth_upstream, "flow_code", flow_code)
    started = time.monotonic()
    result = await asyncio.wait_for(flow._callback(), 10)
    assert result.code == "the-code" and len(reads) == 2
    assert time.monotonic() - started < upstream.FLOW_POLL / 2
