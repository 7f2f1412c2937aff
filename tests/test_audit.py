"""SPEC 22.2 (issue 32): the audit trail's writer (`mcpcore.audit`) and the changes recorded
below the doors: what the shared files' mirror picks up from another program (actor `file`,
with what was added and removed, never twice nor for the console's own writes), OAuth
standing, the operator's commands (`system`), retention, and that no secret ever reaches a row.
The pages' and `/v1`'s own rows are in tests/web/test_audit_page.py and
tests/api/test_audit_api.py."""

import datetime
import io
import json

import pytest
from django.core.management import call_command
from django.test import RequestFactory
from django.utils import timezone

from mcpcore import audit, calls, files, retention, serverconfig
from mcpcore.choices import AuditAction
from mcpcore.models import ApiToken, AuditEntry, Server, Tool
from mcpcore.oauth import upstream
from tests.rows import write_servers

pytestmark = pytest.mark.django_db
DAY = datetime.timedelta(days=1)


def rows(action: str | None = None) -> list[AuditEntry]:
    found = AuditEntry.objects.order_by("at", "id")
    return list(found.filter(action=action) if action else found)


def only(action: str) -> AuditEntry:
    found = rows(action)
    assert len(found) == 1, [(e.action, e.object, e.actor) for e in rows()]
    return found[0]


# --- the writer -----------------------------------------------------------------------------------


def test_it_records_a_row_with_masked_secrets_and_the_actors_address():
    config = {
        "command": "node",
        "env": {"API_KEY": "k-123"},
        "headers": {"Authorization": "Bearer h-456"},
        "oauth": {"client_id": "c", "client_secret": "cs-789"},
    }
    entry = audit.record(
        AuditAction.SERVER_ADD, "srv", actor=audit.Actor("op", "10.0.0.7"), after={**config, "tokens": "t-0"}
    )
    entry.refresh_from_db()
    assert (entry.actor, entry.address, entry.action, entry.object) == ("op", "10.0.0.7", "server.add", "srv")
    assert entry.before is None and entry.at <= timezone.now()
    assert entry.after == {
        "command": "node",
        "env": {"API_KEY": "********"},
        "headers": {"Authorization": "********"},
        "oauth": {"client_id": "c", "client_secret": "********"},
        "tokens": "********",
    }


def test_it_refuses_an_action_the_contract_does_not_name():
    with pytest.raises(ValueError, match="unknown audit action: server.rename"):
        audit.record("server.rename", "srv", actor="op")
    assert not AuditEntry.objects.exists()


def test_it_takes_the_sign_in_actions_for_the_sign_in_work():
    for action in ("signin.ok", "signin.failed", "signin.locked", "mfa.add", "mfa.remove"):
        audit.record(action, "op", actor="op", address="192.0.2.1")
    assert [e.action for e in rows()] == [
        "signin.ok",
        "signin.failed",
        "signin.locked",
        "mfa.add",
        "mfa.remove",
    ]


def test_it_names_who_a_request_is_and_where_it_came_from(django_user_model):
    factory = RequestFactory()
    page = factory.get("/", REMOTE_ADDR="203.0.113.9")
    page.user = django_user_model(username="alice")
    assert audit.by(page) == audit.Actor("alice", "203.0.113.9")
    api = factory.get("/v1/mcp", REMOTE_ADDR="198.51.100.2")
    api.api_token, _ = ApiToken.issue("cli", role="admin")
    assert audit.by(api) == audit.Actor("cli", "198.51.100.2")
    assert audit.address_of(factory.get("/", REMOTE_ADDR="::1")) == "::1"


def test_it_marks_a_secret_an_edit_changed_without_showing_it():
    old = {"command": "x", "env": {"A": "one", "B": "same"}, "oauth": {"client_secret": "s1"}}
    new = {"command": "x", "env": {"A": "two", "B": "same", "C": "new"}, "oauth": {"client_secret": "s2"}}
    before, after = audit.server_states(old, new)
    assert before == {
        "command": "x",
        "env": {"A": "********", "B": "********"},
        "oauth": {"client_secret": "********"},
    }
    assert after == {
        "command": "x",
        "env": {"A": "******** (changed)", "B": "********", "C": "********"},
        "oauth": {"client_secret": "******** (changed)"},
    }


