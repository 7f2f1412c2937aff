"""People's roles in the browser (SPEC 23.1): a walk of every route the URL resolver knows, for
each role, GET and POST, against EXPECT below (written from SPEC 23.1 and 12.1's texts); each
refused post changes nothing (every table and file the pages write, compared before and after).
A route added later without a rule in `mcpcore.web.roles.PAGES` fails here."""

import json
import re

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from mcpcore import control
from mcpcore.calls import questions
from mcpcore.choices import PersonRole
from mcpcore.models import (
    AllowEntry,
    ApiToken,
    AuditEntry,
    Group,
    NotificationTarget,
    PermissionGrant,
    Person,
    Question,
    RuleLine,
    Server,
    SessionAllowance,
    ToolCall,
    View,
)
from mcpcore.web import roles
from mcpcore.web.consumers import LiveConsumer
from tests.rows import make_call

A, P, V = "admin", "approver", "viewer"
ROLES = (A, P, V)
ALL, DECIDE, ADMIN = {A, P, V}, {A, P}, {A}

# URL name -> (who may GET, who may POST, the `<what>` of a refusal), from SPEC 23.1: approvers
# see Pending (with buttons), History, Servers, Rules and Views read-only, Account; viewers the
# same without any button; the rest is the admin's.
EXPECT: dict[str, tuple[set, set, str]] = {
    "servers": (ALL, ALL, ""),
    "server-detail": (ALL, ALL, ""),
    **{
        n: (ADMIN, ADMIN, "change servers")
        for n in (
            "server-add",
            "server-example",
            "server-import",
            "server-edit",
            "server-remove",
            "server-enable",
            "server-disable",
            "server-authorize",
            "server-forget",
            "oauth-callback",
        )
    },
    "server-reconnect": (ADMIN, ADMIN, "reconnect servers"),
    "server-reconnect-all": (ADMIN, ADMIN, "reconnect servers"),
    "server-trust": (ADMIN, ADMIN, "change the allow-list"),
    "tool-try": (ADMIN, ADMIN, "call tools"),
    "tool-try-form": (ADMIN, ADMIN, "call tools"),
    "pending": (ALL, ALL, ""),
    "pending-feed": (ALL, ALL, ""),
    "pending-detail": (ALL, ALL, ""),
    "pending-reply": (ALL, DECIDE, "reply to confirmations"),
    "pending-answer": (ALL, DECIDE, "reply to confirmations"),
    "pending-extend": (ALL, DECIDE, "reply to confirmations"),
    "pending-edit": (ALL, DECIDE, "reply to confirmations"),
    "pending-decide": (ALL, DECIDE, "reply to confirmations"),
    "allowance-revoke": (ALL, DECIDE, "reply to confirmations"),
    "history": (ALL, ALL, ""),
    "call-detail": (ALL, ALL, ""),
    "rules": (ALL, ADMIN, "change rules"),
    "views": (ALL, ADMIN, "change views"),
    "view-remove": (ADMIN, ADMIN, "change views"),
    **{
        n: (ADMIN, ADMIN, "manage tokens") for n in ("tokens", "token-create", "token-revoke", "grant-revoke")
    },
    "app-revoke": (ADMIN, ADMIN, "manage apps"),
    "app-allow": (ADMIN, ADMIN, "manage apps"),
    **{
        n: (ADMIN, ADMIN, "manage notifications")
        for n in ("notifications", "notification-test", "notification-remove")
    },
    "audit": (ADMIN, ADMIN, "read the audit trail"),
    **{
        n: (ADMIN, ADMIN, "manage people")
        for n in (
            "people",
            "person-add",
            "person-edit",
            "person-active",
            "group-add",
            "group-edit",
            "group-remove",
        )
    },
    **{
        n: (ALL, ALL, "")
        for n in (
            "account",
            "session-sign-out",
            "login",
            "logout",
            "set-password",
            "one-tap",
            "well-known-not-found",
            "favicon",
            "metrics",
        )
    },
}


def _routes(patterns=None, prefix: str = "") -> list[tuple[str, str]]:
    """(URL name, route) of every pattern the resolver knows, at any depth."""
    out = []
    for p in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(p.pattern).lstrip("^")
        if isinstance(p, URLResolver):
            out += _routes(p.url_patterns, route)
        elif isinstance(p, URLPattern):
            out.append((p.name, route))
    return out


# Everything but /v1 (its tokens' own walk: tests/api/test_roles.py) and allauth's pages of the
# person's own account under accounts/ (open to every role, as the Account page is).
WALKED = sorted({name for name, route in _routes() if not route.startswith(("v1/", "accounts/"))})


def test_it_has_a_rule_for_every_route_and_no_rule_for_a_route_that_is_gone():
    assert [n for n in WALKED if n not in roles.PAGES] == []
    assert sorted(set(roles.PAGES) - set(WALKED)) == []
    assert sorted(EXPECT) == WALKED
    assert "people" in WALKED and "pending-reply" in WALKED and "set-password" in WALKED


