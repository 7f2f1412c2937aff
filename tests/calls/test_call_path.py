"""Issue 11 against a real console: the cached token lookup still refuses a revoked token's very
next request, and `kill -9` of `serve` under 32 clients loses no answered call from the history
and leaves none `running` after the restart (the group commit answers only committed calls)."""

import contextlib
import datetime
import signal
import sqlite3
import threading

import httpx2
import pytest

from tests.live import background, db_rows, our_server, signed_in, token_id, wait_until

pytestmark = pytest.mark.live

ECHO = "mcp__echo__echo"
CLIENTS = 32


@pytest.fixture
def c(console):
    c = console({"echo": our_server("echo.py")})
    c.wait_connected("echo")
    return c


def _echo(client: httpx2.Client, text: str) -> httpx2.Response:
    return client.post("/v1/mcp/call", json={"name": ECHO, "arguments": {"text": text}, "mode": "auto"})


def test_it_refuses_a_revoked_tokens_next_request_while_the_cache_is_warm(c):
    with c.client_for("agent", "warm") as warm, c.client_for("agent", "other") as other:
        for i in range(20):  # the token (and the tool) are served from memory now
            assert _echo(warm, f"w{i}").json()["result"] == f"w{i}"
            assert _echo(other, f"o{i}").json()["result"] == f"o{i}"
        # Revoked through the page, in the serving process itself ...
        web = signed_in(c)
        with contextlib.closing(web):
            r = web.post(
                f"/tokens/{token_id(c, 'warm')}/revoke/",
                data={"csrfmiddlewaretoken": web.cookies["csrftoken"]},
                headers={"Referer": c.url + "/tokens/"},
            )
        assert r.status_code == 302, r.text
        r = _echo(warm, "after")
        assert r.status_code == 401 and r.json() == {"error": "authentication required"}
        assert warm.get("/v1/mcp/tools").status_code == 401
        # ... and by another process writing the database directly: the very next request.
        assert _echo(other, "still").json()["result"] == "still"
        db = sqlite3.connect(c.data / "db.sqlite3", timeout=20)
        with db:
            db.execute(
                "update mcpcore_apitoken set revoked_at = ? where name = 'other'",
                (datetime.datetime.now(datetime.UTC).isoformat(),),
            )
        db.close()
        r = _echo(other, "after")
        assert r.status_code == 401 and r.json() == {"error": "authentication required"}
    # Nothing was answered for the refused requests, and the console's own token still works.
    assert not db_rows(c, "select count(*) from mcpcore_toolcall where arguments like '%after%'")[0][0]
    assert c.call(ECHO, {"text": "ok"}, mode="auto").json()["result"] == "ok"


def test_it_keeps_every_answered_call_in_the_history_across_kill_9_under_32_clients(c):
    answered: dict[str, str] = {}  # call id -> the status its client was given
    lock = threading.Lock()
    errors: list[str] = []

    def client(stop: threading.Event, n: int) -> None:
        with httpx2.Client(
            base_url=c.url, timeout=30, headers={"Authorization": f"Bearer {c.token}"}
        ) as http:
            i = 0
            while not stop.is_set():
                i += 1
                # Every fourth call waits for a person: answered at once as pending.
                body = {"name": ECHO, "arguments": {"text": f"{n}-{i}"}, "mode": "auto", "wait": 30}
                if i % 4 == 0:
                    body.update(mode="confirm", wait=0)
                try:
                    r = http.post("/v1/mcp/call", json=body)
                except httpx2.HTTPError:
                    stop.wait(0.1)  # no answer: the console died under this one; no spin
                    continue
                if r.status_code in (200, 202):
                    with lock:
                        answered[r.json()["call_id"]] = r.json()["status"]
                else:
                    errors.append(f"{r.status_code} {r.text[:200]}")

    with background(client, *((n,) for n in range(CLIENTS)), join=60):
        wait_until(lambda: len(answered) >= 300, 60, 0.05, what="300 answered calls under load")
        c.stop(signal.SIGKILL)
        assert c.proc.returncode == -signal.SIGKILL
    assert not errors, errors[:3]
    c.start()
    c.wait_connected("echo", timeout=60)
    # The restarted console has ended whatever was running when it died.
    wait_until(
        lambda: not db_rows(c, "select count(*) from mcpcore_toolcall where status = 'running'")[0][0],
        30,
        what="no call left running",
    )
    stored = dict(db_rows(c, "select id, status from mcpcore_toolcall"))
    stored = {str(k).replace("-", ""): v for k, v in stored.items()}
    missing = [cid for cid in answered if cid.replace("-", "") not in stored]
    assert not missing, f"{len(missing)} answered calls are not in the history: {missing[:3]}"
    for cid, status in answered.items():
        now = stored[cid.replace("-", "")]
        # A call answered as ended keeps that end; one answered pending is still pending.
        assert now == status or (status == "running" and now == "interrupted"), (cid, status, now)
    with httpx2.Client(base_url=c.url, timeout=30, headers={"Authorization": f"Bearer {c.token}"}) as http:
        some = next(cid for cid, s in answered.items() if s == "done")
        assert http.get(f"/v1/mcp/calls/{some}").json()["status"] == "done"
    print(f"\nkill -9 under {CLIENTS} clients: {len(answered)} answered calls, all in the history")
