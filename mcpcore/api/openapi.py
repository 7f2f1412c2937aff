"""The OpenAPI 3.1 description of `/v1`, readable without a token. Each operation says what
each token role may do with it (`x-agenvoy-roles`, SPEC 12.1) and which answers a refusal gets."""

from django.http import HttpRequest, JsonResponse

_ERR = {"$ref": "#/components/schemas/Error"}
_OK = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def _op(
    summary: str,
    body: dict | None = None,
    answer: dict | None = None,
    errors: tuple[int, ...] = (400,),
    params: list | None = None,
    roles: dict | None = None,
    why: dict[int, str] | None = None,
) -> dict:
    roles = roles or _EVERY
    op: dict = {
        "summary": summary,
        "description": "Roles: " + "; ".join(f"{role}: {right}" for role, right in roles.items()) + ".",
        "x-agenvoy-roles": roles,
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": answer or _OK}}},
            "401": {
                "description": "authentication required",
                "content": {"application/json": {"schema": _ERR}},
            },
        },
    }
    for code in sorted(set(errors) | set(why or {})):
        op["responses"][str(code)] = {
            "description": (why or {}).get(code, "error"),
            "content": {"application/json": {"schema": _ERR}},
        }
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if params:
        op["parameters"] = params
    return op


_EVERY = {"agent": "yes", "approver": "yes", "admin": "yes"}


def _admin(what: str) -> dict:
    """`_op` arguments of an admin-only operation: its roles and its 403."""
    no = f"no (403 `this token may not {what}`)"
    return {
        "roles": {"agent": no, "approver": no, "admin": "yes"},
        "why": {403: f"this token may not {what}"},
    }


_READ_CALL = {
    "agent": "its own calls only (another token's call: 404 `call not found`)",
    "approver": "any call",
    "admin": "any call",
}
_CANCEL_CALL = {
    "agent": "its own calls only (another token's call: 404 `call not found`)",
    "approver": "its own calls only (another token's call: 403 `this token may not cancel other tokens' calls`)",
    "admin": "any call",
}


def _obj(props: dict, required: tuple[str, ...] = ()) -> dict:
    return {"type": "object", "properties": props, "required": list(required)}


_STR = {"type": "string"}
_SERVER = _obj(
    {
        "command": _STR,
        "args": {"type": "array", "items": _STR},
        "env": {"type": "object", "additionalProperties": _STR},
        "url": _STR,
        "headers": {"type": "object", "additionalProperties": _STR},
        "type": {"type": "string", "enum": ["stdio", "streamable-http", "sse"]},
        "disabled": {"type": "boolean"},
        "timeout": {"type": "number", "minimum": 1},
    }
)
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
_RULES = _obj(
    {
        "rules": {
            "type": "array",
            "items": _obj(
                {
                    "line": {"type": "integer"},
                    "decision": {"type": "string", "enum": ["allow", "ask", "deny"]},
                    "pattern": _STR,
                },
                ("line", "decision", "pattern"),
            ),
        },
        "error": _STR,
    },
    ("rules", "error"),
)
_PATH = lambda name: {"name": name, "in": "path", "required": True, "schema": _STR}  # noqa: E731
_QUERY = lambda name, what: {
    "name": name,
    "in": "query",
    "required": False,
    "schema": _STR,
    "description": what,
}  # noqa: E731
_WAIT = {
    "name": "wait",
    "in": "query",
    "required": False,
    "schema": {"type": "number", "minimum": 0, "maximum": 300},
}

