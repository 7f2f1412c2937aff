"""SPEC 12.2 across processes: two web processes taking a token's confirmations at the same
moment never hold more of them than AGENVOY_MAX_PENDING."""

from collections import Counter

import httpx2
import pytest

from tests.live import at_once, wait_until
from tests.scaleout.cluster import all_connected

pytestmark = pytest.mark.scaleout

CAP = 4
REQUESTS = 24  # per round, split over the two web processes, sent at once
ROUNDS = 3


def test_two_web_processes_never_hold_more_pending_calls_for_a_token_than_allowed(cluster):
    wait_until(lambda: all_connected(cluster), 30, 0.2)
    webs = [cluster.start_web(f"capped{i}", AGENVOY_MAX_PENDING=str(CAP)) for i in (1, 2)]
    token = cluster.manage("create_token", "capped", "--role", "agent").strip()
    headers = {"Authorization": f"Bearer {token}"}
    clients = [httpx2.Client(base_url=webs[i % 2], timeout=60, headers=headers) for i in range(REQUESTS)]
    body = {"name": "mcp__s2__echo", "arguments": {"text": "held"}, "mode": "confirm", "wait": 0}
    try:
        for c in clients:  # warm: each connection open and the token known to both processes
            assert c.get("/v1/pending").status_code == 200
        for _ in range(ROUNDS):
            answers = at_once(clients, body)
            codes = Counter(r.status_code for r in answers)
            held = clients[0].get("/v1/pending").json()["pending"]
            assert codes == {202: CAP, 429: REQUESTS - CAP} and len(held) == CAP, (codes, len(held))
            refused = [r.json() for r in answers if r.status_code == 429]
            assert all(r == {"error": "too many pending confirmations for this token"} for r in refused)
            for p in held:  # the next round starts from none
                r = clients[0].post(f"/v1/mcp/calls/{p['call_id']}/cancel")
                assert r.status_code == 200, r.text
    finally:
        for c in clients:
            c.close()
        for name in ("capped1", "capped2"):
            cluster.procs.pop(name).terminate()
