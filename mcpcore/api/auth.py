"""Bearer-token auth, the rights of each token role, and JSON plumbing for `/v1` views."""

import asyncio
import functools
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .. import db, schemas
from ..bearer import app_token, authenticate
from ..calls import CallError
from ..choices import TokenRole
from ..models import ApiToken, ToolCall

log = logging.getLogger("mcpcore.api")


class ApiError(Exception):
    """Raised by a view to answer `{"error": message}` with `status`."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


# What a view (or its `prepare`) raises to answer `{"error": message}` with its status: its own
# refusals, the input contract's, and the call path's (`calls.CallError`).
ANSWERS = (ApiError, schemas.InputError, CallError)


class ApiRequest(HttpRequest):
    """A `/v1` request as its view gets it from `api_view`."""

    api_token: ApiToken  # the caller's token (auth passed, its rights checked)
    prepared: Any  # what `api_view(prepare=...)` returned
    wait_seconds: float  # `POST /v1/mcp/call`: how long to wait for the call's end
    client_gone: "asyncio.Future[None]"  # done when the client went away (api.app only)


def error(message: str, status: int) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _token_of(request: HttpRequest) -> ApiToken | None:
    return authenticate(request.headers.get("Authorization", ""))


def _reject_constant(name: str):
    # Python reads NaN and Infinity, which JSON does not have and the database can't store.
    raise ValueError(f"{name} is not JSON")


def json_body(request: HttpRequest) -> dict:
    """The request body as a JSON object; an empty body is `{}`. What the database and the
    MCP servers could not take (lone surrogates, NaN, absurd nesting) is refused here."""
    try:
        raw = request.body
    except RequestDataTooBig:
        raise ApiError("request body too large", 413) from None
    if not raw:
        return {}
    try:
        data = json.loads(raw, parse_constant=_reject_constant)
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError):
        raise ApiError("request body must be valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError("request body must be a JSON object")
    return data


# --- rights (SPEC 12.1) ------------------------------------------------------------------------

AGENT, APPROVER, ADMIN = TokenRole.AGENT, TokenRole.APPROVER, TokenRole.ADMIN
ALL_ROLES = frozenset({AGENT, APPROVER, ADMIN})


@dataclass(frozen=True)
class Right:
    """Who may use one method of one `/v1` route.

    `roles` may use it at all; the others get 403 `this token may not <denied>`. `calls` says
    how the route narrows to calls: `read` and `cancel` (a `call_id` in the URL: an agent sees
    only its own calls, an approver may cancel only its own), `list` (`visible_calls`), `reply`
    (`reply_refusal`, applied after the confirmation is found)."""

    roles: frozenset = ALL_ROLES
    denied: str = ""
    calls: str = ""


ANY = Right()


def admin_only(what: str) -> Right:
    return Right(frozenset({ADMIN}), what)


_ANY_METHOD = ("GET", "POST", "PUT", "PATCH", "DELETE")

# The one table of who may do what, keyed by (URL name, method). A `/v1` route without an
# entry answers 403 to every token (and fails tests/api/test_roles.py): add its rule here.
RIGHTS: dict[tuple[str, str], Right] = {
    ("api-mcp-tools", "GET"): ANY,
    ("api-mcp-status", "GET"): ANY,
    ("api-mcp-instructions", "GET"): ANY,
    ("api-allowlist", "GET"): ANY,
    ("api-rules", "GET"): ANY,
    ("api-mcp-call", "POST"): ANY,
    ("api-mcp-call-detail", "GET"): Right(calls="read"),
    ("api-mcp-call-cancel", "POST"): Right(calls="cancel"),
    ("api-pending", "GET"): Right(calls="list"),
    ("api-confirm", "POST"): Right(calls="reply"),
    ("api-pending-answer", "POST"): Right(calls="reply"),  # a server's question (SPEC 20.4)
    ("api-pending-extend", "POST"): Right(calls="reply"),  # SPEC 24.4: as a reply
    ("api-pending-decide", "POST"): Right(calls="reply"),  # SPEC 24.6: each id as its reply
    ("api-hooks-claude-code", "POST"): ANY,  # a permission prompt of the token's own (SPEC 17.1)
    ("api-views", "GET"): ANY,
    ("api-mcp", "GET"): admin_only("read server configuration"),
    ("api-mcp", "POST"): admin_only("change servers"),
    ("api-mcp-remove", "POST"): admin_only("change servers"),
    ("api-mcp-reconnect", "POST"): admin_only("reconnect servers"),
    ("api-mcp-authorize", "POST"): admin_only("change servers"),  # SPEC 16.2
    ("api-allowlist", "POST"): admin_only("change the allow-list"),
    ("api-rules", "POST"): admin_only("change rules"),
    ("api-calls-export", "GET"): Right(frozenset({APPROVER, ADMIN}), "export history"),
    ("api-views", "POST"): admin_only("change views"),
    ("api-views-remove", "POST"): admin_only("change views"),
    ("api-audit", "GET"): admin_only("read the audit trail"),  # SPEC 22.2
    ("api-grants", "GET"): admin_only("manage apps"),  # SPEC 21.4
    ("api-grant-revoke", "POST"): admin_only("manage apps"),
    ("api-groups", "GET"): admin_only("change groups"),  # SPEC 23.3
    ("api-groups", "POST"): admin_only("change groups"),
    ("api-groups-remove", "POST"): admin_only("change groups"),
    # `GET /metrics` (outside /v1: an allowed address needs no token) checks its own rule,
    # admin only, 403 `this token may not read metrics` (mcpcore.api.ops).
    # Unknown paths answer 404 to every token (after auth, so they reveal nothing).
    **{("api-not-found", m): ANY for m in _ANY_METHOD},
    **{("api-not-found-any", m): ANY for m in _ANY_METHOD},
}


# An app's OAuth access token (SPEC 21.4) on /v1.
APP_ONLY_MCP = "this token may only be used on MCP endpoints"


def may_not(what: str) -> ApiError:
    return ApiError(f"this token may not {what}", 403)


# The answers of the call narrowings, shared by the checks below and by `describe`.
CALL_NOT_FOUND = "call not found"
CANCEL_OTHERS = "cancel other tokens' calls"
REPLY = "reply to confirmations"
OWN_CALL = "a token may not reply to its own call"


def _own(token: ApiToken, owner_id: int | None) -> bool:
    return owner_id is not None and owner_id == token.pk


def _check_call(token: ApiToken, right: Right, call_id: str) -> None:
    """`read`/`cancel` of a call another token made: 404 for an agent (it can't tell the call
    exists), 403 for an approver's cancel; an unknown call is left to the view's 404."""
    try:
        cid = uuid.UUID(str(call_id))
    except ValueError:
        return
    row = ToolCall.objects.filter(id=cid).values_list("token_id").first()
    if row is None or _own(token, row[0]) or token.role == ADMIN:
        return
    if token.role == AGENT:
        raise ApiError(CALL_NOT_FOUND, 404)
    if right.calls == "cancel":
        raise may_not(CANCEL_OTHERS)


def _check_right(request: ApiRequest, kwargs: dict) -> None:
    match = getattr(request, "resolver_match", None)
    url_name = match.url_name if match else None
    right = RIGHTS.get((url_name, request.method)) if url_name and request.method else None
    token = request.api_token
    if right is None:
        log.error("no rule in RIGHTS for %s %s", request.method, match.url_name if match else request.path)
        raise may_not("use this route")
    if token.role not in right.roles:
        raise may_not(right.denied)
    if right.calls in ("read", "cancel"):
        _check_call(token, right, kwargs.get("call_id", ""))


def visible_calls(token: ApiToken, calls):
    """The calls of a queryset a token may see listed: an agent only its own."""
    return calls.filter(token=token) if token.role == AGENT else calls


def reply_refusal(token: ApiToken, call: ToolCall) -> None:
    """Raise the 403 for a token that may not reply to this (found) confirmation, in the
    order of SPEC 12.1: its own call for any role, then any call for an agent."""
    if _own(token, call.token_id):
        raise ApiError(OWN_CALL, 403)
    if token.role == AGENT:
        raise may_not(REPLY)


ROLES = (AGENT, APPROVER, ADMIN)
_OTHERS_CALL = f"its own calls only (another token's call: 404 `{CALL_NOT_FOUND}`)"
# What each narrowing lets each role do, as the checks above apply it.
_NARROWED: dict[str, dict[str, str]] = {
    "read": {AGENT: _OTHERS_CALL, APPROVER: "any call", ADMIN: "any call"},
    "cancel": {
        AGENT: _OTHERS_CALL,
        APPROVER: f"its own calls only (another token's call: 403 `this token may not {CANCEL_OTHERS}`)",
        ADMIN: "any call",
    },
    "list": {AGENT: "its own calls only", APPROVER: "all", ADMIN: "all"},
    "reply": {
        AGENT: f"no (403 `this token may not {REPLY}`)",
        APPROVER: f"other tokens' calls (its own: 403 `{OWN_CALL}`)",
        ADMIN: f"other tokens' calls (its own: 403 `{OWN_CALL}`)",
    },
}
_REFUSALS: dict[str, dict[int, str]] = {
    "read": {404: f"{CALL_NOT_FOUND} (also an agent naming another token's call)"},
    "cancel": {
        403: f"this token may not {CANCEL_OTHERS} (an approver)",
        404: f"{CALL_NOT_FOUND} (also an agent naming another token's call)",
    },
    "reply": {
        403: f"{OWN_CALL} (any role); this token may not {REPLY} (an agent); this confirmation is"
        " for <group> (a token outside the group its rule names, SPEC 24.1); <who> has already"
        " approved this call (24.2)"
    },
}


def describe(right: Right) -> tuple[dict[str, str], dict[int, str]]:
    """What each role may do with a route under `right`, and the refusals (status: answer) it
    gives: the OpenAPI description's `x-agenvoy-roles`, read off the rights table."""
    roles: dict[str, str] = {}
    for role in ROLES:
        if role not in right.roles:
            roles[role] = f"no (403 `this token may not {right.denied}`)"
        else:
            roles[role] = _NARROWED[right.calls][role] if right.calls else "yes"
    refusals = dict(_REFUSALS.get(right.calls, {}))
    if right.roles != ALL_ROLES:
        refusals[403] = f"this token may not {right.denied}"
    return roles, refusals


