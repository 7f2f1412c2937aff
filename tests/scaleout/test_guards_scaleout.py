"""SPEC 25 across processes: with REDIS_URL set, a limit line's count (25.1) and a repeated
call's count (25.2) live in Redis, so two web processes taking one token's calls in turn count
them together."""

import httpx2
import pytest

from tests.live import wait_until
from tests.scaleout.cluster import all_connected

pytestmark = pytest.mark.scaleout

LINE = "limit 4/m mcp__s1__echo"


@pytest.fixture(scope="module")
def webs(cluster):
    wait_until(lambda: all_connected(cluster), 30, 0.2)
    urls = [cluster.start_web(f"guarded{i}", AGENVOY_REPEAT_LIMIT="3/5m") for i in (1, 2)]
    with cluster.api() as admin:
        assert admin.post("/v1/rules", json={"rules": [LINE]}).status_code == 200
    yield urls
    for name in ("guarded1", "guarded2"):
        cluster.procs.pop(name).terminate()


@pytest.fixture
def agents(cluster, webs):
    """One new agent token, as a client of each web process."""
    token = cluster.manage("create_token", "guarded", "--role", "agent").strip()
    headers = {"Authorization": f"Bearer {token}"}
    clients = [httpx2.Client(base_url=url, timeout=60, headers=headers) for url in webs]
    yield clients
    for c in clients:
        c.close()


def call(client, name: str, arguments: dict, **extra):
    return client.post("/v1/mcp/call", json={"name": name, "arguments": arguments, "mode": "auto", **extra})


def test_one_limit_is_counted_across_two_web_processes(agents):
    for i in range(4):  # in turn: two on each process
        r = call(agents[i % 2], "mcp__s1__echo", {"text": f"n{i}"})
        assert r.status_code == 200 and r.json()["result"] == f"n{i}", r.text
    for client in agents:
        r = client.post("/v1/mcp/call", json={"name": "mcp__s1__echo", "arguments": {"text": "over"}})
        assert r.status_code == 429, r.text
        assert r.json()["error"] == f"rate limited by rule: {LINE}" and int(r.headers["Retry-After"]) >= 1


def test_a_repeat_is_seen_across_two_web_processes(agents):
    for i in range(3):
        r = call(agents[i % 2], "mcp__s3__echo", {"text": "again"})
        assert r.status_code == 200 and r.json()["status"] == "done", r.text
    r = call(agents[1], "mcp__s3__echo", {"text": "again"}, wait=0)
    assert r.status_code == 202 and r.json()["status"] == "pending", r.text
    held = [p for p in agents[0].get("/v1/pending").json()["pending"] if p["call_id"] == r.json()["call_id"]]
    assert held and held[0]["repeated"] == 3
