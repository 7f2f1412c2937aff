"""Views (SPEC 19) across processes: a client of `/mcp/v/<view>` on one web process is told
within 2 s when the view is edited through the other (the `status.changed` message on the
Redis channel layer), and a token limited to a view removed through one web process sees
nothing on the other at once (PostgreSQL triggers raise the cache generation)."""

import anyio
import httpx2
import pytest

from tests.live import wait_until
from tests.mcpclients import until_told
from tests.scaleout.cluster import all_connected

pytestmark = pytest.mark.scaleout


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_it_tells_a_view_client_on_one_web_process_of_an_edit_made_on_the_other(cluster, mode):
    wait_until(lambda: all_connected(cluster), 30, 0.2)
    name = f"pair-{mode}"
    with cluster.api(1) as api:
        assert api.post("/v1/views", json={"name": name, "include": ["mcp__s1__echo"]}).status_code == 200

    def edit():
        with cluster.api(1) as api:
            body = {"name": name, "include": ["mcp__s1__echo", "mcp__s2__echo"]}
            assert api.post("/v1/views", json=body).status_code == 200

    url = f"{cluster.webs[0]}/mcp/v/{name}"
    before, took, after = anyio.run(until_told, url, cluster.token, mode, edit)
    assert before == {"s1__echo"}
    assert took < 2, took
    assert after == {"s1__echo", "s2__echo"}


def test_it_takes_a_view_removed_on_one_web_process_from_a_token_at_once_on_the_other(cluster):
    wait_until(lambda: all_connected(cluster), 30, 0.2)
    with cluster.api(0) as api:
        assert api.post("/v1/views", json={"name": "going", "include": ["mcp__s3__echo"]}).status_code == 200
    token = cluster.manage("create_token", "viewer", "--view", "going").strip()
    headers = {"Authorization": f"Bearer {token}"}
    clients = [httpx2.Client(base_url=url, timeout=60, headers=headers) for url in cluster.webs]
    try:
        for client in clients:  # warm: both processes keep the token's views in memory
            for _ in range(3):
                assert [t["name"] for t in client.get("/v1/mcp/tools").json()["tools"]] == ["mcp__s3__echo"]
        with cluster.api(1) as api:
            assert api.post("/v1/views/remove", json={"name": "going"}).json() == {"ok": True}
        for client in clients:
            assert client.get("/v1/mcp/tools").json() == {"tools": []}
            r = client.post("/v1/mcp/call", json={"name": "mcp__s3__echo", "arguments": {"text": "x"}})
            assert (r.status_code, r.json()) == (404, {"error": "unknown tool: mcp__s3__echo"})
    finally:
        for client in clients:
            client.close()