@pytest.fixture
def world(every, agenvoy_home):
    """One of everything a page's post could change."""
    people = {role: User.objects.create_user(f"p-{role}") for role in ROLES}
    for role in (P, V):
        Person.objects.create(user=people[role], role=role)
    call = make_call()
    token = ApiToken.issue("t1")[0]
    question = questions.ask(call.id, "every", "form", "Go on?", {"type": "object", "properties": {}})
    allowance = SessionAllowance.objects.create(session_id="sess-9", token=token, granted_by="x")
    grant = PermissionGrant.objects.create(token=token, tool_name="Bash", granted_by="x")
    target = NotificationTarget.objects.create(kind="webhook", url="https://example.invalid/h", secret="s")
    View.objects.create(name="v1", include=["mcp__every__*"])
    Group.objects.create(name="ops").people.add(people[V])
    (agenvoy_home / "rules").write_text("deny mcp__every__add\n")
    ids = {
        "token-revoke": token.pk,
        "grant-revoke": grant.pk,
        "allowance-revoke": allowance.pk,
        "notification-test": target.pk,
        "notification-remove": target.pk,
        "person-edit": people[A].pk,
        "person-active": people[A].pk,
    }
    return {"people": people, "call": call, "question": question, "ids": ids, "home": agenvoy_home}


def _path(name: str, world: dict) -> str:
    route = dict(_routes())[name] if name != "well-known-not-found" else ""
    if name == "well-known-not-found":
        return "/.well-known/openid-configuration"
    call = world["call"]
    values = {
        "name": "ops" if name.startswith("group-") else "every",
        "pk": world["ids"].get(name, 999),
        "confirm_id": call.confirm_id,
        "question_id": world["question"].id,
        "item_id": call.confirm_id,
        "call_id": call.id,
        "token": "x",
        "uidb64": "x",
    }
    kwargs = {key: values[key] for key in re.findall(r"<(?:\w+:)?(\w+)>", route)}
    return reverse(name, kwargs=kwargs)


# What a refused post would have changed, had it gone through.
FORM = {
    "name": "every",
    "rules": "allow *",
    "include": "mcp__every__*",
    "tools": ["echo"],
    "all": "on",
    "role": "admin",
    "groups": "ops",
    "people": "p-admin",
    "active": "0",
    "username": "someone",
    "action": "approve",
    "session_id": "sess-1",
    "kind": "webhook",
    "url": "https://example.invalid/other",
    "config": '{"command": "true"}',
    "transport": "stdio",
    "command": "true",
}


def state(home) -> tuple:
    """Every row and file a page's post writes."""
    rows = (
        list(Server.objects.order_by("name").values_list("name", "enabled", "config")),
        list(AllowEntry.objects.values_list("entry", flat=True)),
        list(RuleLine.objects.values_list("text", flat=True)),
        list(View.objects.values_list("name", "include")),
        list(ApiToken.objects.order_by("pk").values_list("name", "revoked_at")),
        list(NotificationTarget.objects.values_list("pk", "url")),
        list(Person.objects.order_by("pk").values_list("user__username", "role")),
        list(Group.objects.values_list("name", "people__username", "escalate_to")),
        list(User.objects.order_by("pk").values_list("username", "is_active")),
        list(ToolCall.objects.order_by("pk").values_list("id", "status", "expires_at", "arguments")),
        list(Question.objects.values_list("id", "status")),
        list(SessionAllowance.objects.values_list("pk", "revoked_at")),
        list(PermissionGrant.objects.values_list("pk", "revoked_at")),
        AuditEntry.objects.count(),
    )
    files = tuple(
        (home / f).read_text() if (home / f).exists() else None for f in ("mcp.json", "allow_tool", "rules")
    )
    return rows, files


@pytest.mark.django_db
@pytest.mark.parametrize("name", WALKED)
@pytest.mark.parametrize("role", ROLES)
def test_it_answers_each_role_as_spec_23_1_says_on_every_route(world, client, role, name):
    client.force_login(world["people"][role])
    path = _path(name, world)
    may_get, may_post, what = EXPECT[name]
    for method, allowed in (("get", role in may_get), ("post", role in may_post)):
        before = state(world["home"])
        # a batch's ids (SPEC 24.6) and changed arguments (24.5) name the pending call
        form = {**FORM, "ids": [world["call"].confirm_id], "arguments": '{"x": 1}'}
        r = getattr(client, method)(path, form if method == "post" else None)
        page = r.content.decode(errors="replace")
        if allowed:
            assert "may not" not in page or r.status_code != 403, (method, path, page[:300])
            continue
        assert r.status_code == 403, (method, path, r.status_code)
        assert f"Your role ({role}) may not {what}." in page
        assert state(world["home"]) == before, (method, path)


# --- what each role is offered --------------------------------------------------------------------


