"""`/v1` views: thin wrappers over the modules that do the work (SPEC 7)."""

import asyncio
import functools
import json
import uuid
from collections.abc import Callable

from django.core.exceptions import RequestDataTooBig
from django.db.models import Count
from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from .. import (
    allowlist,
    audit,
    calls,
    control,
    db,
    files,
    gate,
    retention,
    rules,
    serverconfig,
    toolviewstore,
)
from ..calls import people, questions, routing, traces
from ..choices import CallStatus, TokenRole
from ..db import cache
from ..instructions import instructions_block
from ..models import (
    AppGrant,
    OAuthAccount,
    Prompt,
    Question,
    Resource,
    ResourceTemplate,
    Server,
    Tool,
    ToolCall,
    iso,
    mask_config,
)
from ..oauth import grants, upstream
from ..schemas import (
    AllowEdit,
    AllowQuery,
    AuthorizeBody,
    CallWait,
    ClaudeCodeHook,
    Decide,
    GroupEdit,
    GroupRef,
    InputError,
    ReconnectBody,
    RulesEdit,
    ServerEdit,
    ServerRef,
    ViewEdit,
    ViewRef,
    WaitQuery,
)
from . import claude_hooks
from .auth import ApiError, ApiRequest, _reject_constant, api_view, json_body, reply_refusal, visible_calls


def _file_error(exc: files.ConfigFileError) -> ApiError:
    return ApiError(f"{exc} (fix the file first; it was not changed)", 409)


@api_view(("GET", "POST"))
def mcp_servers(request: ApiRequest) -> JsonResponse:
    if request.method == "GET":
        listing = {s.name: mask_config(s.config) for s in Server.objects.all()}
        return JsonResponse({"servers": listing})
    edit = ServerEdit.check(json_body(request))
    try:
        serverconfig.save(edit.name, edit.server, by=audit.by(request))
    except serverconfig.ServerConfigError as exc:
        raise ApiError(str(exc)) from None
    except files.ConfigFileError as exc:
        raise _file_error(exc) from None
    return JsonResponse({"ok": True})


@api_view(("POST",))
def mcp_remove(request: ApiRequest) -> JsonResponse:
    name = ServerRef.check(json_body(request)).name
    try:
        found = serverconfig.remove(name, audit.by(request))
    except files.ConfigFileError as exc:
        raise _file_error(exc) from None
    if not found:
        raise ApiError("server not found", 404)
    return JsonResponse({"ok": True})


@api_view(("GET", "POST"))
def allowlist_view(request: ApiRequest) -> JsonResponse:
    if request.method == "GET":
        prefix = AllowQuery.check(request.GET.dict()).prefix
        entries = files.current_allow()
        return JsonResponse({"tool": {"entries": allowlist.entries_for(entries, prefix)}})
    edit = AllowEdit.check(json_body(request)).tool
    try:
        now = files.replace_allow_prefix(edit.prefix, edit.entries, by=audit.by(request))
    except files.ConfigFileError as exc:
        raise _file_error(exc) from None
    return JsonResponse({"ok": True, "tool": {"entries": now}})


@api_view(("GET",))
def mcp_tools(request: ApiRequest) -> JsonResponse:
    scope = cache.scope(request.api_token)
    rows = toolviewstore.prefilter(Tool.objects.select_related("server"), scope)
    tools = toolviewstore.narrow(rows.order_by("registered_name"), scope)
    trust = files.trust_states(tools)
    return JsonResponse({"tools": [{**t.to_dict(), "trust": trust[t.registered_name]} for t in tools]})


@api_view(("GET", "POST", "PUT", "PATCH", "DELETE"))
def not_found(request: ApiRequest, rest: str = "") -> JsonResponse:
    raise ApiError("not found", 404)


# --- connections ------------------------------------------------------------------------------


