"""SPEC 24.2 across processes: two approvals of one call arriving at the same moment on two
web processes (PostgreSQL, the row locked while its approvals are counted) both count, once
each, and the call then runs."""

import threading

import httpx2
import pytest

from tests.live import wait_until
from tests.scaleout.cluster import all_connected

pytestmark = pytest.mark.scaleout


def test_a_quorum_completed_at_once_on_two_web_processes(cluster):
    wait_until(lambda: all_connected(cluster), 30, 0.2)
    secrets = [
        cluster.manage("create_token", f"pair{i}", "--role", "approver", "--group", "pair").strip()
        for i in (1, 2)
    ]
    agent = cluster.manage("create_token", "pair-agent", "--role", "agent").strip()
    with cluster.api() as admin:
        r = admin.post("/v1/rules", json={"rules": ["ask[pair:2] mcp__s2__echo"]})
        assert r.status_code == 200, r.text
    with httpx2.Client(
        base_url=cluster.webs[0], timeout=60, headers={"Authorization": f"Bearer {agent}"}
    ) as a:
        made = a.post("/v1/mcp/call", json={"name": "mcp__s2__echo", "arguments": {"text": "two"}, "wait": 0})
    assert made.status_code == 202, made.text
    call = made.json()
    path = f"/v1/session/{call['session_id']}/confirm/{call['confirm_id']}"
    start, answers = threading.Barrier(2), [None, None]

    def approve(i: int) -> None:
        headers = {"Authorization": f"Bearer {secrets[i]}"}
        with httpx2.Client(base_url=cluster.webs[i], timeout=60, headers=headers) as c:
            start.wait(10)
            answers[i] = c.post(path, json={"approve": True}).status_code

    threads = [threading.Thread(target=approve, args=(i,), daemon=True) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert answers == [200, 200]
    with cluster.api(1) as admin:

        def ended():
            record = admin.get(f"/v1/mcp/calls/{call['call_id']}").json()
            return record if record["status"] == "done" else None

        record = wait_until(ended, 30, 0.1, what="the call run")
    assert sorted(a["by"] for a in record["approvals"]) == ["token:pair1", "token:pair2"]
    assert record["decided_by"] in ("token:pair1, token:pair2", "token:pair2, token:pair1")
    assert record["result"] == "two"