def api_view(methods: tuple[str, ...], prepare: Callable | None = None) -> Callable:
    """Token auth, allowed methods, the token's rights (RIGHTS) and JSON errors for a `/v1`
    view (sync or async; either way the result is an async view).

    `prepare(request)`, for an async view, is sync database work done in the same trip to the
    database thread as the auth, inside a shared write transaction (`db.write`: it must raise
    before it writes); its result is `request.prepared`. The call path uses it so that a call
    costs one trip before it runs.

    The view gets an `ApiRequest` (the token as `request.api_token`); ApiError, the input
    contract's InputError (`mcpcore.schemas`) and the call path's CallError (`ANSWERS`) become
    its JSON answer, and any other exception a logged 500 without details (never a traceback
    in the answer).
    """

    def wrap(view: Callable) -> Callable:
        is_async = asyncio.iscoroutinefunction(view)

        def precheck(request: ApiRequest, kwargs: dict) -> JsonResponse | None:
            token = _token_of(request)
            if token is None:
                if app_token(request.headers.get("Authorization", "")) is not None:
                    return error(APP_ONLY_MCP, 403)
                return error("authentication required", 401)
            request.api_token = token
            if request.method not in methods:
                resp = error("method not allowed", 405)
                resp["Allow"] = ", ".join(methods)
                return resp
            try:
                _check_right(request, kwargs)
            except ApiError as exc:
                return error(exc.message, exc.status)
            return None

        def precheck_and_prepare(
            request: ApiRequest, kwargs: dict, prepare: Callable[[ApiRequest], Any]
        ) -> JsonResponse | None:
            denied = precheck(request, kwargs)
            if denied is None:
                try:
                    request.prepared = prepare(request)
                except ANSWERS as exc:
                    return error(exc.message, exc.status)
            return denied

        if is_async:

            @functools.wraps(view)
            async def handler(request: ApiRequest, *args, **kwargs):
                if prepare is None:
                    denied = await db.read(precheck, request, kwargs)
                else:
                    denied = await db.write(precheck_and_prepare, request, kwargs, prepare)
                if denied is not None:
                    return denied
                try:
                    return await view(request, *args, **kwargs)
                except ANSWERS as exc:
                    return error(exc.message, exc.status)
                except Exception:
                    log.exception("unhandled error in %s", request.path)
                    return error("internal error", 500)

        else:

            def run_sync(request: ApiRequest, *args, **kwargs):
                try:
                    denied = precheck(request, kwargs)
                    if denied is not None:
                        return denied
                    return view(request, *args, **kwargs)
                except ANSWERS as exc:
                    return error(exc.message, exc.status)
                except Exception:
                    log.exception("unhandled error in %s", request.path)
                    return error("internal error", 500)

            @functools.wraps(view)
            async def handler(request: ApiRequest, *args, **kwargs):
                # A sync view, auth included, is one trip to a view thread: concurrent
                # requests run side by side, each thread keeping its database connection.
                return await db.run_view(run_sync, request, *args, **kwargs)

        # A function attribute, read back with getattr (api.openapi, the role walk); setattr,
        # as mypy knows no attributes on functions.
        setattr(handler, "api_methods", methods)  # noqa: B010
        return csrf_exempt(handler)

    return wrap
