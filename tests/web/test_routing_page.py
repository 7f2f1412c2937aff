"""SPEC 24.1 in the browser (Django test client) and on the live socket: a confirmation an
`ask[<group>]` line held shows `For <group>`, with its buttons only for the group's members and
admins; anyone else's reply, extension or answer through the pages is refused (403) and changes
nothing. Calls come through the gate (`calls.create`) with the rules file as an operator writes it."""

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client

from mcpcore import calls, control
from mcpcore.calls import questions
from mcpcore.choices import PersonRole
from mcpcore.models import ApiToken, Group, Person, ToolCall
from mcpcore.web.consumers import LiveConsumer

FOR_OPS = "this confirmation is for ops"


def person(name: str, role: str, *groups: str) -> User:
    user = User.objects.create_user(name)
    Person.objects.create(user=user, role=role)
    for g in groups:
        Group.objects.get_or_create(name=g)[0].people.add(user)
    return user


@pytest.fixture
def people(db, every, agenvoy_home) -> dict[str, User]:
    made = {
        "anna": person("anna", PersonRole.APPROVER, "ops"),
        "bert": person("bert", PersonRole.APPROVER, "dev"),
        "carl": person("carl", PersonRole.ADMIN),
    }
    (agenvoy_home / "rules").write_text("ask[ops] mcp__every__echo\n")
    return made


def held(tool: str = "mcp__every__echo") -> ToolCall:
    agent, _ = ApiToken.issue("agent", role="agent")
    c = calls.create(agent, "", tool, {"message": "hi"}, "s-1", "confirm")
    assert c.status == "pending"
    return c


def as_(user: User) -> Client:
    c = Client()
    c.force_login(user)
    return c


def reply_form(c: ToolCall) -> str:
    return f'action="/pending/{c.confirm_id}/reply/"'


def test_it_shows_for_the_group_and_the_buttons_only_to_who_decides(people):
    routed, plain = held(), held("mcp__every__add")
    for name, decides in (("anna", True), ("bert", False), ("carl", True)):
        page = as_(people[name]).get("/pending/").content.decode()
        assert "For ops" in page and (reply_form(routed) in page) is decides, name
        assert (f'id="select-{routed.confirm_id}"' in page) is decides, name
        assert reply_form(plain) in page, name  # no group holds it: every approver's
        detail = as_(people[name]).get(f"/pending/{routed.confirm_id}/").content.decode()
        assert "For ops" in detail and (reply_form(routed) in detail) is decides, name
        assert ("Edit and approve</button>" in detail) is decides, name


def test_it_refuses_a_reply_from_outside_the_group_and_changes_nothing(people):
    c = held()
    bert = as_(people["bert"])
    r = bert.post(f"/pending/{c.confirm_id}/reply/", {"session_id": c.session_id, "action": "approve"})
    assert r.status_code == 403 and FOR_OPS in r.content.decode()
    r = bert.post(f"/pending/{c.confirm_id}/edit/", {"arguments": '{"message": "bye"}'})
    assert r.status_code == 403 and FOR_OPS in r.content.decode()
    r = bert.post(f"/pending/{c.confirm_id}/extend/")
    assert r.status_code == 403 and FOR_OPS in r.content.decode()
    bert.post("/pending/decide/", {"ids": str(c.confirm_id), "action": "approve"})
    before = c.expires_at
    c.refresh_from_db()
    assert (c.status, c.arguments, c.expires_at) == ("pending", {"message": "hi"}, before)
    r = as_(people["anna"]).post(
        f"/pending/{c.confirm_id}/reply/", {"session_id": c.session_id, "action": "approve"}
    )
    assert r.status_code == 302
    c.refresh_from_db()
    assert (c.status, c.decided_by) == ("running", "anna")


def test_it_refuses_an_answer_to_a_question_of_another_groups_call(people):
    c = held()
    ToolCall.objects.filter(id=c.id).update(status="running")
    q = questions.ask(c.id, "every", "form", "Go on?", {"type": "object", "properties": {}})
    page = as_(people["bert"]).get(f"/pending/{q.id}/").content.decode()
    assert "For ops" in page and f'action="/pending/{q.id}/answer/"' not in page
    r = as_(people["bert"]).post(f"/pending/{q.id}/answer/", {"action": "decline"})
    assert r.status_code == 403 and FOR_OPS in r.content.decode()
    q.refresh_from_db()
    assert q.status == "pending"
    assert as_(people["anna"]).post(f"/pending/{q.id}/answer/", {"action": "decline"}).status_code == 302
    q.refresh_from_db()
    assert q.status == "declined"


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_pushes_the_buttons_only_to_the_groups_members(every, agenvoy_home):
    def world():
        (agenvoy_home / "rules").write_text("ask[ops] mcp__every__echo\n")
        return person("anna", PersonRole.APPROVER, "ops"), person("bert", PersonRole.APPROVER), held()

    anna, bert, c = await sync_to_async(world)()

    async def socket_of(user: User) -> WebsocketCommunicator:
        comm = WebsocketCommunicator(LiveConsumer.as_asgi(), "/ws/live/?page=pending")
        comm.scope["user"] = user
        assert (await comm.connect())[0]
        return comm

    member, other = await socket_of(anna), await socket_of(bert)
    await control.asend_group(control.PENDING, {"type": "pending.changed", "call_id": str(c.id)})
    mine, theirs = await member.receive_from(timeout=5), await other.receive_from(timeout=5)
    assert "For ops" in theirs and reply_form(c) not in theirs and f"pending-{c.confirm_id}" in theirs
    assert reply_form(c) in mine
    await member.disconnect()
    await other.disconnect()


# --- two people (SPEC 24.2) ------------------------------------------------------------------------


def test_it_needs_two_people_and_offers_only_approve_and_deny(people, agenvoy_home):
    dora = person("dora", PersonRole.APPROVER, "ops")
    (agenvoy_home / "rules").write_text("ask[ops:2] mcp__every__echo\n")
    c = held()
    anna, form = as_(people["anna"]), {"session_id": c.session_id, "action": "approve"}
    page = anna.get(f"/pending/{c.confirm_id}/").content.decode()
    assert "0 of 2 approvals" in page and 'value="remember"' not in page and 'value="session"' not in page
    assert "Edit and approve</button>" not in page
    r = anna.post(f"/pending/{c.confirm_id}/reply/", {**form, "action": "remember"})
    assert r.status_code == 302
    c.refresh_from_db()
    assert c.approvals == []
    assert anna.post(f"/pending/{c.confirm_id}/reply/", form).status_code == 302
    for seen in (anna.get("/pending/"), as_(dora).get(f"/pending/{c.confirm_id}/")):
        assert "1 of 2 approvals: anna" in seen.content.decode()
    r = anna.post(f"/pending/{c.confirm_id}/reply/", form)
    assert r.status_code == 403 and "anna has already approved this call" in r.content.decode()
    assert as_(dora).post(f"/pending/{c.confirm_id}/reply/", form).status_code == 302
    c.refresh_from_db()
    assert (c.status, c.decided_by) == ("running", "anna, dora")
