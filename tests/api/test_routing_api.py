"""SPEC 24.1 over /v1 with tokens: a confirmation an `ask[<group>]` line held is decided only by
that group's members and admins, on every door that decides (reply, extend, batch, a server's
question), refused after 12.1's agent check and before the 410. Calls come in through
`POST /v1/mcp/call` and the gate, with the rules file as an operator writes it."""

import pytest
from django.utils import timezone

from mcpcore.calls import questions
from mcpcore.models import ApiToken, Group, ToolCall
from tests.api.test_roles import request
from tests.rows import add_tools, write_servers

FOR_OPS = {"error": "this confirmation is for ops"}


@pytest.fixture
def routed(db, agenvoy_home):
    """Tokens (an agent that calls, `ops` and `dev` approvers, an admin), the groups, a
    connected server `srv` and rules routing `deploy` to ops (the first matching ask)."""
    write_servers(agenvoy_home, {"srv": {"command": "node", "args": ["index.js"]}})
    add_tools("srv", ["deploy", "read", "note"])
    made = {
        name: ApiToken.issue(name, role=role)
        for name, role in (("agent", "agent"), ("ops1", "approver"), ("dev1", "approver"), ("boss", "admin"))
    }
    Group.objects.create(name="ops").tokens.add(made["ops1"][0])
    Group.objects.create(name="dev").tokens.add(made["dev1"][0])
    (agenvoy_home / "rules").write_text(
        "ask[ops] mcp__srv__deploy\nask[dev] mcp__srv__*(env:prod)\nask mcp__srv__note\n"
    )
    return {name: secret for name, (_, secret) in made.items()}


def call(secret: str, name: str, arguments: dict | None = None) -> ToolCall:
    r = request(secret, "POST", "/v1/mcp/call", {"name": name, "arguments": arguments or {}, "wait": 0})
    assert r.status_code == 202 and r.json()["status"] == "pending", r.content
    return ToolCall.objects.get(id=r.json()["call_id"])


def reply(secret: str, c: ToolCall, body: dict | None = None):
    r = request(
        secret, "POST", f"/v1/session/{c.session_id}/confirm/{c.confirm_id}", body or {"approve": True}
    )
    return r.status_code, r.json()


def test_it_lists_who_a_confirmation_is_for(routed):
    deploy = call(routed["agent"], "mcp__srv__deploy", {"env": "prod"})
    note = call(routed["agent"], "mcp__srv__note")
    prod = call(routed["agent"], "mcp__srv__read", {"env": "prod"})
    listed = {i["call_id"]: i for i in request(routed["dev1"], "GET", "/v1/pending").json()["pending"]}
    # Two ask lines match the deploy: the first in the file names the group.
    assert (listed[str(deploy.id)]["for"], listed[str(deploy.id)]["approvals"]) == ("ops", [])
    assert (listed[str(prod.id)]["for"], listed[str(note.id)]["for"]) == ("dev", None)
    record = request(routed["boss"], "GET", f"/v1/mcp/calls/{deploy.id}").json()
    assert (record["for"], record["approvals"]) == ("ops", [])


def test_it_lets_only_the_groups_members_and_admins_decide(routed):
    first, second = call(routed["agent"], "mcp__srv__deploy"), call(routed["agent"], "mcp__srv__deploy")
    assert reply(routed["dev1"], first) == (403, FOR_OPS)
    first.refresh_from_db()
    assert first.status == "pending" and first.decided_by == ""
    assert reply(routed["ops1"], first) == (200, {"ok": True})
    assert reply(routed["boss"], second, {"approve": False}) == (200, {"ok": True})
    first.refresh_from_db(), second.refresh_from_db()
    assert (first.status, first.decided_by) == ("running", "token:ops1")
    assert (second.status, second.decided_by) == ("skipped", "token:boss")
    # A call no group holds is every approver's, as before.
    note = call(routed["agent"], "mcp__srv__note")
    assert reply(routed["dev1"], note) == (200, {"ok": True})


def test_it_refuses_another_groups_extend_and_batch(routed):
    mine, theirs = (
        call(routed["agent"], "mcp__srv__read", {"env": "prod"}),
        call(routed["agent"], "mcp__srv__deploy"),
    )
    r = request(routed["dev1"], "POST", f"/v1/pending/{theirs.confirm_id}/extend")
    assert (r.status_code, r.json()) == (403, FOR_OPS)
    assert request(routed["ops1"], "POST", f"/v1/pending/{theirs.confirm_id}/extend").status_code == 200
    ids = [str(mine.confirm_id), str(theirs.confirm_id)]
    r = request(routed["dev1"], "POST", "/v1/pending/decide", {"ids": ids, "approve": True})
    assert r.json() == {"results": {ids[0]: "ok", ids[1]: FOR_OPS["error"]}}
    theirs.refresh_from_db()
    assert theirs.status == "pending"


def test_it_refuses_another_groups_answer_to_a_servers_question(routed):
    c = call(routed["agent"], "mcp__srv__deploy")
    assert reply(routed["ops1"], c) == (200, {"ok": True})
    question = questions.ask(c.id, "srv", "form", "Go on?", {"type": "object", "properties": {}})
    listed = request(routed["dev1"], "GET", "/v1/pending").json()["pending"]
    assert [i["for"] for i in listed if i["kind"] == "question"] == ["ops"]
    for path in (f"/v1/pending/{question.id}/answer", f"/v1/pending/{question.id}/extend"):
        r = request(routed["dev1"], "POST", path, {"action": "decline"})
        assert (r.status_code, r.json()) == (403, FOR_OPS), path
    r = request(routed["ops1"], "POST", f"/v1/pending/{question.id}/answer", {"action": "decline"})
    assert r.status_code == 200
    question.refresh_from_db()
    assert question.status == "declined"