@api_view(("GET",))
def mcp_status(request: ApiRequest) -> JsonResponse:
    rows = Server.objects.annotate(n=Count("tools")).order_by("name")
    accounts = {a.server_name: a for a in OAuthAccount.objects.all()}
    storage = retention.storage()
    storage["oldest"] = iso(storage["oldest"])
    prompts, resources = _listing_counts()
    servers = [
        s.to_status(
            s.n, upstream.status_item(s, accounts.get(s.name)), prompts.get(s.pk, 0), resources.get(s.pk, 0)
        )
        for s in rows
    ]
    seen = _visible_servers(request)
    if seen is not None:  # a token limited to views: its servers, its tools' count
        scope = cache.scope(request.api_token)
        servers = [
            {**s, "tools": seen[s["Name"]], **_held_listings(s, scope)} for s in servers if s["Name"] in seen
        ]
    return JsonResponse({"servers": servers, "storage": storage})


def _listing_counts() -> tuple[dict[int, int], dict[int, int]]:
    """Prompts, and resources with templates, by server id (SPEC 20.1): counted apart, as one
    query joining all three would multiply them."""

    def by_server(model) -> dict[int, int]:
        return dict(
            model.objects.values_list("server_id").annotate(n=Count("id")).values_list("server_id", "n")
        )

    resources = by_server(Resource)
    for server_id, n in by_server(ResourceTemplate).items():
        resources[server_id] = resources.get(server_id, 0) + n
    return by_server(Prompt), resources


def _held_listings(item: dict, scope) -> dict:
    """A view-limited token counts a server's prompts and resources only when one of its
    views holds the server whole (SPEC 20.2); else it sees none of them."""
    if scope is not None and scope.holds_server(item["Name"]):
        return {}
    return {"prompts": 0, "resources": 0}


def _visible_servers(request: ApiRequest) -> dict[str, int] | None:
    """For a token limited to views: the servers with tools in its views, and how many."""
    scope = cache.scope(request.api_token)
    if scope is None:
        return None
    counts: dict[str, int] = {}
    for server, registered in Tool.objects.values_list("server__name", "registered_name"):
        if scope(registered):
            counts[server] = counts.get(server, 0) + 1
    return counts


@api_view(("GET",))
def mcp_instructions(request: ApiRequest) -> JsonResponse:
    pairs = list(Server.objects.filter(enabled=True).values_list("name", "instructions"))
    seen = _visible_servers(request)
    if seen is not None:
        pairs = [(name, text) for name, text in pairs if name in seen]
    return JsonResponse({"text": instructions_block(pairs)})


# --- views (SPEC 19) --------------------------------------------------------------------------


@api_view(("GET", "POST"))
def toolviews_view(request: ApiRequest) -> JsonResponse:
    if request.method == "GET":
        return JsonResponse({"views": toolviewstore.listing(request.api_token)})
    edit = ViewEdit.check(json_body(request))
    view = toolviewstore.save(edit.name, edit.description, edit.include, edit.exclude, audit.by(request))
    return JsonResponse({"ok": True, "view": toolviewstore.to_dict(view, toolviewstore.registered_names())})


@api_view(("POST",))
def toolviews_remove(request: ApiRequest) -> JsonResponse:
    if not toolviewstore.remove(ViewRef.check(json_body(request)).name, audit.by(request)):
        raise ApiError("view not found", 404)
    return JsonResponse({"ok": True})


@api_view(("GET", "POST"))
def groups_view(request: ApiRequest) -> JsonResponse:
    """Groups (SPEC 23.3): list them, or make one or replace its people and escalation."""
    if request.method == "GET":
        return JsonResponse({"groups": people.all_groups()})
    edit = GroupEdit.check(json_body(request))
    try:
        people.save_group(
            edit.name,
            edit.people,
            audit.by(request),
            escalate_to=edit.escalate_to,
            escalate_after_minutes=edit.escalate_after_minutes,
        )
    except people.PeopleError as exc:
        raise ApiError(exc.message, exc.status) from None
    return JsonResponse({"ok": True})


@api_view(("POST",))
def groups_remove(request: ApiRequest) -> JsonResponse:
    try:
        people.remove_group(GroupRef.check(json_body(request)).name, audit.by(request))
    except people.PeopleError as exc:
        raise ApiError(exc.message, exc.status) from None
    return JsonResponse({"ok": True})


@api_view(("POST",))
async def mcp_reconnect(request: ApiRequest) -> JsonResponse:
    outcome = await control.reconnect(ReconnectBody.check(json_body(request)).name)
    if outcome is None:
        raise ApiError("server not found", 404)
    return JsonResponse({"ok": True, "servers": outcome})


