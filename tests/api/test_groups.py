"""`/v1/groups` (SPEC 23.3): the answers and errors, exactly; the admin's only; a group a rule
names is not removable; and a rule naming a group that does not exist is a bad line (24.1)."""

import pytest
from django.contrib.auth.models import User

from mcpcore.choices import TokenRole
from mcpcore.models import ApiToken, AuditEntry, Group
from tests.api.test_roles import request

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(db):
    return [User.objects.create_user(n) for n in ("ann", "bob")]


def test_it_makes_lists_and_replaces_a_group(api, people):
    assert api.post("/v1/groups", {"name": "oncall"}).json() == {"ok": True}
    body = {"name": "ops", "people": ["ann", "bob"], "escalate_to": "oncall", "escalate_after_minutes": 15}
    assert api.post("/v1/groups", body).json() == {"ok": True}
    token = ApiToken.issue("pager", role=TokenRole.APPROVER)[0]
    Group.objects.get(name="ops").tokens.add(token)
    assert api.get("/v1/groups").json() == {
        "groups": [
            {
                "name": "oncall",
                "people": [],
                "tokens": [],
                "escalate_to": None,
                "escalate_after_minutes": None,
            },
            {
                "name": "ops",
                "people": ["ann", "bob"],
                "tokens": ["pager"],
                "escalate_to": "oncall",
                "escalate_after_minutes": 15,
            },
        ]
    }
    # Posting again replaces its people and escalation.
    assert api.post("/v1/groups", {"name": "ops", "people": ["bob"]}).json() == {"ok": True}
    ops = next(g for g in api.get("/v1/groups").json()["groups"] if g["name"] == "ops")
    assert (ops["people"], ops["escalate_to"], ops["escalate_after_minutes"]) == (["bob"], None, None)
    actions = list(AuditEntry.objects.filter(object="ops").order_by("pk").values_list("action", flat=True))
    assert actions == ["group.add", "group.edit"]


@pytest.mark.parametrize(
    "body, message",
    [
        ({}, "invalid group name"),
        ({"name": "Ops"}, "invalid group name"),
        ({"name": "a" * 65}, "invalid group name"),
        ({"name": "o p"}, "invalid group name"),
        ({"name": 5}, "invalid group name"),
        ({"name": "ops", "people": ["ann", "zed"]}, "unknown person: zed"),
        ({"name": "ops", "escalate_to": "nowhere"}, "unknown group: nowhere"),
        # A NUL is no name (and PostgreSQL refuses it in a query: never a 500).
        ({"name": "ops", "people": ["a\x00b"]}, "unknown person: a\x00b"),
        ({"name": "ops", "escalate_to": "o\x00"}, "unknown group: o\x00"),
        (
            {"name": "ops", "escalate_after_minutes": 0},
            "escalate_after_minutes must be a whole number from 1",
        ),
        (
            {"name": "ops", "escalate_after_minutes": 1.5},
            "escalate_after_minutes must be a whole number from 1",
        ),
        (
            {"name": "ops", "escalate_after_minutes": "5"},
            "escalate_after_minutes must be a whole number from 1",
        ),
        (
            {"name": "ops", "escalate_after_minutes": True},
            "escalate_after_minutes must be a whole number from 1",
        ),
    ],
)
def test_it_refuses_a_bad_group_with_its_message_and_changes_nothing(api, people, body, message):
    r = api.post("/v1/groups", body)
    assert (r.status_code, r.json()) == (400, {"error": message})
    assert not Group.objects.exists()


def test_it_removes_a_group_unless_a_rule_names_it(api, people, agenvoy_home):
    api.post("/v1/groups", {"name": "ops", "people": ["ann"]})
    api.post("/v1/groups", {"name": "spare"})
    r = api.post("/v1/rules", {"rules": ["ask[ops:2] mcp__every__*"]})
    assert r.status_code == 200, r.content
    r = api.post("/v1/groups/remove", {"name": "ops"})
    assert (r.status_code, r.json()) == (400, {"error": "group ops is used by rules"})
    assert Group.objects.filter(name="ops").exists()
    api.post("/v1/groups", {"name": "spare"})
    api.post("/v1/groups", {"name": "early", "escalate_to": "spare", "escalate_after_minutes": 5})
    r = api.post("/v1/groups/remove", {"name": "spare"})
    assert (r.status_code, r.json()) == (400, {"error": "group spare is escalated to from another group"})
    assert api.post("/v1/groups/remove", {"name": "early"}).json() == {"ok": True}
    assert api.post("/v1/groups/remove", {"name": "spare"}).json() == {"ok": True}
    r = api.post("/v1/groups/remove", {"name": "spare"})
    assert (r.status_code, r.json()) == (404, {"error": "group not found"})
    r = api.post("/v1/groups/remove", {"name": "sp\x00are"})
    assert (r.status_code, r.json()) == (404, {"error": "group not found"})
    assert AuditEntry.objects.filter(action="group.remove", object="spare").count() == 1


def test_it_refuses_a_rule_naming_a_group_that_does_not_exist(api, agenvoy_home):
    r = api.post("/v1/rules", {"rules": ["deny mcp__x__y", "ask[ghosts] mcp__every__*"]})
    assert (r.status_code, r.json()) == (400, {"error": "invalid rule on line 2: unknown group: ghosts"})
    Group.objects.create(name="ghosts")
    assert (
        api.post("/v1/rules", {"rules": ["ask[ghosts] mcp__every__*", "ask[:3] mcp__x__*"]}).status_code
        == 200
    )
    listed = api.get("/v1/rules").json()["rules"]
    assert listed[0] == {
        "line": 1,
        "decision": "ask",
        "pattern": "mcp__every__*",
        "for": "ghosts",
        "approvals": 1,
    }
    assert listed[1] == {"line": 2, "decision": "ask", "pattern": "mcp__x__*", "for": None, "approvals": 3}


@pytest.mark.parametrize("role", [TokenRole.AGENT, TokenRole.APPROVER])
def test_it_answers_403_to_any_token_but_an_admins(people, role):
    token = ApiToken.issue(f"t-{role}", role=role)[1]
    Group.objects.create(name="ops")
    for method, path, body in (
        ("GET", "/v1/groups", None),
        ("POST", "/v1/groups", {"name": "new"}),
        ("POST", "/v1/groups/remove", {"name": "ops"}),
    ):
        r = request(token, method, path, body)
        assert (r.status_code, r.json()) == (403, {"error": "this token may not change groups"})
    assert list(Group.objects.values_list("name", flat=True)) == ["ops"]
