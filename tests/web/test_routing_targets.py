"""SPEC 24.7: notification targets per group. A target naming groups is told only of their
confirmations and questions (one naming none of all of them); its one-tap links decide only
what was sent to it, count as one approval by `<target name> (one-tap)`, and stop working when
the target is removed. Calls come through the gate with the rules file as an operator writes it;
the Notifications page through the Django test client."""

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from mcpcore import calls
from mcpcore.calls import notify, questions
from mcpcore.models import ApiToken, AuditEntry, Delivery, Group, NotificationTarget, ToolCall
from tests.api.test_roles import request


@pytest.fixture
def world(db, every, agenvoy_home) -> dict:
    ops, dev = Group.objects.create(name="ops"), Group.objects.create(name="dev")
    (agenvoy_home / "rules").write_text("ask[ops] mcp__every__echo\nask[dev:2] mcp__every__add\n")
    return {
        "ops": notify.add_target("webhook", "https://ops.example/hook", groups=[ops])[0],
        "dev": notify.add_target("webhook", "https://dev.example/hook", groups=[dev])[0],
        "all": notify.add_target("webhook", "https://all.example/hook")[0],
    }


def held(tool: str) -> ToolCall:
    agent = ApiToken.objects.filter(name="agent").first() or ApiToken.issue("agent", role="agent")[0]
    c = calls.create(agent, "", tool, {"message": "hi"}, "s-1", "confirm")
    assert c.status == "pending"
    return c


def told(c: ToolCall) -> set[str]:
    return {d.target.name for d in Delivery.objects.filter(call_id=c.id).select_related("target")}


def test_it_tells_a_target_only_its_groups_confirmations_and_questions(world):
    echo, plain = held("mcp__every__echo"), held("mcp__every__get-sum")
    notify.enqueue()
    assert told(echo) == {"ops.example", "all.example"}
    assert told(plain) == {"all.example"}
    ToolCall.objects.filter(id=echo.id).update(status="running")
    q = questions.ask(echo.id, "every", "form", "Go on?", {"type": "object", "properties": {}})
    notify.enqueue()
    asked = Delivery.objects.filter(event_type="question.pending", call_id=q.call_id)
    assert {d.target.name for d in asked} == {"ops.example", "all.example"}


def tap(target: NotificationTarget, c: ToolCall, decision: str = "approve"):
    link = notify.action_links(settings.AGENVOY_PUBLIC_URL, c.confirm_id, target.pk)[f"{decision}_url"]
    return Client().post(link.removeprefix(settings.AGENVOY_PUBLIC_URL))


def test_it_lets_a_one_tap_link_decide_only_what_was_sent_to_its_target(world):
    echo = held("mcp__every__echo")
    r = tap(world["dev"], echo)
    assert (r.status_code, r.content) == (403, b"this confirmation is for ops")
    plain = held("mcp__every__get-sum")
    r = tap(world["ops"], plain)
    assert (r.status_code, r.content) == (403, b"this confirmation is for every approver")
    echo.refresh_from_db()
    assert echo.status == "pending"
    r = tap(world["ops"], echo)
    assert (r.status_code, r.content) == (200, b"approved")
    echo.refresh_from_db()
    assert (echo.status, echo.decided_by) == ("running", "ops.example (one-tap)")
    assert tap(world["all"], plain, "deny").content == b"denied"


def test_it_counts_a_one_tap_as_one_approval_and_forgets_a_removed_target(world):
    add = held("mcp__every__add")
    assert tap(world["dev"], add).status_code == 200
    add.refresh_from_db()
    assert (add.status, add.approvals_note) == ("pending", "1 of 2 approvals: dev.example (one-tap)")
    r = tap(world["dev"], add)
    assert (r.status_code, r.content) == (403, b"dev.example (one-tap) has already approved this call")
    link = notify.action_links(settings.AGENVOY_PUBLIC_URL, add.confirm_id, world["all"].pk)["approve_url"]
    world["all"].delete()
    r = Client().post(link.removeprefix(settings.AGENVOY_PUBLIC_URL))
    assert (r.status_code, r.content) == (410, b"this link is no longer valid")
    add.refresh_from_db()
    assert add.status == "pending"


def test_it_adds_a_target_for_groups_on_the_notifications_page(db):
    Group.objects.create(name="ops")
    web = Client()
    web.force_login(User.objects.create_user("op"))
    page = web.get("/notifications/").content.decode()
    assert 'name="groups" value="ops"' in page
    r = web.post("/notifications/", {"kind": "webhook", "url": "https://x.example/h", "groups": ["nope"]})
    assert r.status_code == 400 and "Unknown group: nope." in r.content.decode()
    assert not NotificationTarget.objects.exists()
    r = web.post("/notifications/", {"kind": "webhook", "url": "https://x.example/h", "groups": ["ops"]})
    assert r.status_code == 200 and "For ops" in r.content.decode()
    assert [g.name for g in NotificationTarget.objects.get().groups.all()] == ["ops"]
    assert AuditEntry.objects.get(action="notify.add").after["groups"] == ["ops"]
    web.post("/notifications/", {"kind": "ntfy", "url": "https://ntfy.example/t"})
    assert "For every confirmation" in web.get("/notifications/").content.decode()


def test_it_keeps_a_group_a_target_names(db):
    ops = Group.objects.create(name="ops")
    notify.add_target("webhook", "https://ops.example/hook", groups=[ops])
    _, admin = ApiToken.issue("boss", role="admin")
    r = request(admin, "POST", "/v1/groups/remove", {"name": "ops"})
    assert (r.status_code, r.json()) == (400, {"error": "group ops is named by a notification target"})


def test_it_names_a_target_and_counts_its_one_tap_approval_by_that_name(db, every, agenvoy_home):
    (agenvoy_home / "rules").write_text("ask mcp__every__get-sum\n")
    # SPEC 15: a target is a name (default: the URL's host); 24.7: `<target name> (one-tap)`.
    web = Client()
    web.force_login(User.objects.create_user("op"))
    r = web.post(
        "/notifications/", {"kind": "webhook", "url": "https://hooks.example/h", "name": "Ops pager"}
    )
    assert r.status_code == 200 and "Ops pager" in r.content.decode()
    r = web.post("/notifications/", {"kind": "webhook", "url": "https://x.example/h", "name": "n" * 101})
    assert r.status_code == 400 and "That name is too long (at most 100 characters)." in r.content.decode()
    web.post("/notifications/", {"kind": "ntfy", "url": "https://ntfy.example/topic"})
    assert list(NotificationTarget.objects.values_list("name", flat=True)) == ["Ops pager", "ntfy.example"]
    pager = NotificationTarget.objects.get(name="Ops pager")
    c = held("mcp__every__get-sum")
    assert tap(pager, c).status_code == 200
    c.refresh_from_db()
    assert c.decided_by == "Ops pager (one-tap)"