def test_it_counts_lines_added_and_removed_in_their_order():
    assert audit.added_removed(["a", "b", "b", "c"], ["b", "d", "a", "e"]) == (["d", "e"], ["b", "c"])


# --- edits on disk (the mirror) -------------------------------------------------------------------


def test_it_records_servers_added_changed_and_removed_in_mcp_json_as_file(agenvoy_home):
    (agenvoy_home / "mcp.json").write_text(
        json.dumps({"servers": {"a": {"command": "x", "env": {"K": "v1"}}, "b": {"url": "https://b/mcp"}}})
    )
    files.sync_servers()
    assert [(e.action, e.object, e.actor, e.address) for e in rows()] == [
        ("server.add", "a", "file", ""),
        ("server.add", "b", "file", ""),
    ]
    (agenvoy_home / "mcp.json").write_text(
        json.dumps({"servers": {"a": {"command": "y", "env": {"K": "v2"}}}})
    )
    files.sync_servers()
    edit, gone = only("server.edit"), only("server.remove")
    assert (edit.object, edit.actor) == ("a", "file")
    assert edit.before == {"command": "x", "env": {"K": "********"}}
    assert edit.after == {"command": "y", "env": {"K": "******** (changed)"}}
    assert (gone.object, gone.before, gone.after) == ("b", {"url": "https://b/mcp"}, None)
    files.sync_servers()  # nothing new on disk: nothing recorded
    assert len(rows()) == 4


def test_it_records_allow_tool_entries_added_and_removed_on_disk_as_file(agenvoy_home):
    (agenvoy_home / "allow_tool").write_text("mcp__a__x\nmcp__a__y\n")
    files.sync_allow()
    (agenvoy_home / "allow_tool").write_text("mcp__a__y\nmcp__b__*\n")
    files.sync_allow()
    files.sync_allow()
    first, second = rows(AuditAction.TRUST_CHANGE)
    assert (first.actor, first.object, first.before, first.after) == (
        "file",
        "allow_tool",
        [],
        ["mcp__a__x", "mcp__a__y"],
    )
    assert (second.before, second.after) == (["mcp__a__x"], ["mcp__b__*"])


def test_it_records_rules_lines_added_and_removed_on_disk_as_file_and_not_a_line_that_moved(agenvoy_home):
    (agenvoy_home / "rules").write_text("deny mcp__a__x\nask mcp__b__*\n")
    files.sync_rules()
    (agenvoy_home / "rules").write_text("# moved down\nask mcp__b__*\ndeny mcp__a__x\n")
    files.sync_rules()
    (agenvoy_home / "rules").write_text("ask mcp__b__*\nallow mcp__c__read\n")
    files.sync_rules()
    first, second = rows(AuditAction.RULES_CHANGE)
    assert (first.actor, first.object, first.before, first.after) == (
        "file", "rules", [], ["deny mcp__a__x", "ask mcp__b__*"],
    )  # fmt: skip
    assert (second.before, second.after) == (["deny mcp__a__x"], ["allow mcp__c__read"])


def test_it_records_rules_the_gate_read_first_as_file(agenvoy_home):
    (agenvoy_home / "rules").write_text("deny mcp__a__x\n")
    calls.rules_in_force()  # the call path reads a changed file before the watcher does
    files.sync_rules()
    entry = only(AuditAction.RULES_CHANGE)
    assert (entry.actor, entry.after) == ("file", ["deny mcp__a__x"])


def test_it_leaves_mirroring_to_a_writer_that_holds_the_rules_lock(agenvoy_home):
    (agenvoy_home / "rules").write_text("deny mcp__a__x\n")
    with files.locked(agenvoy_home / "rules"):
        found, _ = files.current_rules(mirror=True)  # the gate, while the console writes
    assert [r.text for r in found] == ["deny mcp__a__x"] and not rows()


def test_it_never_records_the_consoles_own_writes_twice_or_as_file(agenvoy_home):
    me = audit.Actor("op", "127.0.0.1")
    serverconfig.save("srv", {"command": "x"}, creating=True, by=me)
    files.replace_allow_prefix("mcp__srv__", ["mcp__srv__a"], by=me)
    files.add_allow_entry("mcp__srv__b", by=me)
    files.write_rules(["deny mcp__srv__a"], by=me)
    watcher = files.FileWatcher()
    watcher.check()  # the supervisor's pick-up of the files the console just wrote
    files.sync_servers(), files.sync_allow(), files.sync_rules()
    assert [(e.action, e.object, e.actor, e.before, e.after) for e in rows()] == [
        ("server.add", "srv", "op", None, {"command": "x"}),
        ("trust.change", "mcp__srv__", "op", [], ["mcp__srv__a"]),
        ("trust.change", "mcp__srv__b", "op", [], ["mcp__srv__b"]),
        ("rules.change", "rules", "op", [], ["deny mcp__srv__a"]),
    ]


