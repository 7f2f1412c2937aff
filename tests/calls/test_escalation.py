"""SPEC 24.3: a confirmation for a group still pending after the group's
`escalate_after_minutes` is also for its `escalate_to`: that group's members decide it, its
notification targets get `confirmation.escalated` (a real HTTP receiver, the notifier loop
running), the pages say `For <group>, escalated to <other>`; once only, however many ticks or
processes look; the expiry stays. The tick's own step (`calls.escalate_due`) is driven here."""

import asyncio
import datetime
import json

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from mcpcore import calls, gate
from mcpcore.calls import notify
from mcpcore.choices import PersonRole
from mcpcore.models import ApiToken, Delivery, Group, Person, ToolCall
from tests.api.test_roles import request
from tests.live import await_until
from tests.webhooks import Receiver


@pytest_asyncio.fixture
async def notifier():
    task = asyncio.ensure_future(notify.run())
    yield task
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def world(home, ops_url: str, leads_url: str) -> dict:
    """`ops` escalates to `leads` after 2 minutes; a token in each; a webhook target of each;
    a call held for ops, asked 3 minutes ago."""
    from tests.rows import add_tools, write_servers

    write_servers(home, {"every": {"command": "node", "args": ["index.js"]}})
    add_tools("every", ["echo"])
    leads = Group.objects.create(name="leads")
    ops = Group.objects.create(name="ops", escalate_to=leads, escalate_after_minutes=2)
    made = {
        n: ApiToken.issue(n, role=r)
        for n, r in (("agent", "agent"), ("op1", "approver"), ("lead1", "approver"))
    }
    ops.tokens.add(made["op1"][0])
    leads.tokens.add(made["lead1"][0])
    (home / "rules").write_text("ask[ops] mcp__every__echo\n")
    targets = {
        "ops": notify.add_target("webhook", ops_url, groups=[ops]),
        "leads": notify.add_target("webhook", leads_url, groups=[leads]),
    }
    call = calls.create(made["agent"][0], "", "mcp__every__echo", {"message": "hi"}, "s-1", "confirm")
    asked = timezone.now() - datetime.timedelta(minutes=3)
    ToolCall.objects.filter(id=call.id).update(created_at=asked)
    call.refresh_from_db()
    return {"call": call, "secrets": {n: s for n, (_, s) in made.items()}, "targets": targets}


def reply(secret: str, c: ToolCall):
    r = request(secret, "POST", f"/v1/session/{c.session_id}/confirm/{c.confirm_id}", {"approve": True})
    return r.status_code, r.json()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_escalates_once_to_the_second_group_and_its_webhook(agenvoy_home, notifier):
    with Receiver() as ops_hook, Receiver() as leads_hook:
        w = await sync_to_async(world)(agenvoy_home, ops_hook.url + "/ops", leads_hook.url + "/leads")
        c, secrets = w["call"], w["secrets"]
        await await_until(lambda: ops_hook.requests, 15, what="the pending event of ops' target")
        assert leads_hook.requests == []
        assert await sync_to_async(reply)(secrets["lead1"], c) == (
            403,
            {"error": "this confirmation is for ops"},
        )

        escalated = await sync_to_async(calls.escalate_due)()
        assert escalated == [str(c.id)]
        assert await sync_to_async(calls.escalate_due)() == []  # once, whoever looks again
        got = await await_until(lambda: leads_hook.requests, 15, what="the escalation at leads' target")
        body = json.loads(got[0]["body"])
        assert body["type"] == "confirmation.escalated" and got[0]["path"].endswith("/leads")
        assert (body["data"]["for"], body["data"]["escalated_to"]) == ("ops", "leads")
        assert body["data"]["approve_url"].startswith("http") and body["data"]["call_id"] == str(c.id)
        fresh = await ToolCall.objects.aget(id=c.id)
        assert (fresh.status, fresh.expires_at, fresh.escalated_to) == ("pending", c.expires_at, "leads")
        kinds = await sync_to_async(lambda: sorted(Delivery.objects.values_list("event_type", flat=True)))()
        assert kinds == ["confirmation.escalated", "confirmation.pending"]  # ops' target: no second word

        assert await sync_to_async(reply)(secrets["lead1"], c) == (200, {"ok": True})
        fresh = await ToolCall.objects.aget(id=c.id)
        assert (fresh.status, fresh.decided_by) == ("running", "token:lead1")


def test_it_waits_for_the_groups_minutes_and_shows_the_escalation_on_the_pages(db, agenvoy_home):
    w = world(agenvoy_home, "https://ops.example/h", "https://leads.example/h")
    c = w["call"]
    ToolCall.objects.filter(id=c.id).update(created_at=timezone.now() - datetime.timedelta(seconds=100))
    assert calls.escalate_due() == []  # 100 s of 2 minutes
    ToolCall.objects.filter(id=c.id).update(created_at=timezone.now() - datetime.timedelta(seconds=121))
    assert calls.escalate_due() == [str(c.id)]
    lena = User.objects.create_user("lena")
    Person.objects.create(user=lena, role=PersonRole.APPROVER)
    Group.objects.get(name="leads").people.add(lena)
    web = Client()
    web.force_login(lena)
    for page in (web.get("/pending/"), web.get(f"/pending/{c.confirm_id}/")):
        html = page.content.decode()
        assert "For ops, escalated to leads" in html and f'action="/pending/{c.confirm_id}/reply/"' in html
    item = request(w["secrets"]["lead1"], "GET", "/v1/pending").json()["pending"][0]
    assert item["for"] == "ops" and "escalated_to" not in item  # SPEC 24.1's keys only


def test_it_words_the_escalation_for_ntfy_and_the_waiting_agent():
    data = {"tool_name": "mcp__every__echo", "server": "every", "url": "https://c/p/", "for": "ops"}
    data["requested_by"] = "agent-1"
    text, _ = notify.ntfy_request({"type": notify.ESCALATED, "data": data})
    assert text == "echo on every is waiting for approval (requested by agent-1; escalated from ops)"
    assert gate.waiting_text("https://c/p/", "ops") == "waiting for approval by ops: https://c/p/"
    assert (
        gate.waiting_text("https://c/p/", "ops", "leads")
        == "waiting for approval by ops; escalated to leads: https://c/p/"
    )
    assert gate.waiting_text("https://c/p/") == "waiting for approval: https://c/p/"
