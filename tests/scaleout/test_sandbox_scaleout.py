"""Servers in a sandbox (SPEC 26) across processes: a worker runs its servers sandboxed as a
single process does, with `AGENVOY_SANDBOX=all` set on every process of the cluster."""

import pytest

from tests.live import our_server, wait_until
from tests.scaleout.cluster import Cluster, all_connected

pytestmark = pytest.mark.scaleout


@pytest.fixture(scope="module")
def cluster():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENVOY_SANDBOX", "all")
        c = Cluster(
            servers={"jailed": our_server("probe.py"), "free": {**our_server("probe.py"), "sandbox": False}}
        )
    yield c
    c.close()


def _call(cluster, server: str, tool: str, arguments: dict) -> dict:
    with cluster.api(1) as api:
        r = api.post(
            "/v1/mcp/call", json={"name": f"mcp__{server}__{tool}", "arguments": arguments, "mode": "auto"}
        )
    assert r.status_code == 200, r.text
    return r.json()


def test_it_runs_a_workers_servers_in_their_sandbox(cluster):
    status = wait_until(lambda: all_connected(cluster, ["jailed", "free"]), 60, 0.2, what="both connected")
    assert (status["jailed"]["sandbox"], status["free"]["sandbox"]) == (True, False)
    assert status["jailed"]["worker"] in ("w1", "w2")
    secrets = str(cluster.base / "home" / "mcp.json")
    assert _call(cluster, "free", "read_file", {"path": secrets})["status"] == "done"
    assert _call(cluster, "jailed", "read_file", {"path": secrets})["status"] == "error"
    seen = _call(cluster, "jailed", "processes", {})["result"].splitlines()
    assert not any("mcpworker" in line or "daphne" in line for line in seen), seen
    free = _call(cluster, "free", "processes", {})["result"]
    assert "mcpworker" in free
