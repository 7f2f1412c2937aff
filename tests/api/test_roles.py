"""SPEC 12 (issue 10): token roles. The party that asks may not answer.

The rights walk goes over every `/v1` route in the URL resolver and every method its view
takes, and checks each role's answer against EXPECT below, written from the table of SPEC 12.1:
a route added later without a rule there fails this file."""

import datetime
import json
import re
import uuid
from collections import Counter

import httpx2
import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from mcpcore import calls
from mcpcore.api import auth
from mcpcore.calls import questions
from mcpcore.models import ApiToken, Server, SessionAllowance, Tool, ToolCall
from tests.live import at_once, our_server

ROLES = ("agent", "approver", "admin")
OK = (200, None)


def denied(what: str) -> tuple[int, str]:
    return 403, f"this token may not {what}"


def same(answer) -> dict:
    return {role: answer for role in ROLES}


def admin_only(what: str, admin=OK) -> dict:
    return {"agent": denied(what), "approver": denied(what), "admin": admin}


# (URL name, method) -> role -> (status, error or None), for a request by a token that did not
# make the call in the URL (`other`'s pending call), with the bodies of BODIES.
EXPECT: dict[tuple[str, str], dict] = {
    ("api-mcp-tools", "GET"): same(OK),
    ("api-mcp-status", "GET"): same(OK),
    ("api-mcp-instructions", "GET"): same(OK),
    ("api-allowlist", "GET"): same(OK),
    ("api-rules", "GET"): same(OK),
    ("api-mcp-call", "POST"): same((400, "name is required")),
    ("api-mcp-call-detail", "GET"): {"agent": (404, "call not found"), "approver": OK, "admin": OK},
    ("api-mcp-call-cancel", "POST"): {
        "agent": (404, "call not found"),
        "approver": denied("cancel other tokens' calls"),
        "admin": OK,
    },
    ("api-pending", "GET"): same(OK),
    ("api-confirm", "POST"): {"agent": denied("reply to confirmations"), "approver": OK, "admin": OK},
    ("api-pending-answer", "POST"): {"agent": denied("reply to confirmations"), "approver": OK, "admin": OK},
    ("api-pending-extend", "POST"): {"agent": denied("reply to confirmations"), "approver": OK, "admin": OK},
    # Each id answered as its own reply (SPEC 24.6): the request itself is 200 for every role.
    ("api-pending-decide", "POST"): same(OK),
    ("api-mcp", "GET"): admin_only("read server configuration"),
    ("api-mcp", "POST"): admin_only("change servers", (400, "name is required")),
    ("api-mcp-remove", "POST"): admin_only("change servers", (404, "server not found")),
    ("api-mcp-reconnect", "POST"): admin_only("reconnect servers", (404, "server not found")),
    ("api-mcp-authorize", "POST"): admin_only("change servers", (404, "server not found")),
    ("api-allowlist", "POST"): admin_only("change the allow-list", (400, "skill or tool is required")),
    ("api-rules", "POST"): admin_only("change rules", None),  # admin: the rules route's own tests
    # Any role may post a hook (a permission prompt of its own); the empty body names no event.
    ("api-hooks-claude-code", "POST"): same((400, "unsupported hook event: ")),
    ("api-calls-export", "GET"): {"agent": denied("export history"), "approver": OK, "admin": OK},
    ("api-audit", "GET"): admin_only("read the audit trail"),
    ("api-grants", "GET"): admin_only("manage apps"),
    ("api-grant-revoke", "POST"): admin_only("manage apps", (404, "grant not found")),  # no grant 1 here
    ("api-views", "GET"): same(OK),
    ("api-views", "POST"): admin_only("change views", (400, "invalid view name: must not be empty")),
    ("api-views-remove", "POST"): admin_only("change views", (404, "view not found")),
    ("api-groups", "GET"): admin_only("change groups"),  # SPEC 23.3
    ("api-groups", "POST"): admin_only("change groups", (400, "invalid group name")),
    ("api-groups-remove", "POST"): admin_only("change groups", (404, "group not found")),
    **{("api-not-found", m): same((404, "not found")) for m in ("GET", "POST", "PUT", "PATCH", "DELETE")},
    **{("api-not-found-any", m): same((404, "not found")) for m in ("GET", "POST", "PUT", "PATCH", "DELETE")},
}
BODIES = {
    "api-mcp-remove": {"name": "nope"},
    "api-mcp-reconnect": {"name": "nope"},
    "api-views-remove": {"name": "nope"},
    "api-groups-remove": {"name": "nope"},
    "api-mcp-authorize": {"name": "nope"},
    "api-confirm": {"approve": False, "reason": "no"},
    "api-pending-answer": {"action": "decline"},
    "api-pending-decide": {"ids": [], "approve": False},
    "api-rules": {"rules": []},
}