PATHS = {
    "/v1/mcp": {
        "get": _op("List servers (secrets masked)", errors=(), **_admin("read server configuration")),
        "post": _op(
            "Add or change a server",
            _obj({"name": _STR, "server": _SERVER}, ("name", "server")),
            **_admin("change servers"),
        ),
    },
    "/v1/mcp/remove": {
        "post": _op(
            "Remove a server",
            _obj({"name": _STR}, ("name",)),
            errors=(400, 404),
            **_admin("change servers"),
        )
    },
    "/v1/mcp/status": {
        "get": _op(
            "Connection status of every server, and the history's storage figures",
            answer=_obj(
                {
                    "servers": {"type": "array", "items": {"type": "object"}},
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
            errors=(),
        )
    },
    "/v1/mcp/reconnect": {
        "post": _op(
            "Reconnect one server or all",
            _obj({"name": _STR}),
            errors=(400, 404),
            **_admin("reconnect servers"),
        )
    },
    "/v1/mcp/tools": {"get": _op("Registered tools", errors=())},
    "/v1/mcp/instructions": {"get": _op("Server instructions as a system-prompt block", errors=())},
    "/v1/allowlist": {
        "get": _op(
            "Allow-list entries",
            errors=(),
            params=[{"name": "prefix", "in": "query", "required": False, "schema": _STR}],
        ),
        "post": _op(
            "Replace the entries of one prefix",
            _obj(
                {
                    "tool": _obj({"prefix": _STR, "entries": {"type": "array", "items": _STR}}, ("prefix",)),
                }
            ),
            **_admin("change the allow-list"),
        ),
    },
    "/v1/rules": {
        "get": _op("Argument rules in force, and the rules file's problem", answer=_RULES, errors=()),
        "post": _op(
            "Replace the rules file (one rule a line)",
            _obj({"rules": {"type": "array", "items": _STR}}, ("rules",)),
            _RULES,
            errors=(400, 409),
            **_admin("change rules"),
        ),
    },
    "/v1/mcp/call": {
        "post": _op(
            "Call a tool through the confirmation gate",
            _obj(
                {
                    "name": _STR,
                    "arguments": {"type": "object"},
                    "session_id": _STR,
                    "mode": {"type": "string", "enum": ["confirm", "auto", "single-confirm", "always-allow"]},
                    "wait": {"type": "number", "minimum": 0, "maximum": 300},
                },
                ("name",),
            ),
            _CALL_ANSWER,
            errors=(400, 404, 503),
            why={
                403: "this token may not use auto mode (a token made with --no-auto)",
                429: "too many pending confirmations for this token (AGENVOY_MAX_PENDING)",
            },
        ),
    },
    "/v1/mcp/calls/{call_id}": {
        "get": _op(
            "A call, optionally waiting for it to end",
            answer=_CALL_ANSWER,
            errors=(400,),
            params=[_PATH("call_id"), _WAIT],
            roles=_READ_CALL,
            why={404: "call not found (also an agent asking for another token's call)"},
        ),
    },
    "/v1/mcp/calls/{call_id}/cancel": {
        "post": _op(
            "Cancel a pending or running call",
            errors=(409,),
            params=[_PATH("call_id")],
            roles=_CANCEL_CALL,
            why={
                403: "this token may not cancel other tokens' calls (an approver)",
                404: "call not found (also an agent naming another token's call)",
            },
        ),
    },
    "/v1/pending": {
        "get": _op(
            "Pending confirmations, oldest first",
            errors=(),
            roles={"agent": "its own calls' confirmations only", "approver": "all", "admin": "all"},
        )
    },
    "/v1/session/{session_id}/confirm/{confirm_id}": {
        "post": _op(
            "Reply to a pending confirmation",
            _obj(
                {
                    "approve": {"type": "boolean"},
                    "remember": {"type": "boolean"},
                    "allow_turn": {"type": "boolean"},
                    "abort": {"type": "boolean"},
                    "reason": _STR,
                }
            ),
            errors=(400,),
            params=[_PATH("session_id"), _PATH("confirm_id")],
            roles={
                "agent": "no (403 `this token may not reply to confirmations`)",
                "approver": "other tokens' calls",
                "admin": "other tokens' calls",
            },
            # In this order: 404, then 403 (own call, then agent), then 410.
            why={
                404: "confirmation not found (unknown id, or another session id)",
                403: "a token may not reply to its own call (any role); this token may not reply to"
                " confirmations (an agent)",
                410: "confirmation already resolved or expired",
            },
        ),
    },
    "/v1/calls/export": {
        "get": _op(
            "The call history, streamed oldest first, one call per line (JSONL, or CSV)",
            answer={"type": "string"},
            params=[
                _QUERY("since", "ISO 8601 time of created_at, inclusive"),
                _QUERY("until", "ISO 8601 time of created_at, exclusive"),
                _QUERY("server", "server name (an unknown one matches nothing)"),
                _QUERY("tool", "registered tool name (an unknown one matches nothing)"),
                _QUERY("status", "one call status"),
                _QUERY("format", "`jsonl` (default) or `csv`"),
                _QUERY("results", "`1` includes results; `0` or absent leaves them out"),
            ],
            roles={
                "agent": "no (403 `this token may not export history`)",
                "approver": "yes",
                "admin": "yes",
            },
            why={400: "invalid <parameter>: <value>", 403: "this token may not export history"},
        )
    },
}

SPEC = {
    "openapi": "3.1.0",
    "info": {
        "title": "Agenvoy MCP console",
        "version": "1.0.0",
        "description": "Every route but this description needs `Authorization: Bearer <token>`. A token has one"
        " role, fixed when it is made: `agent` (calls tools, sees its own calls), `approver` (also answers"
        " other tokens' confirmations), `admin` (also changes servers, the allow-list and rules). No token"
        " may reply to a confirmation of its own call. Each operation's `x-agenvoy-roles` says what each"
        " role may do with it.",
    },
    "components": {
        "schemas": {"Error": _obj({"error": _STR}, ("error",))},
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    },
    "security": [{"bearer": []}],
    "paths": PATHS,
}


def openapi_json(request: HttpRequest) -> JsonResponse:
    return JsonResponse(SPEC)