@api_view(("POST",))
async def mcp_authorize(request: ApiRequest) -> JsonResponse:
    """Start a person's OAuth flow for a server (SPEC 16.2): the URL to send the browser to."""
    name = AuthorizeBody.check(json_body(request)).name
    problem = await db.run(upstream.authorize_problem, name)
    if problem is not None:
        raise ApiError(*problem)
    try:
        url = await control.authorize(name, f"token:{request.api_token.name}")
    except control.AuthorizeRefused as exc:
        raise ApiError(str(exc), exc.status) from None
    return JsonResponse({"url": url})


# --- calls and the gate -----------------------------------------------------------------------


def _who(request: ApiRequest) -> routing.Replier:
    """The token replying, as the call layer routes it (SPEC 24.1) and records it."""
    return routing.Replier.of_token(request.api_token)


def _create_call(request: ApiRequest) -> ToolCall:
    """`calls.create` for `POST /v1/mcp/call` (`schemas.CallBody`), in the same database
    trip as the auth: `wait` is checked here, first; the call by `calls.create`, as for every
    door."""
    body = json_body(request)
    request.wait_seconds = CallWait.check(body).wait
    return calls.create(
        request.api_token,
        "",
        body.get("name"),
        body.get("arguments"),
        body.get("session_id"),
        body.get("mode"),
        local=calls.local_supervisor(request),
        traceparent=getattr(request, "traceparent", ""),
    )


def _traced(name: str) -> Callable:
    """A `/v1` call route as a server span named `name` when traces are exported (SPEC 27):
    it continues the caller's `traceparent` header, and its context goes with the call
    (`request.traceparent`, read by the route's `prepare`). The route's attributes (its
    methods, for the description and the roles) stay the view's."""

    def wrap(view: Callable) -> Callable:
        @functools.wraps(view)
        async def traced(request: HttpRequest, *args, **kwargs) -> JsonResponse:
            if not traces.ON:
                return await view(request, *args, **kwargs)
            with traces.server_span(name, "tools/call", request.headers):
                request.traceparent = traces.current()  # type: ignore[attr-defined]
                return await view(request, *args, **kwargs)

        return traced

    return wrap


@_traced("POST /v1/mcp/call")
@api_view(("POST",), prepare=_create_call)
async def mcp_call(request: ApiRequest) -> JsonResponse:
    call, wait, local = request.prepared, request.wait_seconds, calls.local_supervisor(request)
    await calls.submit(call, local)
    traces.called(call)
    answered = await _until_gone(request, calls.wait(call, wait, local=local), wait)
    if answered is None:  # the client hung up: the answer goes nowhere (the call goes on)
        return await _left(call.id)
    traces.ended(answered)
    return _answer(answered)


async def _left(call_id) -> JsonResponse:
    """The client hung up on a call still pending: the inbox says its agent stopped waiting
    (the call goes on; the answer goes nowhere)."""
    if await db.write(calls.agent_left, call_id, True):
        await calls.announce(str(call_id))
    return JsonResponse({}, status=202)


def _answer(call, full: bool = False) -> JsonResponse:
    if call.retry_after is not None:  # a limit line refused it just now (SPEC 25.1)
        refused = JsonResponse(
            {"error": gate.limited_error(call.rule), "retry_after": call.retry_after}, status=429
        )
        refused["Retry-After"] = str(call.retry_after)
        return refused
    body = call.to_dict() if full else call.to_answer()
    return JsonResponse(body, status=200 if call.ended or full else 202)


async def _until_gone(request: ApiRequest, waiting, seconds: float):
    """What `calls.wait` gives, cut short when the client has disconnected: nobody is left to
    answer, and a long poll must not hold its channel for nothing (the call goes on)."""
    gone = getattr(request, "client_gone", None)  # set by the ASGI handler; not in test clients
    if gone is None or seconds <= 0:
        return await waiting
    task = asyncio.ensure_future(waiting)
    await asyncio.wait([task, gone], return_when="FIRST_COMPLETED")
    if task.done():
        return task.result()
    task.cancel()
    return None  # the answer goes nowhere


