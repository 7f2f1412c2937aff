"""SPEC 15 / issue 14 against a real `manage.py serve`: a webhook receiver that hangs delays no
call, and a delivery due when serve stops is sent once serve runs again."""

import json
import sqlite3
import time

import pytest

from tests.live import Console, our_server, wait_until
from tests.webhooks import Receiver, verify

pytestmark = pytest.mark.live


def add_webhook(c: Console, url: str) -> str:
    """A webhook target made the way the Notifications page makes one; returns its secret."""
    out = c.manage(
        "shell",
        "-c",
        f"from mcpcore.calls import notify; print('SECRET=' + notify.add_target('webhook', {url!r})[1])",
    )
    return next(line for line in out.splitlines() if line.startswith("SECRET="))[len("SECRET=") :]


def deliveries(c: Console) -> list[dict]:
    conn = sqlite3.connect(c.data / "db.sqlite3", timeout=20)
    conn.row_factory = sqlite3.Row
    try:
        rows = conn.execute("select * from mcpcore_delivery order by id").fetchall()
        return [dict(r) for r in rows]
    finally:
        conn.close()


def timed(fn):
    started = time.monotonic()
    answer = fn()
    return answer, time.monotonic() - started


def test_it_delays_no_call_while_a_webhook_receiver_hangs(console):
    receiver = Receiver(hang=True)
    c = console({"echo": our_server("echo.py")}, start=False)
    try:
        add_webhook(c, receiver.url)
        console.start(c)
        c.wait_connected("echo")
        first, took = timed(lambda: c.call("mcp__echo__echo", {"text": "one"}, wait=0))
        assert first.status_code == 202 and took < 2, took
        wait_until(lambda: receiver.requests, 10, what="the receiver holding the first delivery")
        # The receiver now holds the notifier's request for up to 10 s: calls go on as ever.
        for n in range(3):
            r, took = timed(lambda n=n: c.call("mcp__echo__echo", {"text": f"auto {n}"}, mode="auto"))
            assert r.json()["status"] == "done" and took < 2, (r.text, took)
        second, took = timed(lambda: c.call("mcp__echo__echo", {"text": "two"}, wait=0))
        assert second.status_code == 202 and took < 2, took
        body = first.json()
        r, took = timed(lambda: c.reply(body["session_id"], body["confirm_id"], {"approve": True}))
        assert r.status_code == 200 and took < 2, took
        r = c.get(f"/v1/mcp/calls/{body['call_id']}", wait=10)
        assert r.json()["status"] == "done"
        assert len(receiver.requests) >= 1 and not receiver.release.is_set()
    finally:
        receiver.close()


def test_it_sends_a_delivery_that_was_due_when_serve_stopped(console):
    receiver = Receiver(answers=[500])
    c = console({"echo": our_server("echo.py")}, start=False)
    try:
        secret = add_webhook(c, receiver.url)
        console.start(c)
        c.wait_connected("echo")
        assert c.call("mcp__echo__echo", {"text": "later"}, wait=0).status_code == 202
        failed = wait_until(
            lambda: [d for d in deliveries(c) if d["attempts"] == 1 and d["last_status_code"] == 500],
            15,
            what="the first attempt failing",
        )[0]
        assert failed["status"] == "pending"
        c.stop()
        assert deliveries(c)[0]["status"] == "pending"  # still owed when serve is gone
        c.start()
        sent = wait_until(
            lambda: [d for d in deliveries(c) if d["status"] == "sent"],
            30,
            what="the delivery sent after restart",
        )[0]
        assert (sent["id"], sent["attempts"], sent["last_status_code"]) == (failed["id"], 2, 200)
        first, again = receiver.requests[:2]
        assert first["headers"]["webhook-id"] == again["headers"]["webhook-id"] == sent["message_id"]
        assert verify(secret, again["headers"], again["body"])
        assert json.loads(again["body"])["type"] == "confirmation.pending"
    finally:
        receiver.close()