def test_it_refuses_in_the_order_of_the_spec(routed):
    """404, own call, agent (12.1), then the group (24.1), then 410."""
    own = call(routed["dev1"], "mcp__srv__deploy")
    decided = call(routed["agent"], "mcp__srv__deploy")
    ToolCall.objects.filter(id=decided.id).update(status="skipped", decided_at=timezone.now())
    assert reply(routed["agent"], own) == (403, {"error": "this token may not reply to confirmations"})
    assert reply(routed["dev1"], own) == (403, {"error": "a token may not reply to its own call"})
    assert reply(routed["dev1"], decided) == (403, FOR_OPS)
    assert reply(routed["ops1"], decided) == (410, {"error": "confirmation already resolved or expired"})
    r = request(routed["dev1"], "POST", f"/v1/pending/{decided.confirm_id}/extend")
    assert (r.status_code, r.json()) == (403, FOR_OPS)
    r = request(
        routed["dev1"], "POST", "/v1/pending/decide", {"ids": [str(decided.confirm_id)], "approve": True}
    )
    assert r.json()["results"] == {str(decided.confirm_id): FOR_OPS["error"]}


# --- two people (SPEC 24.2) ------------------------------------------------------------------------


@pytest.fixture
def quorum(routed, agenvoy_home):
    """`deploy` needs two approvals of ops, `note` two of anyone; ops has two tokens."""
    ops2, secret = ApiToken.issue("ops2", role="approver")
    Group.objects.get(name="ops").tokens.add(ops2)
    (agenvoy_home / "rules").write_text("ask[ops:2] mcp__srv__deploy\nask[:2] mcp__srv__note\n")
    return routed | {"ops2": secret}


def pending_item(secret: str, c: ToolCall) -> dict:
    listed = request(secret, "GET", "/v1/pending").json()["pending"]
    return next(i for i in listed if i["call_id"] == str(c.id))


def test_it_runs_a_call_after_two_distinct_approvals(quorum):
    c = call(quorum["agent"], "mcp__srv__deploy")
    assert reply(quorum["ops1"], c) == (200, {"ok": True})
    c.refresh_from_db()
    assert (c.status, c.decided_by, c.approvals_note) == ("pending", "", "1 of 2 approvals: token:ops1")
    item = pending_item(quorum["boss"], c)
    assert item["for"] == "ops" and [a["by"] for a in item["approvals"]] == ["token:ops1"]
    assert item["approvals"][0]["at"].endswith("Z")
    assert reply(quorum["ops1"], c) == (403, {"error": "token:ops1 has already approved this call"})
    assert reply(quorum["ops2"], c) == (200, {"ok": True})
    record = request(quorum["boss"], "GET", f"/v1/mcp/calls/{c.id}").json()
    assert (record["status"], record["decided_by"]) == ("running", "token:ops1, token:ops2")
    assert [a["by"] for a in record["approvals"]] == ["token:ops1", "token:ops2"]


@pytest.mark.parametrize(
    "body",
    [
        {"approve": True, "remember": True},
        {"approve": True, "allow_turn": True},
        {"approve": True, "remember_for": 3600},
        {"approve": True, "arguments": {"env": "dev"}},
    ],
)
def test_it_offers_only_a_plain_approval_of_a_call_needing_two(quorum, body):
    c = call(quorum["agent"], "mcp__srv__deploy")
    assert reply(quorum["ops1"], c, body) == (400, {"error": "this call needs 2 approvals"})
    c.refresh_from_db()
    assert (c.status, c.approvals) == ("pending", [])


def test_it_ends_a_call_needing_two_at_one_deny(quorum):
    c = call(quorum["agent"], "mcp__srv__note")
    assert reply(quorum["dev1"], c) == (200, {"ok": True})
    assert reply(quorum["ops1"], c, {"approve": False, "reason": "no"}) == (200, {"ok": True})
    c.refresh_from_db()
    assert (c.status, c.decided_by) == ("skipped", "token:ops1")
    assert reply(quorum["ops2"], c) == (410, {"error": "confirmation already resolved or expired"})


def test_it_counts_a_batch_approval_as_one(quorum):
    c = call(quorum["agent"], "mcp__srv__note")
    ids = [str(c.confirm_id)]
    assert request(quorum["dev1"], "POST", "/v1/pending/decide", {"ids": ids, "approve": True}).json() == {
        "results": {ids[0]: "ok"}
    }
    again = request(quorum["dev1"], "POST", "/v1/pending/decide", {"ids": ids, "approve": True}).json()
    assert again == {"results": {ids[0]: "token:dev1 has already approved this call"}}
    c.refresh_from_db()
    assert c.status == "pending" and c.approvals_note == "1 of 2 approvals: token:dev1"
    request(quorum["ops1"], "POST", "/v1/pending/decide", {"ids": ids, "approve": True})
    c.refresh_from_db()
    assert (c.status, c.decided_by) == ("running", "token:dev1, token:ops1")
