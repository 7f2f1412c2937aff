"""The OpenAPI 3.1 description of `/v1`, readable without a token.

Generated, so that nothing about a route is written twice: its path, path parameters and
methods come from the URL patterns and their views (`api_methods`); its request body and query
parameters from the input contract (`mcpcore.schemas`); what each token role may do with it
(`x-agenvoy-roles`, SPEC 12.1) and the refusals it answers from the rights table
(`auth.RIGHTS`, through `auth.describe`). Written here is only what no other place holds: each
operation's summary, the shape of its answer, and the errors of its own.
"""

import functools
from dataclasses import dataclass, field
from urllib.parse import unquote

from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from pydantic.json_schema import models_json_schema

from .. import schemas
from . import auth

_ERR = {"$ref": "#/components/schemas/Error"}
_OK = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
_STR = {"type": "string"}


def _obj(props: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": props, "required": list(required)}


_CALL_ANSWER = _obj(
    {
        "call_id": _STR,
        "session_id": _STR,
        "status": _STR,
        "result": _STR,
        "confirm_id": {"type": ["string", "null"]},
        "abort": {"type": "boolean"},
    },
    ("call_id", "session_id", "status"),
)
_GROUP = _obj(
    {
        "name": _STR,
        "people": {"type": "array", "items": _STR},
        "tokens": {"type": "array", "items": _STR},
        "escalate_to": {"type": ["string", "null"]},
        "escalate_after_minutes": {"type": ["integer", "null"]},
    },
    ("name", "people", "tokens", "escalate_to", "escalate_after_minutes"),
)
_QUESTION = _obj(
    {
        "id": _STR,
        "server": _STR,
        "mode": {"type": "string", "enum": ["form", "url"]},
        "message": _STR,
        "schema": {"type": ["object", "null"], "description": "form mode: the server's requestedSchema"},
        "url": {"type": "string", "description": "URL mode: the URL to open"},
        "status": {
            "type": "string",
            "enum": ["asked", "pending", "answered", "declined", "cancelled", "expired"],
        },
        "answer": {
            "type": ["object", "null"],
            "description": "what went back to the server: action, content",
        },
        "answered_by": _STR,
        "created_at": {"type": "string", "format": "date-time"},
        "answered_at": {"type": ["string", "null"], "format": "date-time"},
    },
    ("id", "server", "mode", "message", "status", "answer", "answered_by", "created_at", "answered_at"),
)
_CALL_DETAIL = _obj(
    {**_CALL_ANSWER["properties"], "questions": {"type": "array", "items": _QUESTION}},
    (*_CALL_ANSWER["required"], "questions"),
)
_RULES = _obj(
    {
        "rules": {
            "type": "array",
            "items": _obj(
                {
                    "line": {"type": "integer"},
                    "decision": {"type": "string", "enum": ["allow", "ask", "deny", "limit"]},
                    "pattern": _STR,
                    "limit": {"type": "string", "description": "a limit line's <n>/<unit> (SPEC 25.1)"},
                },
                ("line", "decision", "pattern"),
            ),
        },
        "error": _STR,
    },
    ("rules", "error"),
)
_VIEW = _obj(
    {
        "name": _STR,
        "description": _STR,
        "include": {"type": "array", "items": _STR},
        "exclude": {"type": "array", "items": _STR},
        "tools": {"type": "array", "items": _STR, "description": "registered names of the tools in it now"},
    },
    ("name", "description", "include", "exclude", "tools"),
)
_FILE = {409: "the file is unreadable or invalid (fix the file first; it was not changed)"}


@dataclass(frozen=True)
class Operation:
    """What only the description says about one method of one route."""

    summary: str
    body: type[schemas.Contract] | None = None
    query: type[schemas.Contract] | None = None
    answer: dict | None = None
    errors: dict[int, str] = field(default_factory=dict)


# Keyed like auth.RIGHTS: (URL name, method).
OPERATIONS: dict[tuple[str, str], Operation] = {
    ("api-mcp", "GET"): Operation("List servers (secrets masked)"),
    ("api-mcp", "POST"): Operation("Add or change a server", schemas.ServerEdit, errors=_FILE),
    ("api-mcp-remove", "POST"): Operation(
        "Remove a server", schemas.ServerRef, errors={404: "server not found", **_FILE}
    ),
    ("api-mcp-status", "GET"): Operation(
        "Connection status of every server, and the history's storage figures",
        answer=_obj(
            {
                "servers": {
                    "type": "array",
                    "items": _obj(
                        {
                            "Name": _STR,
                            "Transport": _STR,
                            "Connected": {"type": "boolean"},
                            "Error": _STR,
                            "state": _STR,
                            "tools": {"type": "integer"},
                            "prompts": {"type": "integer", "description": "prompts it lists (SPEC 20.1)"},
                            "resources": {
                                "type": "integer",
                                "description": "resources and resource templates it lists",
                            },
                            "protocol": _STR,
                            "last_refresh": {"type": ["string", "null"], "format": "date-time"},
                            "worker": _STR,
                            "sandbox": {
                                "type": "boolean",
                                "description": "a stdio server run under bubblewrap (SPEC 26)",
                            },
                            "oauth": {"type": "object", "description": "only on servers that use OAuth"},
                        },
                        ("Name", "Transport", "Connected", "Error", "state", "tools", "prompts", "resources"),
                    ),
                },
                "storage": _obj(
                    {
                        "calls": {"type": "integer"},
                        "oldest": {"type": ["string", "null"], "format": "date-time"},
                        "database_bytes": {"type": "integer"},
                    },
                    ("calls", "oldest", "database_bytes"),
                ),
            },
            ("servers", "storage"),
        ),
    ),
    ("api-mcp-reconnect", "POST"): Operation(
        "Reconnect one server or all", schemas.ReconnectBody, errors={404: "server not found"}
    ),
    ("api-mcp-authorize", "POST"): Operation(
        "Start a person's OAuth authorization of a server (the URL to open)",
        schemas.AuthorizeBody,
        answer=_obj({"url": _STR}, ("url",)),
        errors={
            404: "server not found",
            400: "server <name> does not use OAuth authorization",
            502: "authorization failed: <why>",
            503: "server <name> is not connected: no worker holds this server",
        },
    ),
    ("api-mcp-tools", "GET"): Operation("Registered tools"),
    ("api-mcp-instructions", "GET"): Operation("Server instructions as a system-prompt block"),
    ("api-allowlist", "GET"): Operation("Allow-list entries", query=schemas.AllowQuery),
    ("api-allowlist", "POST"): Operation(
        "Replace the entries of one prefix", schemas.AllowEdit, errors=_FILE
    ),
    ("api-rules", "GET"): Operation("Argument rules in force, and the rules file's problem", answer=_RULES),
    ("api-rules", "POST"): Operation(
        "Replace the rules file (one rule a line)", schemas.RulesEdit, answer=_RULES, errors=_FILE
    ),
    ("api-mcp-call", "POST"): Operation(
        "Call a tool through the confirmation gate",
        schemas.CallBody,
        answer=_CALL_ANSWER,
        errors={
            403: "this token may not use auto mode (a token made with --no-auto)",
            404: "unknown tool: <name>",
            429: "too many pending confirmations for this token (AGENVOY_MAX_PENDING); or rate limited by"
            " rule: <line>, with retry_after and a Retry-After header (SPEC 25.1)",
            503: "server <name> is not connected: <why>",
        },
    ),
    ("api-mcp-call-detail", "GET"): Operation(
        "A call, optionally waiting for it to end, with the questions its server asked (SPEC 20.4)",
        query=schemas.WaitQuery,
        answer=_CALL_DETAIL,
        errors={404: "call not found"},
    ),
    ("api-mcp-call-cancel", "POST"): Operation(
        "Cancel a pending or running call", errors={404: "call not found", 409: "call already ended"}
    ),
    ("api-pending", "GET"): Operation(
        "Pending confirmations and servers' questions (`kind` `question`), oldest first"
    ),
    ("api-pending-answer", "POST"): Operation(
        "Answer a server's question in the inbox (SPEC 20.4)",
        schemas.QuestionAnswer,
        # Answered in this order: 404, then 403 (own call, then agent), then 410, then 400.
        errors={
            404: "confirmation not found",
            410: "confirmation already resolved or expired",
            400: "invalid answer: <field>: <why> (nothing is sent to the server)",
        },
    ),
    ("api-pending-extend", "POST"): Operation(
        "Extend a pending confirmation or question: expiry now plus AGENVOY_CONFIRM_TIMEOUT (SPEC 24.4)",
        answer=_obj(
            {"ok": {"type": "boolean"}, "expires_at": {"type": "string", "format": "date-time"}},
            ("ok", "expires_at"),
        ),
        # Answered in this order: 404, then 403 (own call, then agent), then 410, then 400.
        errors={
            404: "confirmation not found",
            410: "confirmation already resolved or expired",
            400: "cannot extend past 24 hours",
        },
    ),
    ("api-pending-decide", "POST"): Operation(
        "Approve or deny many pending confirmations at once (SPEC 24.6): each id answered as its own"
        " reply would be",
        schemas.Decide,
        answer=_obj(
            {
                "results": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": 'each id: "ok", or the error its own reply would have got',
                }
            },
            ("results",),
        ),
        errors={400: "at most 500 ids"},
    ),
    ("api-hooks-claude-code", "POST"): Operation(
        "A Claude Code HTTP hook (PermissionRequest, PreToolUse): a permission prompt held for a person up"
        " to `wait` seconds (query, 1 to 600, default 55), answered in the event's own JSON ({} when"
        " nobody decided)",
        schemas.ClaudeCodeHook,
        answer={"type": "object", "description": "The event's hookSpecificOutput, or {}"},
        errors={
            413: "request body too large",
            429: "too many pending confirmations for this token (AGENVOY_MAX_PENDING)",
        },
    ),
    ("api-calls-export", "GET"): Operation(
        "The call history, streamed oldest first, one call per line (JSON Lines, or CSV)",
        query=schemas.ExportQuery,
        answer={"type": "string"},
    ),
    ("api-audit", "GET"): Operation(
        "The audit trail (every change of what the console trusts or who may use it), streamed oldest"
        " first, one row per line (JSON Lines, or CSV with before and after as compact JSON)",
        query=schemas.AuditQuery,
        answer={"type": "string"},
    ),
    ("api-grants", "GET"): Operation(
        "Connected apps (SPEC 21.4): the grants in force, newest first, never a token",
        answer=_obj({"grants": {"type": "array", "items": {"type": "object"}}}, ("grants",)),
    ),
    ("api-grant-revoke", "POST"): Operation(
        "Revoke an app's grant: its tokens stop working at once on every process",
        errors={404: "grant not found"},
    ),
    ("api-groups", "GET"): Operation(
        "Groups (SPEC 23.3), sorted by name: their people, approver tokens and escalation",
        answer=_obj({"groups": {"type": "array", "items": _GROUP}}, ("groups",)),
    ),
    ("api-groups", "POST"): Operation(
        "Make a group, or replace its people and escalation",
        schemas.GroupEdit,
        errors={400: "invalid group name; unknown person: <username>; unknown group: <name>"},
    ),
    ("api-groups-remove", "POST"): Operation(
        "Remove a group no rule names",
        schemas.GroupRef,
        errors={404: "group not found", 400: "group <name> is used by rules"},
    ),
    ("api-views", "GET"): Operation(
        "Views, sorted by name, with the tools each holds now (a token limited to views: its own)",
        answer=_obj({"views": {"type": "array", "items": _VIEW}}, ("views",)),
    ),
    ("api-views", "POST"): Operation(
        "Create or replace a view",
        schemas.ViewEdit,
        answer=_obj({"ok": {"type": "boolean"}, "view": _VIEW}, ("ok", "view")),
    ),
    ("api-views-remove", "POST"): Operation(
        "Remove a view (and from the tokens limited to it)", schemas.ViewRef, errors={404: "view not found"}
    ),
    ("api-confirm", "POST"): Operation(
        "Reply to a pending confirmation",
        schemas.Reply,
        # Answered in this order: 404, then 403 (own call, then agent, then group), then 400, then 410.
        errors={
            404: "confirmation not found (unknown id, or another session id)",
            410: "confirmation already resolved or expired",
            400: "this call needs <n> approvals (remember, a session, a time or changed arguments"
            " of a call needing several, SPEC 24.2)",
        },
    ),
}