def _v1_views(patterns=None, prefix: str = "") -> list[tuple[str, object, str]]:
    """(URL name, view, route) of every pattern under /v1 in the resolver."""
    out = []
    for p in get_resolver().url_patterns if patterns is None else patterns:
        route = str(p.pattern).lstrip("^")
        if isinstance(p, URLResolver):
            out += _v1_views(p.url_patterns, prefix + route)
        elif isinstance(p, URLPattern) and (prefix + route).startswith("v1/"):
            out.append((p.name, p.callback, prefix + route))
    return out


V1_ROUTES = [(name, view, route) for name, view, route in _v1_views() if name != "openapi"]
V1_VIEWS = [(name, view) for name, view, _ in V1_ROUTES]
ROUTE_METHODS = sorted({(name, m) for name, view in V1_VIEWS for m in view.api_methods}, key=str)


def test_it_has_a_rule_and_an_expected_answer_for_every_v1_route_and_method():
    assert len(ROUTE_METHODS) >= 20
    for name, _ in V1_VIEWS:
        assert name, "every /v1 route needs a URL name: the rights table is keyed by it"
    missing_rule = [rm for rm in ROUTE_METHODS if rm not in auth.RIGHTS]
    missing_expectation = [rm for rm in ROUTE_METHODS if rm not in EXPECT]
    assert missing_rule == [], "add these to mcpcore.api.auth.RIGHTS"
    assert missing_expectation == [], "add these to EXPECT (from SPEC 12.1)"


def test_it_documents_each_routes_roles_and_refusals_in_the_openapi_description():
    doc = Client().get("/v1/openapi.json").json()
    for name, view, route in V1_ROUTES:
        if name.startswith("api-not-found"):
            continue
        path = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)
        for method in view.api_methods:
            op = doc["paths"][path][method.lower()]
            assert set(op["x-agenvoy-roles"]) == set(ROLES), (path, method)
            answers = {answer[0] for answer in EXPECT[(name, method)].values() if answer}
            for status in answers - {200}:
                assert str(status) in op["responses"], (path, method, status)
    assert "429" in doc["paths"]["/v1/mcp/call"]["post"]["responses"]


@pytest.fixture
def tokens(db) -> dict[str, tuple[ApiToken, str]]:
    made = {role: ApiToken.issue(f"t-{role}", role=role) for role in ROLES}
    return made | {"other": ApiToken.issue("other", role="agent")}


def make_call(token: ApiToken | None, session_id: str = "s-1", status: str = "pending") -> ToolCall:
    now = timezone.now()
    return ToolCall.objects.create(
        session_id=session_id,
        tool_name="mcp__srv__tool",
        server_name="srv",
        tool="tool",
        token=token,
        status=status,
        confirm_id=uuid.uuid4(),
        created_at=now,
        expires_at=now + datetime.timedelta(minutes=5),
    )


def _path(name: str, call: ToolCall) -> str:
    if name == "api-not-found":
        return "/v1/some/where"
    if name == "api-not-found-any":
        return "/v1/"
    kwargs = {}
    if name in ("api-mcp-call-detail", "api-mcp-call-cancel"):
        kwargs = {"call_id": str(call.id)}
    elif name == "api-confirm":
        kwargs = {"session_id": call.session_id, "confirm_id": str(call.confirm_id)}
    elif name == "api-pending-extend":
        kwargs = {"item_id": str(call.confirm_id)}
    elif name == "api-pending-answer":
        # A question the server of `call` asks (the call left as it is: only the question is
        # the pending item here).
        question = questions.ask(call.id, "srv", "form", "Go on?", {"type": "object", "properties": {}})
        kwargs = {"question_id": str(question.id)}
    elif name == "api-grant-revoke":
        kwargs = {"grant_id": "1"}
    return reverse(name, kwargs=kwargs)


def request(token: str, method: str, path: str, body: dict | None = None):
    client = Client()
    data = json.dumps(body or {}) if method != "GET" else None
    kw = {"content_type": "application/json"} if data is not None else {}
    return getattr(client, method.lower())(path, data, HTTP_AUTHORIZATION=f"Bearer {token}", **kw)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("name, method", ROUTE_METHODS, ids=[f"{m} {n}" for n, m in ROUTE_METHODS])