NAV = (
    "Servers",
    "Pending",
    "History",
    "Rules",
    "Views",
    "Tokens",
    "Notifications",
    "Audit",
    "People",
    "Account",
)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "role, shown",
    [
        (A, NAV),
        (P, ("Servers", "Pending", "History", "Rules", "Views", "Account")),
        (V, ("Servers", "Pending", "History", "Rules", "Views", "Account")),
    ],
)
def test_it_shows_in_the_navigation_only_the_links_the_role_may_use(world, client, role, shown):
    client.force_login(world["people"][role])
    html = client.get("/history/").content.decode()
    nav = re.search(r'<nav aria-label="Main">(.*?)</nav>', html, re.S).group(1)
    links = tuple(
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", a)).strip().split(" ")[0]
        for a in re.findall(r"<a [^>]*>.*?</a>", nav, re.S)
    )
    assert links == shown


@pytest.mark.django_db
@pytest.mark.parametrize("role, buttons", [(A, True), (P, True), (V, False)])
def test_it_shows_a_viewer_every_pending_item_without_its_buttons(world, client, role, buttons):
    client.force_login(world["people"][role])
    html = client.get("/pending/").content.decode()
    assert f'id="pending-{world["call"].confirm_id}"' in html and "Go on?" in html
    assert ('value="approve"' in html) is buttons and (">Deny</button>" in html) is buttons
    assert ('value="accept"' in html) is buttons  # the server's question's Submit
    detail = client.get(f"/pending/{world['call'].confirm_id}/").content.decode()
    assert ('value="approve"' in detail) is buttons


@pytest.mark.django_db
@pytest.mark.parametrize("role", [P, V])
def test_it_shows_servers_rules_and_views_read_only_below_admin(world, client, role):
    client.force_login(world["people"][role])
    servers = client.get("/").content.decode()
    assert "every" in servers and "Add server" not in servers and "Reconnect" not in servers
    detail = client.get("/servers/every/").content.decode()
    assert "echo" in detail and "Remove server" not in detail and ">Save</button>" not in detail
    assert "Try it" not in detail
    rules_page = client.get("/rules/").content.decode()
    assert "mcp__every__add" in rules_page and 'id="rules-editor"' not in rules_page
    views_page = client.get("/views/").content.decode()
    assert "v1" in views_page and 'id="view-editor"' not in views_page


# --- the live socket --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_pushes_a_viewer_the_pending_list_without_buttons(agenvoy_home):
    call = await sync_to_async(make_call)()

    async def socket_of(role: str) -> WebsocketCommunicator:
        user = await sync_to_async(User.objects.create_user)(f"ws-{role}")
        await Person.objects.acreate(user=user, role=role)
        comm = WebsocketCommunicator(LiveConsumer.as_asgi(), "/ws/live/?page=pending")
        comm.scope["user"] = user
        connected, _ = await comm.connect()
        assert connected
        return comm

    viewer, approver = await socket_of(PersonRole.VIEWER), await socket_of(PersonRole.APPROVER)
    await control.asend_group(control.PENDING, {"type": "pending.changed", "call_id": str(call.id)})
    seen, decides = await viewer.receive_from(timeout=5), await approver.receive_from(timeout=5)
    assert (
        f"pending-{call.confirm_id}" in seen and 'value="approve"' not in seen and "pending-reply" not in seen
    )
    assert 'value="approve"' in decides
    # The socket only listens: whatever a viewer's browser sends decides nothing.
    await viewer.send_to(text_data=json.dumps({"action": "approve", "confirm_id": str(call.confirm_id)}))
    await viewer.disconnect()
    await approver.disconnect()
    assert (await ToolCall.objects.aget(pk=call.pk)).status == "pending"


@pytest.mark.django_db
def test_it_refuses_a_viewers_reply_through_the_pending_page_and_changes_nothing(world, client):
    client.force_login(world["people"][V])
    call = world["call"]
    r = client.post(
        f"/pending/{call.confirm_id}/reply/", {"session_id": call.session_id, "action": "approve"}
    )
    assert r.status_code == 403 and "Your role (viewer) may not reply to confirmations." in r.content.decode()
    call.refresh_from_db()
    assert call.status == "pending"
    client.force_login(world["people"][P])
    r = client.post(
        f"/pending/{call.confirm_id}/reply/", {"session_id": call.session_id, "action": "approve"}
    )
    assert r.status_code == 302
    call.refresh_from_db()
    assert call.status != "pending"


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_it_closes_a_persons_live_socket_when_their_role_changes(agenvoy_home):
    """The socket reads the role when it opens: a role changed on the People page closes the
    person's sockets, and the browser opens them again with the new one."""
    from tests.web.test_live import _signed_in_browser, _socket_of

    browser = await _signed_in_browser("ws-demoted")
    user = await User.objects.aget(username="ws-demoted")
    await Person.objects.acreate(user=user, role=PersonRole.APPROVER)
    comm, connected = await _socket_of(browser)
    assert connected
    boss = await sync_to_async(User.objects.create_user)("ws-boss")
    admin = Client()
    await sync_to_async(admin.force_login)(boss)
    r = await sync_to_async(admin.post)(f"/people/{user.pk}/edit/", {"role": "viewer", "groups": ""})
    assert r.status_code == 302
    assert (await comm.receive_output(timeout=5))["type"] == "websocket.close"
    await comm.wait()
