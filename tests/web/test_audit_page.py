"""SPEC 22.2 (issue 32), the browser door: the Audit page (filters by action, actor and time,
newest first, keyset pages, htmx fragment, read only), and every change a person makes on the
pages recorded as theirs (their username, the browser's address) with its before and after."""

import datetime
import json
import re

from django.utils import timezone

from mcpcore import audit, calls
from mcpcore.choices import AuditAction
from mcpcore.models import ApiToken, AuditEntry, NotificationTarget, PermissionGrant, SessionAllowance
from mcpcore.oauth import upstream
from mcpcore.web.display import PAGE_SIZE

ME = ("op", "127.0.0.1")  # the test client's address


def recorded(action: str) -> AuditEntry:
    found = list(AuditEntry.objects.filter(action=action).order_by("id"))
    assert found, (
        f"no {action} row; rows: {list(AuditEntry.objects.values_list('action', 'object', 'actor'))}"
    )
    entry = found[-1]
    assert (entry.actor, entry.address) == ME, (entry.actor, entry.address)
    return entry


def fill(n: int, start: datetime.datetime, **fields) -> None:
    AuditEntry.objects.bulk_create(
        AuditEntry(
            at=start + datetime.timedelta(seconds=i),
            actor=fields.get("actor", "op"),
            action=fields.get("action", AuditAction.TOKEN_CREATE),
            object=f"obj-{i}",
        )
        for i in range(n)
    )


# --- the page -------------------------------------------------------------------------------------


def test_it_links_the_audit_page_from_the_navigation(signed_in):
    html = signed_in.get("/audit/").content.decode()
    assert '<a href="/audit/" aria-current="page">Audit</a>' in html
    assert "No changes yet." in html and "kept 400 days" in html


def test_it_shows_each_change_newest_first_with_who_where_and_before_and_after(signed_in):
    audit.record(
        AuditAction.VIEW_ADD, "docs", actor=audit.Actor("op", "192.0.2.8"), after={"include": ["mcp__a__*"]}
    )
    audit.record(AuditAction.VIEW_REMOVE, "docs", actor="cli", before={"include": ["mcp__a__*"]})
    html = signed_in.get("/audit/").content.decode()
    rows = re.findall(r'<tr id="audit-(\d+)">(.*?)</tr>', html, re.S)
    assert [r[1].split("</td>")[1].strip() for r in rows] == [
        '<td class="nowrap" data-label="Action">view.remove',
        '<td class="nowrap" data-label="Action">view.add',
    ]
    assert "192.0.2.8" in rows[1][1] and "cli" in rows[0][1]
    assert "<summary>after</summary><pre>{\n  &quot;include&quot;: [\n    &quot;mcp__a__*&quot;" in rows[1][1]