async def _call_answer(request: ApiRequest, call_id, wait: float, full: bool = False) -> JsonResponse:
    call = await calls.get(call_id)
    if call is None:
        raise ApiError("call not found", 404)
    # Only the agent that made the call leaves it or comes back for it: an approver's dashboard
    # polling the call says nothing of the agent.
    own = call.token_id is not None and call.token_id == request.api_token.pk
    if (
        own
        and wait > 0
        and call.agent_left_at is not None
        and await db.write(calls.agent_left, call.id, False)
    ):
        await calls.announce(str(call.id))  # its agent waits on it again
    waited = await _until_gone(request, calls.wait(call, wait, local=calls.local_supervisor(request)), wait)
    if waited is None:
        return await _left(call.id) if own else JsonResponse({}, status=202)
    call = waited
    if not full:
        return _answer(call)

    # The history keeps the questions its servers asked, and their answers (SPEC 20.4).
    asked = await db.run(questions.of_call, call.id, request.api_token.role == TokenRole.AGENT)
    return JsonResponse({**call.to_dict(), "questions": [questions.to_dict(q) for q in asked]})


def _uuid_or_404(value: str, message: str):
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ApiError(message, 404) from None


@api_view(("GET",))
async def mcp_call_detail(request: ApiRequest, call_id: str) -> JsonResponse:
    cid = _uuid_or_404(call_id, "call not found")
    wait = WaitQuery.check(request.GET.dict()).wait
    return await _call_answer(request, cid, wait, full=True)


@api_view(("POST",))
async def mcp_call_cancel(request: ApiRequest, call_id: str) -> JsonResponse:
    cid = _uuid_or_404(call_id, "call not found")
    await calls.stop(cid, calls.local_supervisor(request))
    return JsonResponse({"ok": True})


@api_view(("GET",))
def pending(request: ApiRequest) -> JsonResponse:
    token = request.api_token
    rows = visible_calls(token, ToolCall.objects.filter(status=CallStatus.PENDING)).order_by("created_at")
    items = [(c.created_at, c.to_pending()) for c in rows]
    # A server's question is an item of its own (SPEC 20.4); an agent sees its own calls' only.
    asked = questions.pending_for(token.pk if token.role == TokenRole.AGENT else None)
    items += [(q.created_at, questions.to_pending(q)) for q in asked]
    items.sort(key=lambda pair: pair[0])
    return JsonResponse({"pending": [item for _, item in items]})


@api_view(("POST",))
async def pending_answer(request: ApiRequest, question_id: str) -> JsonResponse:
    """A token's answer to a server's question (SPEC 20.4), refused as replies are (12.1)."""
    body = json_body(request)
    token = request.api_token

    # A guessed question is not listed for tokens (questions.pending_for): people answer it.
    await db.run(questions.answer, question_id, body, _who(request), lambda q: _item_refusal(token, q))
    return JsonResponse({"ok": True})


def _item_refusal(token, item) -> None:
    """A token's refusal for a pending item (SPEC 12.1): a confirmation's call as a reply's, a
    question as an answer's (one filed by guess is the people's: 404 to every token)."""
    if isinstance(item, Question):
        if item.guessed:
            raise ApiError(questions.NOT_FOUND, 404)
        item = item.call
    reply_refusal(token, item)


@api_view(("POST",))
async def pending_extend(request: ApiRequest, item_id: str) -> JsonResponse:
    """Extend a pending confirmation or question (SPEC 24.4)."""
    token = request.api_token
    until = await calls.extend(item_id, _who(request), lambda item: _item_refusal(token, item))
    return JsonResponse({"ok": True, "expires_at": iso(until)})


@api_view(("POST",))
async def pending_decide(request: ApiRequest) -> JsonResponse:
    """Many pending confirmations approved or denied at once (SPEC 24.6), each id refused as
    its own reply would be (12.1)."""
    body = Decide.check(json_body(request))
    token = request.api_token

    def refusal(call: ToolCall) -> str | None:
        try:
            reply_refusal(token, call)
        except ApiError as exc:
            return exc.message
        return None

    results = await calls.decide(
        body.ids,
        body.approve,
        body.reason,
        _who(request),
        refusal,
        local=calls.local_supervisor(request),
        by=audit.by(request),
    )
    return JsonResponse({"results": results})


