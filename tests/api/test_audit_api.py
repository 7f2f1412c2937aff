"""SPEC 22.2 (issue 32), `/v1`: `GET /v1/audit` (admin only; `since`, `until`, `action`,
`actor`, `format`; streamed oldest first exactly as 18.2 streams the calls export), and every
change a token makes through `/v1` recorded as the token's (its name, the client's address)."""

import csv
import datetime
import io
import json

import pytest
from django.test import Client
from django.utils import timezone

from mcpcore import audit, calls
from mcpcore.api import ops
from mcpcore.choices import AuditAction
from mcpcore.models import ApiToken, AuditEntry, Server, Tool
from tests.api.test_export import _drain as streamed

pytestmark = pytest.mark.django_db
ME = ("test", "127.0.0.1")  # the `api` fixture's admin token, from the test client


def body(r) -> bytes:
    assert r.status_code == 200, r.content
    return streamed(r)


def lines(r) -> list[dict]:
    return [json.loads(x) for x in body(r).decode().splitlines()]


def recorded(action: str) -> AuditEntry:
    entry = AuditEntry.objects.filter(action=action).order_by("id").last()
    assert entry is not None, f"no {action} row"
    assert (entry.actor, entry.address) == ME
    return entry


# --- GET /v1/audit --------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["agent", "approver"])
def test_it_lets_only_admin_tokens_read_the_audit_trail(client, role):
    _, secret = ApiToken.issue(role, role=role)
    r = client.get("/v1/audit", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert (r.status_code, r.json()) == (403, {"error": "this token may not read the audit trail"})
    assert client.get("/v1/audit").status_code == 401


def test_it_streams_every_row_oldest_first_as_json_lines(api):
    start = timezone.now() - datetime.timedelta(hours=1)
    for i, action in enumerate((AuditAction.VIEW_ADD, AuditAction.TOKEN_CREATE, AuditAction.VIEW_REMOVE)):
        entry = audit.record(action, f"o{i}", actor=audit.Actor("op", "192.0.2.1"), after={"n": i})
        AuditEntry.objects.filter(pk=entry.pk).update(at=start + datetime.timedelta(minutes=i))
    r = api.get("/v1/audit")
    assert r["Content-Type"] == "application/jsonl; charset=utf-8" and r["Cache-Control"] == "no-store"
    assert r["Content-Disposition"] == 'attachment; filename="agenvoy-audit.jsonl"'
    got = lines(r)
    assert [g["object"] for g in got] == ["o0", "o1", "o2"]
    assert got[0] == AuditEntry.objects.get(object="o0").to_dict()
    assert set(got[0]) == {"id", "at", "actor", "address", "action", "object", "before", "after"}
    assert (got[0]["actor"], got[0]["address"], got[0]["after"], got[0]["before"]) == (
        "op",
        "192.0.2.1",
        {"n": 0},
        None,
    )


def test_it_filters_by_time_action_and_actor(api):
    start = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)
    AuditEntry.objects.bulk_create(
        AuditEntry(at=start + datetime.timedelta(days=i), actor="alice" if i % 2 else "bob",
                   action=AuditAction.VIEW_ADD if i < 3 else AuditAction.TOKEN_REVOKE, object=f"o{i}")
        for i in range(6)
    )  # fmt: skip
    objects = lambda q: [g["object"] for g in lines(api.get(f"/v1/audit?{q}"))]  # noqa: E731
    assert objects("since=2026-11-02T00:00:00Z&until=2026-11-04") == ["o1", "o2"]
    assert objects("action=token.revoke") == ["o3", "o4", "o5"]
    assert objects("actor=alice") == ["o1", "o3", "o5"] and objects("actor=nobody") == []
    assert objects("action=view.add&actor=bob&since=") == ["o0", "o2"]


def test_it_streams_csv_with_before_and_after_as_compact_json(api):
    audit.record(AuditAction.TRUST_CHANGE, "mcp__a__", actor="cli", before=["mcp__a__x"], after=["mcp__a__*"])
    r = api.get("/v1/audit?format=csv")
    assert r["Content-Type"] == "text/csv; charset=utf-8"
    rows = list(csv.reader(io.StringIO(body(r).decode())))
    assert rows[0] == ["id", "at", "actor", "address", "action", "object", "before", "after"]
    assert rows[1][2:] == ["cli", "", "trust.change", "mcp__a__", '["mcp__a__x"]', '["mcp__a__*"]']
    assert (
        body(api.get("/v1/audit?format=csv&actor=nobody")).decode()
        == "id,at,actor,address,action,object,before,after\r\n"
    )


@pytest.mark.parametrize(
    "query, message",
    [
        ("since=yesterday", "invalid since: yesterday"),
        ("until=2026-13-01", "invalid until: 2026-13-01"),
        ("action=server.rename", "invalid action: server.rename"),
        ("format=xml", "invalid format: xml"),
    ],
)
def test_it_refuses_a_bad_parameter_as_the_export_does(api, query, message):
    r = api.get(f"/v1/audit?{query}")
    assert (r.status_code, r.json()) == (400, {"error": message})


def test_it_streams_many_rows_in_chunks_in_order(api, monkeypatch):
    monkeypatch.setattr(ops, "CHUNK", 7)
    same = timezone.now() - datetime.timedelta(days=1)  # rows of one instant: ordered by id
    AuditEntry.objects.bulk_create(
        AuditEntry(at=same, actor="op", action="token.create", object=f"o{i}") for i in range(30)
    )
    trips = []
    real = ops.audit_chunk
    monkeypatch.setattr(ops, "audit_chunk", lambda *a, **k: trips.append(1) or real(*a, limit=7))
    got = lines(api.get("/v1/audit"))
    assert [g["object"] for g in got] == [f"o{i}" for i in range(30)] and len(trips) == 5