def test_it_filters_by_action_actor_and_time(signed_in):
    start = timezone.now().replace(microsecond=0) - datetime.timedelta(days=2)
    fill(3, start, action=AuditAction.VIEW_ADD, actor="alice")
    fill(2, start + datetime.timedelta(hours=1), action=AuditAction.TOKEN_REVOKE, actor="bob")

    def shown(query: str) -> int:
        return signed_in.get(f"/audit/?{query}").content.decode().count('<tr id="audit-')

    assert shown("") == 5
    assert shown("action=view.add") == 3 and shown("actor=bob") == 2 and shown("actor=nobody") == 0
    assert shown("action=view.add&actor=bob") == 0
    since = (start + datetime.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S")
    until = (start + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    assert shown(f"since={since}") == 4 and shown(f"since={since}&until={until}") == 2
    assert "No changes match." in signed_in.get("/audit/?actor=nobody").content.decode()


def test_it_pages_newest_first_by_keyset_without_javascript(signed_in):
    fill(PAGE_SIZE * 2 + 5, timezone.now() - datetime.timedelta(days=1))
    first = signed_in.get("/audit/").content.decode()
    older = re.search(r'href="/audit/\?before=([^"]+)"', first).group(1)
    second = signed_in.get(f"/audit/?before={older}").content.decode()
    objects = lambda html: re.findall(r'<td class="tool-name" data-label="Object">(obj-\d+)</td>', html)  # noqa: E731
    assert objects(first)[:2] == [f"obj-{PAGE_SIZE * 2 + 4}", f"obj-{PAGE_SIZE * 2 + 3}"]
    assert objects(second)[0] == f"obj-{PAGE_SIZE + 4}" and len(objects(second)) == PAGE_SIZE
    newer = re.search(r'href="/audit/\?after=([^"]+)"', second).group(1)
    assert objects(signed_in.get(f"/audit/?after={newer}").content.decode()) == objects(first)


def test_it_answers_htmx_with_the_table_alone(signed_in):
    fill(2, timezone.now())
    r = signed_in.get("/audit/?action=token.create", HTTP_HX_REQUEST="true")
    html = r.content.decode()
    assert html.lstrip().startswith('<div id="audit-table">') and '<nav aria-label="Main">' not in html
    assert "HX-Request" in r["Vary"]


def test_it_changes_and_deletes_no_row_through_the_page(signed_in):
    audit.record(AuditAction.TOKEN_CREATE, "t", actor="op")
    for method in ("post", "put", "delete"):
        assert getattr(signed_in, method)("/audit/").status_code == 405
    assert AuditEntry.objects.count() == 1


def test_it_needs_a_signed_in_person(client):
    r = client.get("/audit/")
    assert r.status_code == 302 and r["Location"].startswith("/login/")


# --- what people change on the pages --------------------------------------------------------------


def test_it_records_a_server_added_edited_disabled_and_removed_on_the_pages(signed_in, agenvoy_home):
    signed_in.post(
        "/add-server/", {"name": "fresh", "transport": "stdio", "command": "node", "env": "TOKEN=abc\n"}
    )
    added = recorded(AuditAction.SERVER_ADD)
    assert (added.object, added.before, added.after) == (
        "fresh",
        None,
        {"type": "stdio", "command": "node", "env": {"TOKEN": "********"}},
    )
    signed_in.post(
        "/servers/fresh/edit/",
        {"name": "fresh", "transport": "stdio", "command": "deno", "env": "TOKEN=xyz\n"},
    )
    edit = recorded(AuditAction.SERVER_EDIT)
    assert (edit.before["command"], edit.after["command"], edit.after["env"]) == (
        "node",
        "deno",
        {"TOKEN": "******** (changed)"},
    )
    signed_in.post("/servers/fresh/disable/")
    assert recorded(AuditAction.SERVER_EDIT).after["disabled"] is True
    signed_in.post("/servers/fresh/remove/")
    removed = recorded(AuditAction.SERVER_REMOVE)
    assert (removed.object, removed.before["command"], removed.after) == ("fresh", "deno", None)


def test_it_records_an_import_and_the_example_server(signed_in, agenvoy_home):
    payload = json.dumps({"servers": {"gh": {"command": "gh-mcp", "env": {"GH_TOKEN": "ghp_secret"}}}})
    signed_in.post("/import-servers/", {"confirm": "1", "payload": payload})
    imported = recorded(AuditAction.SERVER_ADD)
    assert (imported.object, imported.after["env"]) == ("gh", {"GH_TOKEN": "********"})
    signed_in.post("/add-example-server/")
    assert recorded(AuditAction.SERVER_ADD).object == "time"


def test_it_records_the_trust_editor_with_the_entries_added_and_removed(signed_in, every):
    signed_in.post("/servers/every/trust/", {"tools": ["mcp__every__echo", "mcp__every__add"]})
    first = recorded(AuditAction.TRUST_CHANGE)
    assert (first.object, first.before, first.after) == (
        "mcp__every__",
        [],
        ["mcp__every__add", "mcp__every__echo"],
    )
    signed_in.post("/servers/every/trust/", {"all": "1"})
    second = recorded(AuditAction.TRUST_CHANGE)
    assert (second.before, second.after) == (["mcp__every__add", "mcp__every__echo"], ["mcp__every__*"])


def test_it_records_the_rules_page(signed_in, agenvoy_home):
    signed_in.post("/rules/", {"rules": "deny mcp__a__x\nask mcp__b__*"})
    signed_in.post("/rules/", {"rules": "ask mcp__b__*"})
    entries = AuditEntry.objects.filter(action=AuditAction.RULES_CHANGE).order_by("id")
    assert [(e.before, e.after) for e in entries] == [
        ([], ["deny mcp__a__x", "ask mcp__b__*"]),
        (["deny mcp__a__x"], []),
    ]
    assert recorded(AuditAction.RULES_CHANGE).object == "rules"


def test_it_records_views_added_edited_and_removed(signed_in, every):
    form = {"name": "docs", "description": "Docs.", "include": "mcp__every__*", "exclude": ""}
    signed_in.post("/views/", form)
    assert recorded(AuditAction.VIEW_ADD).after == {
        "description": "Docs.",
        "include": ["mcp__every__*"],
        "exclude": [],
    }
    signed_in.post("/views/", {**form, "exclude": "mcp__every__add"})
    edit = recorded(AuditAction.VIEW_EDIT)
    assert (edit.before["exclude"], edit.after["exclude"]) == ([], ["mcp__every__add"])
    signed_in.post("/views/", {**form, "exclude": "mcp__every__add"})  # no change: no row
    assert AuditEntry.objects.filter(action=AuditAction.VIEW_EDIT).count() == 1
    signed_in.post("/views/docs/remove/")
    assert recorded(AuditAction.VIEW_REMOVE).before["exclude"] == ["mcp__every__add"]


def test_it_records_a_token_made_and_revoked_with_its_role_and_views_never_its_value(signed_in, every):
    signed_in.post("/views/", {"name": "docs", "description": "", "include": "mcp__every__*", "exclude": ""})
    html = signed_in.post(
        "/tokens/create/", {"name": "ci", "role": "approver", "views": ["docs"]}
    ).content.decode()
    secret = re.search(r'id="new-token">(agv_[^<]+)<', html).group(1)
    made = recorded(AuditAction.TOKEN_CREATE)
    assert (made.object, made.after["role"], made.after["views"], made.after["limited_to_views"]) == (
        "ci",
        "approver",
        ["docs"],
        True,
    )
    row = ApiToken.objects.get(name="ci")
    signed_in.post(f"/tokens/{row.pk}/revoke/")
    revoked = recorded(AuditAction.TOKEN_REVOKE)
    assert (revoked.object, revoked.after["revoked"]) == ("ci", True)
    assert secret not in json.dumps(list(AuditEntry.objects.values()), default=str)


def pending(token: ApiToken, tool: str = "mcp__every__echo", session: str = "s-1"):
    return calls.create(token, "", tool, {"message": "hi"}, session, "confirm")


def test_it_records_allowances_from_the_inbox_for_whom_and_what(signed_in, every):
    token, _ = ApiToken.issue("laptop")
    c = pending(token)
    signed_in.post(f"/pending/{c.confirm_id}/reply/", {"session_id": "s-1", "action": "session"})
    session = recorded(AuditAction.ALLOWANCE_ADD)
    assert (session.object, session.after) == (
        "s-1", {"allowance": "session", "token": "laptop", "session_id": "s-1", "approved_on": "mcp__every__echo"},
    )  # fmt: skip
    c = pending(token, "mcp__every__add", "s-2")
    signed_in.post(f"/pending/{c.confirm_id}/reply/", {"session_id": "s-2", "action": "hour"})
    hour = recorded(AuditAction.ALLOWANCE_ADD)
    assert (hour.object, hour.after["allowance"], hour.after["token"], hour.after["kind"]) == (
        "mcp__every__add", "for a time", "laptop", "tool_confirm",
    )  # fmt: skip
    until = datetime.datetime.fromisoformat(hour.after["until"])
    assert abs((until - timezone.now()).total_seconds() - 3600) < 60
    prompt = calls.create_permission_prompt(token, "Bash", {"command": "ls"}, "cc:s")
    signed_in.post(f"/pending/{prompt.confirm_id}/reply/", {"session_id": "cc:s", "action": "remember"})
    remembered = recorded(AuditAction.ALLOWANCE_ADD)
    assert (remembered.object, remembered.after["allowance"], remembered.after["until"]) == (
        "Bash",
        "remember",
        None,
    )


def test_it_records_approve_and_remember_of_a_tool_as_a_trust_change(signed_in, every):
    token, _ = ApiToken.issue("laptop")
    c = pending(token)
    signed_in.post(f"/pending/{c.confirm_id}/reply/", {"session_id": "s-1", "action": "remember"})
    entry = recorded(AuditAction.TRUST_CHANGE)
    assert (entry.object, entry.before, entry.after) == ("mcp__every__echo", [], ["mcp__every__echo"])
    assert not AuditEntry.objects.filter(action=AuditAction.ALLOWANCE_ADD).exists()


def test_it_records_allowances_and_grants_revoked(signed_in, every):
    token, _ = ApiToken.issue("laptop")
    allowance = SessionAllowance.objects.create(session_id="s-9", token=token)
    signed_in.post(f"/pending/allowances/{allowance.pk}/revoke/")
    ended = recorded(AuditAction.ALLOWANCE_REVOKE)
    assert (ended.object, ended.before["token"], ended.after) == ("s-9", "laptop", None)
    grant = calls.grant(token, "tool_confirm", "mcp__every__echo", "op", 600)
    signed_in.post(f"/tokens/grants/{grant.pk}/revoke/")
    revoked = recorded(AuditAction.ALLOWANCE_REVOKE)
    assert (revoked.object, revoked.before["allowance"], revoked.before["token"]) == (
        "mcp__every__echo",
        "for a time",
        "laptop",
    )
    signed_in.post(f"/tokens/grants/{grant.pk}/revoke/")  # already ended: nothing more
    assert AuditEntry.objects.filter(action=AuditAction.ALLOWANCE_REVOKE).count() == 2
    assert PermissionGrant.objects.get(pk=grant.pk).revoked_at is not None


def test_it_records_notification_targets_added_and_removed_without_the_secret(signed_in):
    html = signed_in.post(
        "/notifications/", {"kind": "webhook", "url": "https://hooks.example/agv?key=k-1"}
    ).content.decode()
    secret = re.search(r"whsec_[A-Za-z0-9+/=]+", html).group(0)
    added = recorded(AuditAction.NOTIFY_ADD)
    assert (added.object, added.after) == (
        "hooks.example",
        {"kind": "webhook", "url": "https://hooks.example/agv", "signed": True},
    )
    target = NotificationTarget.objects.get()
    signed_in.post(f"/notifications/{target.pk}/remove/")
    assert recorded(AuditAction.NOTIFY_REMOVE).before == added.after
    text = json.dumps(list(AuditEntry.objects.values()), default=str)
    assert secret not in text and "k-1" not in text


def test_it_records_forget_authorization(signed_in, every):
    upstream.store_tokens(
        "other", "https://example.invalid/mcp", {"access_token": "at-x", "scope": "read"}, "op", "127.0.0.1"
    )
    signed_in.post("/servers/other/forget-authorization/")
    forgot = recorded(AuditAction.SERVER_FORGET)
    assert (forgot.object, forgot.before["scopes"], forgot.after) == ("other", ["read"], None)
    assert "at-x" not in json.dumps(list(AuditEntry.objects.values()), default=str)