def test_it_answers_each_role_as_the_rights_table_says_on_every_route(
    tokens, agenvoy_home, role, name, method
):
    call = make_call(tokens["other"][0])
    status, message = EXPECT[(name, method)][role] or (None, None)
    r = request(tokens[role][1], method, _path(name, call), BODIES.get(name))
    assert r["Content-Type"].startswith("application/json")  # the export's JSON Lines too
    if status is None:  # allowed; what the route then answers is its own tests' business
        assert r.status_code not in (401, 403), r.content
        return
    assert r.status_code == status, (role, name, method, r.content)
    if message is not None:
        assert r.json() == {"error": message}
    if status == 403 or (status == 404 and "call" in (message or "")):
        call.refresh_from_db()
        assert call.status == "pending"  # a refused request changed nothing


@pytest.mark.parametrize(
    "who, answer",
    [
        ("agent", (403, "this token may not read metrics")),
        ("approver", (403, "this token may not read metrics")),
        ("admin", (200, None)),
        ("nobody", (401, "authentication required")),
        ("bad", (401, "authentication required")),
    ],
)
def test_it_answers_metrics_to_an_admin_token_only_outside_the_allowed_addresses(tokens, who, answer):
    """`GET /metrics` (SPEC 18.3, 12.1), outside /v1 but under the same rule and answers."""
    headers = {"agent": tokens["agent"][1], "approver": tokens["approver"][1], "admin": tokens["admin"][1]}
    auth_header = {"nobody": {}, "bad": {"HTTP_AUTHORIZATION": "Bearer agv_nope"}}.get(
        who, {"HTTP_AUTHORIZATION": f"Bearer {headers.get(who)}"}
    )
    r = Client().get("/metrics", **auth_header)
    status, message = answer
    assert r.status_code == status, r.content
    if message is None:
        assert r["Content-Type"].startswith("text/plain") and b"agenvoy_pending_confirmations" in r.content
    else:
        assert r.json() == {"error": message}


# --- calls of other tokens ----------------------------------------------------------------------


def test_it_lists_only_an_agents_own_pending_calls(tokens):
    mine = make_call(tokens["agent"][0], "s-a")
    theirs = make_call(tokens["other"][0], "s-b")
    console = make_call(None, "console-op")
    ids = {
        role: {p["call_id"] for p in request(tokens[role][1], "GET", "/v1/pending").json()["pending"]}
        for role in ROLES
    }
    assert ids["agent"] == {str(mine.id)}
    assert ids["approver"] == ids["admin"] == {str(mine.id), str(theirs.id), str(console.id)}


@pytest.mark.parametrize("role", ROLES)
def test_it_lets_every_role_read_wait_on_and_cancel_its_own_call(tokens, role):
    token, secret = tokens[role]
    call = make_call(token)
    r = request(secret, "GET", f"/v1/mcp/calls/{call.id}?wait=0")
    assert r.status_code == 200 and r.json()["status"] == "pending"
    r = request(secret, "POST", f"/v1/mcp/calls/{call.id}/cancel")
    assert r.status_code == 200 and r.json() == {"ok": True}
    call.refresh_from_db()
    assert call.status == "cancelled"


def test_it_answers_an_agent_404_for_another_tokens_call_even_when_it_waits(tokens):
    call = make_call(tokens["other"][0])
    r = request(tokens["agent"][1], "GET", f"/v1/mcp/calls/{call.id}?wait=30")
    assert r.status_code == 404 and r.json() == {"error": "call not found"}


@pytest.mark.parametrize("role", ROLES)
def test_it_refuses_a_reply_to_a_tokens_own_call_whatever_its_role(tokens, role):
    token, secret = tokens[role]
    call = make_call(token)
    for body in ({"approve": True}, {"approve": True, "remember": True}, {"approve": False}, {"abort": True}):
        r = request(secret, "POST", f"/v1/session/s-1/confirm/{call.confirm_id}", body)
        assert r.status_code == 403 and r.json() == {"error": "a token may not reply to its own call"}
    call.refresh_from_db()
    assert call.status == "pending" and call.decided_by == ""