def test_it_records_another_programs_edit_as_file_before_the_consoles_own_change(agenvoy_home):
    me = audit.Actor("op")
    files.replace_allow_prefix("mcp__a__", ["mcp__a__x"], by=me)
    write_servers(agenvoy_home, {"a": {"command": "x"}})
    # The Agenvoy CLI edits both files; the console writes before its watcher looked.
    (agenvoy_home / "allow_tool").write_text("mcp__a__x\nmcp__cli__*\n")
    (agenvoy_home / "mcp.json").write_text(
        json.dumps({"servers": {"a": {"command": "x"}, "cli": {"command": "c"}}})
    )
    files.replace_allow_prefix("mcp__a__", [], by=me)
    serverconfig.remove("a", by=me)
    changes = [(e.action, e.object, e.actor, e.before, e.after) for e in rows()][2:]
    assert changes == [
        ("trust.change", "allow_tool", "file", [], ["mcp__cli__*"]),
        ("trust.change", "mcp__a__", "op", ["mcp__a__x"], []),
        ("server.add", "cli", "file", None, {"command": "c"}),
        ("server.remove", "a", "op", {"command": "x"}, None),
    ]


# --- OAuth standing, commands, calls --------------------------------------------------------------


def test_it_records_a_persons_authorization_but_not_renewals_or_machine_accounts():
    upstream.store_tokens(
        "linear",
        "https://l/mcp",
        {"access_token": "at-1", "refresh_token": "rt-1", "scope": "read"},
        "op",
        "192.0.2.4",
    )
    upstream.store_tokens(
        "linear", "https://l/mcp", {"access_token": "at-2", "refresh_token": "rt-2"}
    )  # a renewal
    upstream.store_tokens("machine", "https://m/mcp", {"access_token": "at-3"}, "")  # client credentials
    entry = only(AuditAction.SERVER_AUTHORIZE)
    assert (entry.object, entry.actor, entry.address, entry.before) == ("linear", "op", "192.0.2.4", None)
    assert entry.after["authorized_by"] == "op" and entry.after["scopes"] == ["read"]
    assert entry.after["url"] == "https://l/mcp"
    assert upstream.forget("linear", audit.Actor("op", "192.0.2.4")) and not upstream.forget("linear")
    forgot = only(AuditAction.SERVER_FORGET)
    assert (forgot.object, forgot.before["authorized_by"], forgot.after) == ("linear", "op", None)


def test_it_keeps_the_address_the_person_came_back_from_with_the_code():
    flow = upstream.new_flow("linear", "op")
    upstream.flow_waiting(str(flow.id), "st-1", "https://auth/authorize?state=st-1")
    assert upstream.callback("st-1", "code-1", "", "op", "", "203.0.113.5") is not None
    _, code, _, person = upstream.flow_code(str(flow.id))
    assert (code["code"], code["from"], person) == ("code-1", "203.0.113.5", "op")


def test_it_records_the_operators_commands_as_system(agenvoy_home, tmp_path):
    call_command("create_token", "cli", "--role", "admin", stdout=io.StringIO())
    source = tmp_path / "servers.json"
    source.write_text(json.dumps({"mcpServers": {"gh": {"command": "gh-mcp", "env": {"GH_TOKEN": "ghp_x"}}}}))
    call_command("import_config", str(source), stdout=io.StringIO())
    token, added = only(AuditAction.TOKEN_CREATE), only(AuditAction.SERVER_ADD)
    assert (token.actor, token.object, token.after["role"], token.after["views"]) == (
        "system",
        "cli",
        "admin",
        [],
    )
    assert (added.actor, added.object, added.after) == (
        "system",
        "gh",
        {"command": "gh-mcp", "env": {"GH_TOKEN": "********"}},
    )


