"""SPEC 24.2 and 24.3 across processes: two approvals of one call arriving at the same moment on
two web processes (PostgreSQL, the row locked while its approvals are counted) both count, once
each, and the call then runs; an escalation is told once, whichever worker sees it, also after
a worker is killed."""

import json
import signal
import threading

import httpx2
import pytest

from tests.live import wait_until
from tests.scaleout.cluster import all_connected
from tests.webhooks import Receiver

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


def test_an_escalation_is_told_once_across_workers_and_after_one_is_killed(cluster):
    """SPEC 24.3: every worker's tick looks; the row's claim makes each escalation happen (and
    be told to the second group's webhook) once, also after a worker is killed mid-wait."""
    wait_until(lambda: all_connected(cluster), 30, 0.2)
    cluster.manage("create_token", "esc-lead", "--role", "approver", "--group", "leads")
    agent = cluster.manage("create_token", "esc-agent", "--role", "agent").strip()
    with Receiver() as hook:
        with cluster.api() as admin:
            group = {"name": "esc", "people": [], "escalate_to": "leads", "escalate_after_minutes": 1}
            assert admin.post("/v1/groups", json=group).status_code == 200
            assert admin.post("/v1/rules", json={"rules": ["ask[esc] mcp__s4__echo"]}).status_code == 200
        cluster.manage(
            "shell",
            "-c",
            "from mcpcore.calls import notify; from mcpcore.models import Group; "
            f"notify.add_target('webhook', {hook.url + '/leads'!r}, groups=[Group.objects.get(name='leads')])",
        )
        headers = {"Authorization": f"Bearer {agent}"}
        with httpx2.Client(base_url=cluster.webs[1], timeout=60, headers=headers) as a:
            held = [
                a.post(
                    "/v1/mcp/call", json={"name": "mcp__s4__echo", "arguments": {"text": t}, "wait": 0}
                ).json()
                for t in ("first", "second")
            ]
        assert all(h["status"] == "pending" for h in held), held

        def escalated(call_id: str) -> list:
            bodies = [json.loads(r["body"]) for r in hook.requests]
            return [
                b for b in bodies if b["type"] == "confirmation.escalated" and b["data"]["call_id"] == call_id
            ]

        def older(call_id: str) -> None:
            cluster.manage(
                "shell",
                "-c",
                "import datetime; from mcpcore.models import ToolCall; "
                f"c = ToolCall.objects.get(id={call_id!r}); "
                "ToolCall.objects.filter(id=c.id).update(created_at=c.created_at - datetime.timedelta(minutes=2))",
            )

        cluster.procs["w1"].send_signal(signal.SIGKILL)
        cluster.procs["w1"].wait(10)
        older(held[0]["call_id"])
        wait_until(lambda: escalated(held[0]["call_id"]), 40, 0.1, what="the first escalation")
        cluster.start_worker("w1")  # two workers look again
        older(held[1]["call_id"])
        wait_until(lambda: escalated(held[1]["call_id"]), 40, 0.1, what="the second escalation")
        assert len(escalated(held[0]["call_id"])) == 1 and len(escalated(held[1]["call_id"])) == 1