def test_it_describes_the_route_in_the_openapi_description(client):
    op = client.get("/v1/openapi.json").json()["paths"]["/v1/audit"]["get"]
    assert {p["name"] for p in op["parameters"]} == {"since", "until", "action", "actor", "format"}
    assert op["responses"]["403"]["description"] == "this token may not read the audit trail"
    assert op["x-agenvoy-roles"]["admin"] == "yes"


# --- what tokens change through /v1 ---------------------------------------------------------------


def test_it_records_servers_added_edited_and_removed_through_v1(api, agenvoy_home):
    api.post("/v1/mcp", {"name": "gh", "server": {"command": "gh-mcp", "env": {"GH_TOKEN": "ghp_clear"}}})
    assert (recorded(AuditAction.SERVER_ADD).object, recorded(AuditAction.SERVER_ADD).after["env"]) == (
        "gh",
        {"GH_TOKEN": "********"},
    )
    api.post(
        "/v1/mcp",
        # New args: the secret is entered again (SPEC 12.3), and masked in the audit too.
        {"name": "gh", "server": {"command": "gh-mcp", "env": {"GH_TOKEN": "ghp_again"}, "args": ["-v"]}},
    )
    edit = recorded(AuditAction.SERVER_EDIT)
    assert (edit.before.get("args"), edit.after["args"], edit.after["env"]) == (
        None,
        ["-v"],
        {"GH_TOKEN": "******** (changed)"},
    )
    api.post("/v1/mcp/remove", {"name": "gh"})
    assert recorded(AuditAction.SERVER_REMOVE).before["args"] == ["-v"]
    assert "ghp_clear" not in json.dumps(list(AuditEntry.objects.values()), default=str)
    assert "ghp_again" not in json.dumps(list(AuditEntry.objects.values()), default=str)


def test_it_records_the_allow_list_and_rules_through_v1(api, agenvoy_home):
    api.post("/v1/allowlist", {"tool": {"prefix": "mcp__a__", "entries": ["mcp__a__x"]}})
    trust = recorded(AuditAction.TRUST_CHANGE)
    assert (trust.object, trust.before, trust.after) == ("mcp__a__", [], ["mcp__a__x"])
    api.post("/v1/rules", {"rules": ["deny mcp__a__x(path:/etc/*)"]})
    rules = recorded(AuditAction.RULES_CHANGE)
    assert (rules.object, rules.before, rules.after) == ("rules", [], ["deny mcp__a__x(path:/etc/*)"])


def test_it_records_views_through_v1(api):
    api.post("/v1/views", {"name": "docs", "include": ["mcp__a__*"]})
    assert recorded(AuditAction.VIEW_ADD).after["include"] == ["mcp__a__*"]
    api.post("/v1/views", {"name": "docs", "include": ["mcp__b__*"]})
    edit = recorded(AuditAction.VIEW_EDIT)
    assert (edit.before["include"], edit.after["include"]) == (["mcp__a__*"], ["mcp__b__*"])
    api.post("/v1/views/remove", {"name": "docs"})
    assert recorded(AuditAction.VIEW_REMOVE).before["include"] == ["mcp__b__*"]


def test_it_records_allowances_made_by_a_v1_reply(api, agenvoy_home):
    server = Server.objects.create(name="srv", state="connected", transport="stdio")
    for tool in ("a", "b", "c"):
        Tool.objects.create(server=server, tool_name=tool, registered_name=f"mcp__srv__{tool}")
    agent, _ = ApiToken.issue("laptop")

    def reply(tool: str, session: str, answer: dict) -> None:
        c = calls.create(agent, "", f"mcp__srv__{tool}", {}, session, "confirm")
        r = Client().post(
            f"/v1/session/{session}/confirm/{c.confirm_id}",
            data=json.dumps({"approve": True, **answer}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {api.token}",
        )
        assert r.status_code == 200, r.content

    reply("a", "s-1", {"allow_turn": True})
    assert recorded(AuditAction.ALLOWANCE_ADD).after == {
        "allowance": "session", "token": "laptop", "session_id": "s-1", "approved_on": "mcp__srv__a",
    }  # fmt: skip
    reply("b", "s-2", {"remember_for": 600})
    timed = recorded(AuditAction.ALLOWANCE_ADD)
    assert (timed.object, timed.after["allowance"], timed.after["token"]) == (
        "mcp__srv__b",
        "for a time",
        "laptop",
    )
    reply("c", "s-3", {"remember": True})
    trust = recorded(AuditAction.TRUST_CHANGE)
    assert (trust.object, trust.after) == ("mcp__srv__c", ["mcp__srv__c"])


def test_it_writes_no_audit_row_for_a_v1_call(api, agenvoy_home):
    """A call through `/v1` is no audited change (bench/audit.py reports the same)."""
    server = Server.objects.create(name="srv", state="connected", transport="stdio")
    Tool.objects.create(server=server, tool_name="t", registered_name="mcp__srv__t")
    r = api.post("/v1/mcp/call", {"name": "mcp__srv__t", "arguments": {"x": 1}, "wait": 0})
    assert r.status_code == 202 and r.json()["status"] == "pending"
    assert api.get("/v1/pending").status_code == 200
    assert not AuditEntry.objects.exists()