def test_it_writes_no_audit_row_for_a_call(agenvoy_home):
    """A call is not a change of what the console trusts: the history has it, the audit not."""
    server = Server.objects.create(name="srv", state="connected", transport="stdio")
    Tool.objects.create(server=server, tool_name="t", registered_name="mcp__srv__t")
    token, _ = ApiToken.issue("agent")
    for _ in range(3):
        calls.create(token, "", "mcp__srv__t", {"x": 1}, "s-1", "confirm")
    assert not AuditEntry.objects.exists()


# --- retention (SPEC 22.2: kept AGENVOY_AUDIT_DAYS, pruned as 18.1 prunes calls) -------------------


def aged(days: float, action: str = AuditAction.TOKEN_CREATE) -> AuditEntry:
    entry = audit.record(action, "t", actor="op")
    AuditEntry.objects.filter(pk=entry.pk).update(at=timezone.now() - days * DAY)
    return entry


def test_it_prunes_audit_rows_past_the_audit_days_in_batches(settings):
    assert settings.AGENVOY_AUDIT_DAYS == 400
    old, kept = aged(401), aged(399)
    AuditEntry.objects.bulk_create(
        AuditEntry(at=timezone.now() - 500 * DAY, actor="op", action="token.create", object="t")
        for _ in range(1200)
    )
    cutoff = retention.audit_cutoff(timezone.now())
    assert [retention.delete_audit_batch(cutoff, 1000).audit for _ in range(3)] == [1000, 201, 0]
    assert set(AuditEntry.objects.values_list("id", flat=True)) == {kept.id}
    aged(450)
    done = retention.prune()
    assert done.audit == 1 and not AuditEntry.objects.filter(id=old.id).exists()


def test_it_keeps_every_audit_row_when_the_audit_days_are_0(settings):
    settings.AGENVOY_AUDIT_DAYS = 0
    ancient = aged(5000)
    assert retention.prune().audit == 0 and AuditEntry.objects.filter(id=ancient.id).exists()


def test_it_follows_the_audit_days_it_is_given(settings):
    settings.AGENVOY_AUDIT_DAYS = 7
    gone, kept = aged(8), aged(6)
    assert retention.prune().audit == 1
    assert list(AuditEntry.objects.values_list("id", flat=True)) == [kept.id] and gone.id != kept.id


def test_it_never_stores_a_secret_in_any_row(api, agenvoy_home, client, django_user_model):
    """Every door that handles a secret (server env, headers, an OAuth client secret, tokens,
    webhook secrets, OAuth tokens, an edit on disk) and every row it leaves, searched."""
    secrets = ["env-S1", "hdr-S2", "cs-S3", "env-S4", "disk-S5", "at-S6", "rt-S7"]
    server = {
        "url": "https://m.example/mcp",
        "env": {"KEY": secrets[0]},
        "headers": {"X-Key": secrets[1]},
        "oauth": {"client_id": "c", "client_secret": secrets[2]},
    }
    assert api.post("/v1/mcp", {"name": "m", "server": server}).status_code == 200
    assert (
        api.post("/v1/mcp", {"name": "m", "server": {**server, "env": {"KEY": secrets[3]}}}).status_code
        == 200
    )
    assert api.post("/v1/mcp/remove", {"name": "m"}).status_code == 200
    mcp_json = json.loads((agenvoy_home / "mcp.json").read_text())
    mcp_json["servers"]["disk"] = {"command": "x", "env": {"TOKEN": secrets[4]}}
    (agenvoy_home / "mcp.json").write_text(json.dumps(mcp_json))
    files.sync_servers()
    upstream.store_tokens(
        "disk", "https://d/mcp", {"access_token": secrets[5], "refresh_token": secrets[6]}, "op"
    )
    upstream.forget("disk")
    client.force_login(django_user_model.objects.create_user("op"))
    html = client.post("/tokens/create/", {"name": "new"}).content.decode()
    secrets.append(html.split('id="new-token">')[1].split("<")[0])
    html = client.post(
        "/notifications/", {"kind": "webhook", "url": "https://hooks.example/a"}
    ).content.decode()
    secrets.append("whsec_" + html.split("whsec_")[1].split("<")[0])
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"server.add", "server.edit", "server.remove", "server.authorize", "server.forget"} <= actions
    assert {"token.create", "notify.add"} <= actions
    text = json.dumps(list(AuditEntry.objects.values()), default=str)
    assert [s for s in secrets if s in text] == [] and secrets[-2].startswith("agv_")