INFO = {
    "title": "Agenvoy MCP console",
    "version": "1.0.0",
    "description": "Every route but this description needs `Authorization: Bearer <token>`. A token has one"
    " role, fixed when it is made: `agent` (calls tools, sees its own calls), `approver` (also answers"
    " other tokens' confirmations), `admin` (also changes servers, the allow-list and rules). No token"
    " may reply to a confirmation of its own call. Each operation's `x-agenvoy-roles` says what each"
    " role may do with it. A body or query that breaks the contract gets 400 with the first broken"
    " rule's message.",
}


def _answer(description: str, schema: dict) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _ref(model: type[schemas.Contract]) -> dict:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _operation(key: tuple[str, str], op: Operation, path_params: list[str], components: dict) -> dict:
    roles, refusals = auth.describe(auth.RIGHTS[key])
    out: dict = {
        "operationId": f"{key[0]}-{key[1].lower()}",
        "summary": op.summary,
        "description": "Roles: " + "; ".join(f"{role}: {right}" for role, right in roles.items()) + ".",
        "x-agenvoy-roles": roles,
        "responses": {
            "200": _answer("OK", op.answer or _OK),
            "401": _answer("authentication required", _ERR),
        },
    }
    errors = {**op.errors, **refusals}  # a refusal's text says who gets it
    if op.body is not None or op.query is not None:
        errors[400] = "the first broken rule of the input contract, as its message"
    for code in sorted(errors):
        out["responses"][str(code)] = _answer(errors[code], _ERR)
    params = [{"name": name, "in": "path", "required": True, "schema": _STR} for name in path_params]
    if op.query is not None:
        query = components[op.query.__name__]
        params += [
            {"name": name, "in": "query", "required": False, "schema": schema}
            for name, schema in query["properties"].items()
        ]
    if params:
        out["parameters"] = params
    if op.body is not None:
        out["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(op.body)}}}
    return out


def _components() -> dict:
    models = {m for op in OPERATIONS.values() for m in (op.body, op.query) if m is not None}
    _, found = models_json_schema(
        [(m, "validation") for m in sorted(models, key=lambda m: m.__name__)],
        ref_template="#/components/schemas/{model}",
        schema_generator=schemas.PlainJsonSchema,
    )
    definitions = found.get("$defs", {})
    for definition in definitions.values():
        schemas.tidy(definition)
    return {**definitions, "Error": _obj({"error": _STR}, ("error",))}


def _routes() -> list[tuple[str, URLPattern]]:
    """(URL name, pattern) of each `/v1` route (a view made by `api_view`), in the order of the
    URL patterns. Read through Django's resolver, not by importing `api/urls.py`, whose
    patterns import this module's view."""

    def walk(patterns: list) -> list[tuple[str, URLPattern]]:
        found = []
        for p in patterns:
            if isinstance(p, URLResolver):
                found += walk(p.url_patterns)
            elif isinstance(p, URLPattern) and p.name and hasattr(p.callback, "api_methods"):
                found.append((p.name, p))
        return found

    return walk(get_resolver().url_patterns)


@functools.cache
def description() -> dict:
    """The whole description, built once (from the URL patterns, the models and RIGHTS)."""
    components = _components()
    paths: dict[str, dict] = {}
    for name, pattern in _routes():
        methods = getattr(pattern.callback, "api_methods", ())
        keys = [(name, m) for m in methods if (name, m) in OPERATIONS]
        if not keys:
            continue  # the description itself, and the catch-all 404s
        params = list(pattern.pattern.converters)
        path = unquote(reverse(name, kwargs={p: f"{{{p}}}" for p in params}))
        paths[path] = {
            m.lower(): _operation((name, m), OPERATIONS[(name, m)], params, components) for _, m in keys
        }
    return {
        "openapi": "3.1.0",
        "info": INFO,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }


def undescribed() -> set[tuple[str, str]]:
    """Methods of `/v1` routes without an operation here, and operations of no route (a test
    keeps this empty): the catch-all 404s are the only routes left out."""
    routes = {(n, m) for n, p in _routes() for m in getattr(p.callback, "api_methods", ())}
    return {k for k in routes if not k[0].startswith("api-not-found")} ^ set(OPERATIONS)


def openapi_json(request: HttpRequest) -> JsonResponse:
    return JsonResponse(description())