def test_it_answers_a_reply_in_the_order_of_the_spec(tokens):
    agent, approver = tokens["agent"][1], tokens["approver"][1]
    theirs = make_call(tokens["other"][0])
    decided = make_call(tokens["other"][0], status="skipped")
    own_decided = make_call(tokens["agent"][0], status="skipped")
    cases = [
        # Unknown confirmation, or the right one under another session id: 404 for anyone.
        (agent, f"/v1/session/s-1/confirm/{uuid.uuid4()}", 404, "confirmation not found"),
        (agent, "/v1/session/s-1/confirm/not-a-uuid", 404, "confirmation not found"),
        (agent, f"/v1/session/wrong/confirm/{theirs.confirm_id}", 404, "confirmation not found"),
        (approver, f"/v1/session/wrong/confirm/{theirs.confirm_id}", 404, "confirmation not found"),
        # Own call before role, role before 410.
        (
            agent,
            f"/v1/session/s-1/confirm/{own_decided.confirm_id}",
            403,
            "a token may not reply to its own call",
        ),
        (
            agent,
            f"/v1/session/s-1/confirm/{decided.confirm_id}",
            403,
            "this token may not reply to confirmations",
        ),
        (
            approver,
            f"/v1/session/s-1/confirm/{decided.confirm_id}",
            410,
            "confirmation already resolved or expired",
        ),
    ]
    for secret, path, status, message in cases:
        r = request(secret, "POST", path, {"approve": True})
        assert (r.status_code, r.json()) == (status, {"error": message}), path


def test_it_records_an_approvers_reply_as_its_token(tokens):
    call = make_call(tokens["other"][0])
    r = request(
        tokens["approver"][1], "POST", f"/v1/session/s-1/confirm/{call.confirm_id}", {"approve": False}
    )
    assert r.status_code == 200
    call.refresh_from_db()
    assert call.status == "skipped" and call.decided_by == "token:t-approver"


# --- session allowances and limits ------------------------------------------------------------


@pytest.fixture
def echo_tool(db) -> Tool:
    server = Server.objects.create(name="srv", state="connected", transport="stdio")
    return Tool.objects.create(server=server, tool_name="tool", registered_name="mcp__srv__tool")


def test_it_binds_an_allowance_for_the_session_to_the_calls_token(tokens, echo_tool, agenvoy_home):
    first, second = tokens["agent"][0], tokens["other"][0]
    call = calls.create(first, "", "mcp__srv__tool", {}, "shared", "confirm")
    assert call.status == "pending"
    # A person in the browser approves for the session: the allowance belongs to `first`.
    calls.reply("shared", str(call.confirm_id), {"approve": True, "allow_turn": True}, "op")
    allowance = SessionAllowance.objects.get()
    assert allowance.token_id == first.pk and allowance.granted_by == "op"
    assert calls.create(first, "", "mcp__srv__tool", {}, "shared", "confirm").decision == "session"
    other = calls.create(second, "", "mcp__srv__tool", {}, "shared", "confirm")
    assert other.status == "pending"
    assert calls.create(None, "op", "mcp__srv__tool", {}, "shared", "confirm").status == "pending"


def test_it_refuses_more_pending_calls_than_allowed_per_token(tokens, echo_tool, agenvoy_home, settings):
    settings.AGENVOY_MAX_PENDING = 3
    agent, secret = tokens["agent"]
    body = {"name": "mcp__srv__tool", "wait": 0}
    for _ in range(3):
        assert request(secret, "POST", "/v1/mcp/call", body).status_code == 202
    r = request(secret, "POST", "/v1/mcp/call", body)
    assert r.status_code == 429 and r.json() == {"error": "too many pending confirmations for this token"}
    assert ToolCall.objects.filter(token=agent).count() == 3
    # Another token has its own limit; calls that run at once are not limited.
    assert request(tokens["other"][1], "POST", "/v1/mcp/call", body).status_code == 202
    r = request(secret, "POST", "/v1/mcp/call", {**body, "mode": "auto"})
    assert r.status_code != 429


# --- revocation -------------------------------------------------------------------------------


def test_it_cancels_the_pending_calls_and_allowances_of_a_revoked_token(tokens, signed_in):
    agent, secret = tokens["agent"]
    pending = [make_call(agent, f"s-{i}") for i in range(3)]
    theirs = make_call(tokens["other"][0])
    SessionAllowance.objects.create(session_id="s-0", token=agent, granted_by="op")
    kept = SessionAllowance.objects.create(session_id="s-0", token=tokens["other"][0], granted_by="op")
    r = signed_in.post(f"/tokens/{agent.pk}/revoke/")
    assert r.status_code == 302
    for call in pending:
        call.refresh_from_db()
        assert (call.status, call.result) == ("cancelled", "token revoked")
    theirs.refresh_from_db()
    assert theirs.status == "pending"
    assert list(SessionAllowance.objects.filter(revoked_at__isnull=True)) == [kept]
    r = request(secret, "GET", "/v1/pending")
    assert r.status_code == 401 and r.json() == {"error": "authentication required"}