@api_view(("POST",))
async def confirm(request: ApiRequest, session_id: str, confirm_id: str) -> JsonResponse:
    body = json_body(request)
    token = request.api_token
    await calls.respond(
        session_id,
        confirm_id,
        body,
        _who(request),
        lambda c: reply_refusal(token, c),
        local=calls.local_supervisor(request),
        by=audit.by(request),
    )
    return JsonResponse({"ok": True})


# --- argument rules (SPEC 14.2) ---------------------------------------------------------------


def _rules_body() -> dict:
    found, problem = files.current_rules()
    return {"rules": [r.to_dict() for r in found], "error": problem}


@api_view(("GET", "POST"))
def rules_view(request: ApiRequest) -> JsonResponse:
    if request.method == "GET":
        return JsonResponse(_rules_body())
    lines = RulesEdit.check(json_body(request)).rules
    try:
        files.write_rules(lines, audit.by(request))
    except rules.RuleError as exc:
        raise ApiError(str(exc)) from None
    except files.ConfigFileError as exc:
        raise _file_error(exc) from None
    return JsonResponse({"ok": True, **_rules_body()})


# --- Claude Code's hooks (SPEC 17.1) ------------------------------------------------------------


def _hook_body(request: ApiRequest) -> ClaudeCodeHook:
    """The hook's body as a `ClaudeCodeHook`; its first problem is the 400 (SPEC 17.1 order)."""
    try:
        raw = request.body
    except RequestDataTooBig:
        raise ApiError("request body too large", 413) from None
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise ApiError("body must be a JSON object")
    try:
        return ClaudeCodeHook.check(data)
    except InputError as exc:
        raise ApiError(exc.message) from None


@api_view(("POST",))
async def claude_code_hook(request: ApiRequest) -> JsonResponse:
    """A `PermissionRequest` or `PreToolUse` hook: a permission prompt of this token's, through
    the one call path (rules, grants, allowances, inbox), held until decided or `wait` seconds;
    then the event's JSON. Nobody deciding in time cancels the prompt: Claude Code asks at the
    terminal instead."""
    body = _hook_body(request)
    try:
        wait = claude_hooks.wait_seconds(request.GET.get("wait"))
    except ValueError as exc:
        raise ApiError(str(exc)) from None
    token = request.api_token
    session = body.session_id.strip()
    call = await db.write(
        calls.create_permission_prompt,
        token,
        body.tool_name,
        body.tool_input,
        f"cc:{session or token.name}",
        body.tool_use_id or None,
        via="hook",
        cwd=body.cwd,
    )
    await calls.submit(call)
    ended = await _until_gone(request, calls.wait(call, wait), wait)
    timed_out = False
    if ended is None or not ended.ended:
        # Nobody decided in time (or Claude Code gave up): the prompt leaves the inbox.
        timed_out = await db.run(
            calls.finish, call.id, "cancelled", claude_hooks.timed_out_text(wait), decided_at=timezone.now()
        )
        await calls.announce(str(call.id))
        ended = await calls.get(call.id)
    if ended is None:
        return JsonResponse({})
    return JsonResponse(claude_hooks.answer(body.hook_event_name, ended, wait, timed_out))


# --- apps that sign in (SPEC 21.4) ------------------------------------------------------------


@api_view(("GET",))
def app_grants_list(request: ApiRequest) -> JsonResponse:
    return JsonResponse({"grants": [grants.to_dict(g) for g in grants.live_grants()]})


@api_view(("POST",))
async def app_grant_revoke(request: ApiRequest, grant_id: str) -> JsonResponse:
    """Revoke an app's grant: its tokens stop working at once on every process, and the calls
    it left pending end as `cancelled` (as a revoked token's do, SPEC 12.2)."""
    by = audit.by(request)
    ended = await db.write(_app_grant_revoke, grant_id, by)
    if ended is None:
        raise ApiError("grant not found", 404)
    for call_id in ended:
        await calls.announce(call_id)
    return JsonResponse({"ok": True})


def _app_grant_revoke(grant_id: str, by: audit.Actor) -> list[str] | None:
    grant = (
        AppGrant.objects.select_related("client", "token")
        .filter(pk=int(grant_id), revoked_at__isnull=True)
        .first()
        if grant_id.isdigit() and len(grant_id) < 19  # a row id fits 64 bits; longer is no grant
        else None
    )
    if grant is None:
        return None
    return calls.app_grant_revoke(grant, by)[1]