@pytest.fixture
def signed_in(db, django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_user("op", password="pw-123456789"))
    return client


def test_it_shows_the_role_select_and_each_tokens_role_on_the_tokens_page(signed_in, tokens):
    html = signed_in.get("/tokens/").content.decode()
    assert '<select name="role"' in html
    for value, label in (("agent", "Agent"), ("approver", "Approver"), ("admin", "Admin")):
        assert f'<option value="{value}"' in html and f">{label}</option>" in html
        assert f'role-{value}" data-label="Role">{label}</td>' in html
    checkbox = re.search(r'<input type="checkbox" name="may_auto"[^>]*>', html).group(0)
    assert "checked" not in checkbox  # SPEC 12.2: unticked by default
    signed_in.post("/tokens/create/", {"name": "ap", "role": "approver", "may_auto": "on"})
    assert ApiToken.objects.get(name="ap").role == "approver"
    signed_in.post("/tokens/create/", {"name": "plain"})
    assert ApiToken.objects.get(name="plain").role == "agent"
    r = signed_in.post("/tokens/create/", {"name": "root", "role": "root"})
    assert r.status_code == 400 and not ApiToken.objects.filter(name="root").exists()


def test_it_authenticates_a_bearer_header_value_for_other_endpoints(tokens):
    token, secret = tokens["approver"]
    assert auth.authenticate(f"Bearer {secret}") == token
    assert auth.authenticate(f"bearer  {secret} ") == token
    for value in ("", "Bearer", f"Basic {secret}", secret, f"Bearer {token.token_hash}"):
        assert auth.authenticate(value) is None
    calls.revoke_token(token.pk)
    assert auth.authenticate(f"Bearer {secret}") is None


@pytest.mark.live
def test_it_holds_no_more_than_the_limit_when_a_tokens_calls_arrive_at_once(console):
    """The limit under 24 requests sent at the same moment to `serve` (SQLite: its single
    writer counts one call after the other; the scale-out suite checks PostgreSQL across two
    web processes)."""
    c = console({"echo": our_server("echo.py")}, {"AGENVOY_MAX_PENDING": "4"})
    c.wait_connected("echo")
    first = c.client_for("agent", "racing")
    bearer = {"Authorization": first.headers["Authorization"]}
    agents = [first] + [httpx2.Client(base_url=c.url, timeout=60, headers=bearer) for _ in range(23)]
    body = {"name": "mcp__echo__echo", "arguments": {"text": "x"}, "mode": "confirm", "wait": 0}
    answers = [r.status_code for r in at_once(agents, body)]
    assert Counter(answers) == {202: 4, 429: 20}
    assert len(agents[0].get("/v1/pending").json()["pending"]) == 4
    for a in agents:
        a.close()


# --- the doors of issue 21: hooks, one-tap links, grants ------------------------------------------


def test_it_lets_no_agent_token_decide_through_the_doors_of_issue_21(tokens, echo_tool, agenvoy_home):
    agent, secret = tokens["agent"]
    call = make_call(tokens["other"][0])
    # A hook posts a prompt of its own: whatever its body claims, nothing is decided but by a person.
    body = {
        "hook_event_name": "PermissionRequest",
        "session_id": "s-1",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}},
        "decision": "approve",
    }
    r = Client().post(
        "/v1/hooks/claude-code?wait=1",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert (r.status_code, r.json()) == (200, {})
    assert ToolCall.objects.get(token=agent).status == "cancelled"
    # The pages need a session, whatever bearer token comes along.
    r = Client().post(
        f"/pending/{call.confirm_id}/reply/",
        {"session_id": "s-1", "action": "hour"},
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert r.status_code == 302 and r["Location"].startswith("/login/")
    # An API token is no action token.
    for path in (f"/a/{secret}", f"/a/{call.confirm_id.hex}a1.{secret}"):
        r = Client().post(path, HTTP_AUTHORIZATION=f"Bearer {secret}")
        assert r.status_code == 410
    # A grant through a reply: refused like any reply of an agent.
    r = request(
        secret, "POST", f"/v1/session/s-1/confirm/{call.confirm_id}", {"approve": True, "remember_for": 3600}
    )
    assert (r.status_code, r.json()) == (403, {"error": "this token may not reply to confirmations"})
    call.refresh_from_db()
    assert call.status == "pending"
