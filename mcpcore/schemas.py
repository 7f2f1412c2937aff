"""The input contract: one pydantic model for each body the console takes, from whichever door
it comes (SPEC 7, 12.1, 13.5, 14.2). `/v1/openapi.json` is generated from the same models.

A model's first error is the API's exact message: `Model.check(data)` raises `InputError`
with it. Every field names its message with `Message(...)`: whatever is wrong inside (a wrong
type, a bound, a missing value) answers that sentence; a rule past the type (a server name's
letters, an allow-list entry's prefix) raises its own sentence with `refuse`. Fields are checked
in the order they are declared (a subclass's after its bases', bases right to left), and the
first error wins, so the order of the fields is the order of the checks.

Pure: no Django, no `mcp`. Adding a body is one `Contract` subclass here, one `check` in its
door, and its operation in `api/openapi.py` (beside its right in `api/auth.RIGHTS`).
"""

import datetime
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    PlainValidator,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticCustomError, PydanticUseDefault, core_schema

from . import allowlist, elicitation, gate, names, rules, toolviews
from .choices import HISTORY_KINDS, AuditAction, CallStatus

# The pydantic error types of this contract's messages: one a validator raises (`refuse`),
# and a field's own `Message`.
CONTRACT, FIXED = "contract", "contract_fixed"


class InputError(ValueError):
    """Input that breaks the contract; `message` is the API's error text (400)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def refuse(message: str) -> PydanticCustomError:
    """The error a validator raises to answer `message` exactly."""
    # The message is a context value, so braces in it (a JSON value in `unknown mode: {...}`)
    # are never read as a template; and JSON text, so a lone surrogate in it (a client's text)
    # can't break pydantic's rendering of its errors, which must be UTF-8.
    return PydanticCustomError(CONTRACT, "{message}", {"message": json.dumps(message)})


def _first_message(model: object, errors: list[Any]) -> str | None:
    """The contract message of the first error: its own, or for a missing value the message of
    the field it is missing from (pydantic reports those before any validator runs)."""
    if not errors:
        return None
    first = errors[0]
    if first["type"] == CONTRACT:
        return str(json.loads(first["msg"]))
    if first["type"] == FIXED:
        return str(first["msg"])
    if first["type"] == "missing":
        return _field_message(model, first["loc"])
    return None


def _field_message(model: object, loc: tuple) -> str | None:
    found = None
    for key in loc:
        fields = getattr(model, "model_fields", None)
        if not isinstance(fields, dict) or key not in fields:
            return None
        info = fields[key]
        found = next((m for m in info.metadata if isinstance(m, Message)), None)
        model = info.annotation
    return found.text if loc and found is not None else None


class Message:
    """`Annotated[T, Message("x must be ...")]`: any failure of validating T answers the
    message; for a model T, a contract message from inside (its own field's) is kept."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        inner = handler(source)
        if not (isinstance(source, type) and issubclass(source, BaseModel)):
            # A plain type: pydantic itself answers the message (no Python call per value).
            return core_schema.custom_error_schema(
                inner, custom_error_type=FIXED, custom_error_message=self.text
            )

        def wrap(value: Any, validate: Callable[[Any], Any]) -> Any:
            try:
                return validate(value)
            except ValidationError as exc:
                raise refuse(_first_message(source, exc.errors()) or self.text) from None

        return core_schema.no_info_wrap_validator_function(wrap, inner)


def _check(test: Callable[[Any], bool], message: str) -> AfterValidator:
    def check(value: Any) -> Any:
        if not test(value):
            raise refuse(message)
        return value

    return AfterValidator(check)


def _absent(value: Any) -> Any:
    """`null` reads as the field left out: its default."""
    if value is None:
        raise PydanticUseDefault()
    return value


def _sendable(what: str) -> AfterValidator:
    def check(value: dict) -> dict:
        try:
            # What can't be sent as UTF-8 JSON would break the server's session for every caller.
            json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (ValueError, UnicodeError, RecursionError):
            raise refuse(
                f"{what} must be JSON that can be sent as UTF-8 (no lone surrogates, NaN or Infinity)"
            ) from None
        return value

    return AfterValidator(check)


def _not_blank(value: str) -> bool:
    return value.strip() != ""


def not_blank(message: str) -> AfterValidator:
    """A string must hold more than white space (it is kept as given)."""
    return _check(_not_blank, message)


_SESSION_ID = "session_id must be a non-empty string of at most 200 characters"
SessionId = Annotated[
    str,
    Strict(),
    Message(_SESSION_ID),
    _check(lambda v: _not_blank(v) and len(v) <= 200, _SESSION_ID),
]


class Contract(BaseModel):
    """A body of the contract: unknown keys are ignored, the values are checked and frozen."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    @classmethod
    def check(cls, data: Mapping[str, Any]) -> Self:
        """The body as this model; raises InputError with the first error's message."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise _input_error(cls, exc) from None


def _input_error(model: object, exc: ValidationError) -> InputError:
    errors = exc.errors(include_url=False)
    text = _first_message(model, errors)
    if text is None:  # a check without its own message: still a 400, never a 500
        first = errors[0]
        text = f"{'.'.join(str(p) for p in first['loc']) or 'body'}: {first['msg']}"
    return InputError(text)


# --- calls (SPEC 5, 7, 13.3) ---------------------------------------------------------------------


def _mode(value: Any) -> str:
    mode = gate.normalize_mode(value)
    if mode is None:
        raise refuse(f"unknown mode: {value}")
    return mode


class CallRequest(Contract):
    """A tool call, from every door alike (`POST /v1/mcp/call`, `/mcp`, a page's try-it):
    `calls.create` checks it."""

    name: Annotated[
        str,
        Strict(),
        Message("name is required"),
        not_blank("name is required"),
        Field(description="the registered tool name"),
    ]
    arguments: Annotated[
        dict[str, Any],
        Message("arguments must be a JSON object"),
        _sendable("arguments"),
        BeforeValidator(_absent),
    ] = Field(default_factory=dict)
    session_id: Annotated[
        SessionId | None,
        AfterValidator(lambda v: v.strip() if v is not None else None),
        Field(description="a new one when left out"),
    ] = None
    mode: Annotated[
        str,
        PlainValidator(_mode),
        WithJsonSchema({"type": "string", "enum": list(gate.MODES)}),
        Field(description="confirm (the default) or auto; single-confirm and always-allow are aliases"),
    ] = "confirm"


_WAIT = "wait must be a number of seconds from 0 to 300"


def _seconds(value: Any) -> Any:
    """A number of seconds as JSON or as query text; `null` and `""` are the default."""
    if value is None or value == "":
        raise PydanticUseDefault()
    if isinstance(value, bool):
        raise refuse(_WAIT)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise refuse(_WAIT) from None


Seconds = Annotated[float, Field(ge=0, le=300), Message(_WAIT), BeforeValidator(_seconds)]


class CallWait(Contract):
    """How long `POST /v1/mcp/call` waits for the call to end before it answers 202."""

    wait: Annotated[Seconds, Field(description="seconds, 0 to 300")] = 30.0


class CallBody(CallRequest, CallWait):
    """The body of `POST /v1/mcp/call`: a call and `wait`. The door checks `wait` (first);
    `calls.create` checks the call, as for every door."""


class AllowQuery(Contract):
    """`?prefix=` of `GET /v1/allowlist`: the entries starting with it (all when left out)."""

    prefix: str = ""


class WaitQuery(Contract):
    """`?wait=` of `GET /v1/mcp/calls/<id>`: a long poll of that many seconds."""

    wait: Seconds = 0.0


# --- replies to confirmations (SPEC 5, 12.1) -------------------------------------------------------


GRANT_MIN, GRANT_MAX = 60, 604800  # seconds a time-boxed grant may last (SPEC 17.3)
_REMEMBER_FOR = f"remember_for must be between {GRANT_MIN} and {GRANT_MAX} seconds"


def _grant_seconds(value: Any) -> Any:
    """A number of seconds within the bounds (never a bool, which JSON keeps apart)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not GRANT_MIN <= value <= GRANT_MAX:
        raise refuse(_REMEMBER_FOR)
    return value


class Reply(Contract):
    """A person's reply to a pending confirmation (`POST /v1/session/<sid>/confirm/<cid>`, the
    pages): `calls.reply` checks it once the confirmation is found and the replier may answer."""

    # A field's docstring is its description in the OpenAPI document.
    model_config = ConfigDict(use_attribute_docstrings=True)

    approve: Annotated[bool, Strict(), Message("approve must be true or false")] = False
    remember: Annotated[bool, Strict(), Message("remember must be true or false")] = False
    """approve, and add the tool to allow_tool"""
    allow_turn: Annotated[bool, Strict(), Message("allow_turn must be true or false")] = False
    """approve for the rest of the session"""
    abort: Annotated[bool, Strict(), Message("abort must be true or false")] = False
    """deny, and tell the agent to stop"""
    # Any false value (null, "", 0) is no reason.
    reason: Annotated[
        str, Strict(), Message("reason must be a string"), BeforeValidator(lambda v: v or "")
    ] = ""
    remember_for: Annotated[
        float | None,
        Message(_REMEMBER_FOR),
        BeforeValidator(_grant_seconds),
        Field(
            description="approve, and let later calls of this tool by this token run at once for this long"
        ),
    ] = None

    arguments: Annotated[
        dict[str, Any] | None,
        Message("arguments must be a JSON object"),
        _sendable("arguments"),
        Field(
            description="Edit and approve (SPEC 24.5): with approve, run the tool call with these arguments"
            " instead; checked against the tool's input schema and the rules again"
        ),
    ] = None

    @model_validator(mode="after")
    def _grant_needs_approve(self) -> Self:
        if self.remember_for is not None and (not self.approve or self.abort):
            raise refuse("remember_for needs approve")
        if self.arguments is not None and (not self.approve or self.abort):
            raise refuse("arguments needs approve")
        return self


# SPEC 24.6: the most confirmations one `POST /v1/pending/decide` decides.
DECIDE_AT_MOST = 500


class Decide(Contract):
    """Many pending confirmations decided at once (`POST /v1/pending/decide`, the Pending page's
    `Approve selected` / `Deny selected`, SPEC 24.6): each id is then answered as its own reply
    would be (`calls.decide`)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    ids: Annotated[
        list[Annotated[str, Strict()]],
        Strict(),
        Message("ids must be a list of ids"),
        _check(lambda v: len(v) <= DECIDE_AT_MOST, f"at most {DECIDE_AT_MOST} ids"),
        Field(description="the pending items' ids (`GET /v1/pending`'s `id`)"),
    ]
    approve: Annotated[bool, Strict(), Message("approve must be true or false")]
    reason: Annotated[
        str, Strict(), Message("reason must be a string"), BeforeValidator(lambda v: v or "")
    ] = ""
    """told to the agents of the calls denied"""


def schema_problem(schema: object, arguments: dict) -> str | None:
    """Why `arguments` do not match a tool's input schema (SPEC 24.5), or None when they do:
    checked by `jsonschema` under the draft the schema declares in `$schema` (2020-12 when it
    declares none); the most relevant error, after the path of the argument it is about."""
    # Imported here: jsonschema costs some 50 ms at every process's start, and only an edit
    # needs it.
    import jsonschema

    if not isinstance(schema, dict):
        return None  # a tool that declares no object schema takes any object
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return f"the tool's own schema is invalid: {exc.message}"
    error = jsonschema.exceptions.best_match(cls(schema).iter_errors(arguments))
    if error is None:
        return None
    where = ".".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


class QuestionAnswer(Contract):
    """An answer to a server's question in the inbox (`POST /v1/pending/<id>/answer`, SPEC
    20.4). It describes the body in the OpenAPI document; the body is checked by
    `elicitation.check_answer` once the question is found and the answerer may answer (SPEC
    12.1's order), the content of an accept against the question's own schema."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    action: Annotated[
        Literal["accept", "decline", "cancel"], Message(f"invalid answer: action: {elicitation.NOT_ACTION}")
    ]
    """accept (Submit, or Done for a URL), decline, or cancel"""
    content: Annotated[
        dict[str, Any] | None,
        Message(f"invalid answer: content: {elicitation.NOT_OBJECT}"),
        Field(description="for accept of a form: the fields, as the question's schema asks"),
    ] = None


# --- permission prompts (SPEC 13.5) ----------------------------------------------------------------


_TOOL_NAME = "tool_name must be a non-empty string"


class PromptArguments(Contract):
    """The arguments of the `approval_prompt` tool on `/mcp/_permission` (Claude Code's
    `--permission-prompt-tool` contract); also the tool's input schema."""

    tool_name: Annotated[
        str,
        Strict(),
        Message(_TOOL_NAME),
        not_blank(_TOOL_NAME),
        _check(lambda v: len(v) <= 700, "tool_name must be at most 700 characters"),
        Field(description="the agent's own tool, as it names it (Bash, Edit, ...)"),
    ]
    input: Annotated[dict[str, Any], Message("input must be a JSON object"), _sendable("input")]
    tool_use_id: Annotated[
        str, Strict(), Message("tool_use_id must be a string"), BeforeValidator(_absent)
    ] = ""


class PromptRequest(PromptArguments):
    """A permission prompt as `calls.create_permission_prompt` records it: the tool's arguments
    and the session it came in."""

    session_id: SessionId


# --- servers (SPEC 2.1, 7) ---------------------------------------------------------------------------

_COMMAND_OR_URL = "server.command or server.url is required"
_LEFT_OUT: Any = Field(None)  # a default that is never a value (the field was not sent)
_STRINGS = "server.{} must be an object of strings"
_LEFT_OUT_OAUTH: Any = Field(None)


_OAUTH_STRING = "server.oauth.{} must be a string"


class OAuthConfig(Contract):
    """A server's console-only `oauth` key (SPEC 16.1); every field optional."""

    model_config = ConfigDict(extra="allow", frozen=True)

    grant: Annotated[
        Literal["authorization_code", "client_credentials"],
        Message("server.oauth.grant must be authorization_code or client_credentials"),
        Field(description="left out: authorization_code"),
    ] = _LEFT_OUT_OAUTH
    client_id: Annotated[str, Strict(), Message(_OAUTH_STRING.format("client_id"))] = _LEFT_OUT_OAUTH
    client_secret: Annotated[
        str, Strict(), Message(_OAUTH_STRING.format("client_secret")), Field(description="a secret (masked)")
    ] = _LEFT_OUT_OAUTH
    scopes: Annotated[list[str], Strict(), Message("server.oauth.scopes must be a list of strings")] = (
        _LEFT_OUT_OAUTH
    )
    authorize_params: Annotated[
        dict[str, str], Strict(), Message("server.oauth.authorize_params must be an object of strings")
    ] = _LEFT_OUT_OAUTH

    @model_validator(mode="after")
    def _machine_has_credentials(self) -> Self:
        if self.grant == "client_credentials" and not (
            (self.client_id or "").strip() and (self.client_secret or "").strip()
        ):
            raise refuse("server.oauth with client_credentials needs client_id and client_secret")
        return self


_PATHS = "server.sandbox.{} must be a list of absolute paths"


def _absolute_paths(value: list[str]) -> bool:
    return all(p.startswith("/") and "\0" not in p for p in value)


class SandboxConfig(Contract):
    """A stdio server's console-only `sandbox` object (SPEC 26): what it may read and write
    beside its own files, and whether it has the network."""

    model_config = ConfigDict(extra="allow", frozen=True)

    read: Annotated[
        list[str], Strict(), Message(_PATHS.format("read")), _check(_absolute_paths, _PATHS.format("read"))
    ] = []
    write: Annotated[
        list[str], Strict(), Message(_PATHS.format("write")), _check(_absolute_paths, _PATHS.format("write"))
    ] = []
    network: Annotated[bool, Strict(), Message("server.sandbox.network must be true or false")] = False


_SANDBOX = "server.sandbox must be true, false or an object of read, write and network"


def _sandbox_value(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if not isinstance(value, dict):
        raise refuse(_SANDBOX)
    try:
        SandboxConfig.check(value)
    except InputError as exc:
        raise refuse(exc.message) from None
    return value


@dataclass(frozen=True)
class Sandbox:
    """The walls a stdio server runs in (SPEC 26), or, with `problem`, why its `sandbox` value in
    `mcp.json` can't be used: it then does not start (it never runs unsandboxed instead)."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    network: bool = False
    problem: str = ""


def sandbox_of(value: Any, everyone: bool) -> Sandbox | None:
    """A stdio server's sandbox from its `sandbox` value as written (None when left out), or
    None when it runs unsandboxed; `everyone` is `AGENVOY_SANDBOX=all` (the server must say
    `"sandbox": false` to stay out)."""
    if value is None:
        return Sandbox() if everyone else None
    if value is False:
        return None
    if value is True:
        return Sandbox()
    if not isinstance(value, dict):
        return Sandbox(problem=_SANDBOX)
    try:
        config = SandboxConfig.check(value)
    except InputError as exc:
        return Sandbox(problem=exc.message)
    return Sandbox(tuple(config.read), tuple(config.write), config.network)


class ServerConfig(Contract):
    """One server of `mcp.json`, from `/v1`, the server form or an import. Keys it does not
    know are kept (another tool's, written beside ours)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    # Either is enough: the other is kept as it is (checked by the before-check below).
    command: Annotated[Any, WithJsonSchema({"type": "string"})] = None
    url: Annotated[Any, WithJsonSchema({"type": "string"})] = None
    # Left out, none of these is written; `null` is not a value of any of them.
    args: Annotated[list[str], Strict(), Message("server.args must be a list of strings")] = _LEFT_OUT
    env: Annotated[dict[str, str], Strict(), Message(_STRINGS.format("env"))] = _LEFT_OUT
    headers: Annotated[dict[str, str], Strict(), Message(_STRINGS.format("headers"))] = _LEFT_OUT
    type: Annotated[
        Literal["stdio", "streamable-http", "sse", "http"],
        Message("server.type must be stdio, streamable-http or sse"),
        Field(description="http is read as streamable-http; left out, command or url says"),
    ] = _LEFT_OUT
    disabled: Annotated[bool, Strict(), Message("server.disabled must be true or false")] = _LEFT_OUT
    timeout: Annotated[
        float,
        Field(strict=True, ge=1, description="seconds a call may take; left out, the console's default"),
        Message("server.timeout must be a number of seconds, at least 1"),
    ] = _LEFT_OUT
    sandbox: Annotated[
        Any,
        PlainValidator(_sandbox_value),
        WithJsonSchema(
            {"anyOf": [{"type": "boolean"}, SandboxConfig.model_json_schema()]},
        ),
        Field(description="stdio only: run the server under bubblewrap (SPEC 26)"),
    ] = _LEFT_OUT
    oauth: Annotated[
        OAuthConfig,
        Message("server.oauth must be an object"),
        Field(description="OAuth upstream (streamable-http and sse only)"),
    ] = _LEFT_OUT

    @model_validator(mode="after")
    def _oauth_over_http(self) -> Self:
        if self.oauth is not None and (
            self.type == "stdio" or not (isinstance(self.url, str) and self.url.strip())
        ):
            raise refuse("server.oauth applies to streamable-http and sse servers only")
        return self

    @model_validator(mode="after")
    def _sandbox_for_stdio(self) -> Self:
        # Only a process the console starts can be walled in; `false` is harmless anywhere.
        if self.sandbox not in (None, False) and (
            self.type in ("streamable-http", "sse", "http")
            or (self.type != "stdio" and isinstance(self.url, str) and self.url.strip())
        ):
            raise refuse("server.sandbox applies to stdio servers only")
        return self

    @model_validator(mode="before")
    @classmethod
    def _command_or_url(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not any(
            isinstance(data.get(k), str) and data[k].strip() for k in ("command", "url")
        ):
            raise refuse(_COMMAND_OR_URL)
        return data


def server_config(config: Any) -> dict:
    """A server's config checked (ServerConfig) and as it is written: the posted dict itself,
    keys and values as given, with the alias `type: http` read as `streamable-http`."""
    ServerConfig.check(config)
    if config.get("type") == "http":
        config = {**config, "type": "streamable-http"}
    return config


def _server_name(name: str) -> str:
    name = name.strip()
    problem = names.server_name_problem(name)
    if problem:
        raise refuse(f"invalid server name: {problem}")
    return name


ServerName = Annotated[
    str, Strict(), Message("name is required"), not_blank("name is required"), AfterValidator(_server_name)
]
_SERVER_NAME_ADAPTER: TypeAdapter[str] = TypeAdapter(ServerName)


def server_name(name: object) -> str:
    """A new server's name, checked as `POST /v1/mcp` checks it (the server form's name)."""
    try:
        return _SERVER_NAME_ADAPTER.validate_python(name)
    except ValidationError as exc:
        raise _input_error(None, exc) from None


def _config(value: Any) -> dict:
    try:
        return server_config(value)
    except InputError as exc:
        raise refuse(exc.message) from None


class ServerEdit(Contract):
    """`POST /v1/mcp`: add or change one server."""

    name: ServerName
    # The Message is for a missing `server`; every other answer is the config's (_config).
    server: Annotated[
        dict, Message(_COMMAND_OR_URL), PlainValidator(_config, json_schema_input_type=ServerConfig)
    ]


class ServerRef(Contract):
    """`POST /v1/mcp/remove`: the server to remove."""

    name: Annotated[
        str, Strict(), Message("name is required"), not_blank("name is required"), AfterValidator(str.strip)
    ]


_SERVER_NAME = "name must be a server name"


class AuthorizeBody(Contract):
    """`POST /v1/mcp/authorize`: the server whose authorization-code flow to start (16.2)."""

    name: Annotated[
        str, Strict(), Message("name is required"), not_blank("name is required"), AfterValidator(str.strip)
    ]


class ReconnectBody(Contract):
    """`POST /v1/mcp/reconnect`: one server, or every server when left out."""

    name: Annotated[
        str | None,
        Strict(),
        Message(_SERVER_NAME),
        _check(lambda v: v is None or _not_blank(v), _SERVER_NAME),
        AfterValidator(lambda v: v.strip() if v is not None else None),
    ] = None


# --- the allow-list (SPEC 2.2, 7) ---------------------------------------------------------------


def _entry_ok(entry: str) -> str:
    problem = allowlist.entry_problem(entry)
    if problem:
        raise refuse(f"{problem}: {entry!r}")
    return entry


class ToolAllow(Contract):
    """The `tool` block of `POST /v1/allowlist`: replace every entry starting with `prefix`
    by `entries` (each stripped, blank ones dropped, each starting with the prefix)."""

    prefix: Annotated[
        str,
        Strict(),
        Message("tool.prefix is required"),
        not_blank("tool.prefix is required"),
        AfterValidator(_entry_ok),
    ]
    entries: Annotated[
        list[str],
        Strict(),
        Message("tool.entries must be a list of strings"),
        BeforeValidator(_absent),
    ] = []

    @field_validator("entries")
    @classmethod
    def _under_prefix(cls, entries: list[str], info: ValidationInfo) -> list[str]:
        prefix = info.data.get("prefix")
        if prefix is None:
            return entries  # the prefix's own error comes first
        cleaned = [e.strip() for e in entries if e.strip()]
        for entry in cleaned:
            _entry_ok(entry)
            if not entry.startswith(prefix):
                raise refuse(f"every entry must start with the prefix: {entry}")
        return cleaned


class AllowEdit(Contract):
    """`POST /v1/allowlist`. Agenvoy's `skill` lists are not kept by this console."""

    tool: Annotated[ToolAllow, Message("tool must be an object")]

    @model_validator(mode="before")
    @classmethod
    def _tool_or_skill(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("tool") is None:
            if data.get("skill") is not None:
                raise refuse("skill allow-lists are not managed by this console")
            raise refuse("skill or tool is required")
        return data


# --- argument rules (SPEC 14.2) -----------------------------------------------------------------


def _one_a_line(lines: list[str]) -> list[str]:
    for number, line in enumerate(lines, start=1):
        if "\n" in line or "\r" in line:
            raise refuse(f"invalid rule on line {number}: one rule a line (no line breaks in an item)")
    return lines


class RulesEdit(Contract):
    """`POST /v1/rules`: the new `rules` file, one rule (or comment, or blank) an item. Each
    line is then parsed by the writer (`files.write_rules`), under the file's lock."""

    rules: Annotated[
        list[str],
        Strict(),
        Message("rules must be a list of strings, one rule each"),
        AfterValidator(_one_a_line),
    ]


# --- views (SPEC 19) ----------------------------------------------------------------------------


def _toolview_name(name: Any) -> str:
    name = name.strip() if isinstance(name, str) else name
    problem = toolviews.name_problem(name)
    if problem:
        raise refuse(f"invalid view name: {problem}")
    return name


def _patterns(patterns: list[str]) -> list[str]:
    """Each pattern as sent must be a registered-name shape: an empty one too is refused, not
    dropped (SPEC 19). Then trimmed and without repeats."""
    for pattern in patterns:
        if not toolviews.is_pattern(pattern.strip()):
            raise refuse(f"invalid pattern: {pattern}")
    return toolviews.clean_patterns(patterns)


def _pattern_list(field: str) -> Any:
    return Annotated[
        list[str],
        Strict(),
        Message(f"{field} must be a list of patterns"),
        BeforeValidator(_absent),
        AfterValidator(_patterns),
    ]


class ViewEdit(Contract):
    """`POST /v1/views`: create or replace one view. A tool is in it when an `include`
    pattern matches its registered name and no `exclude` pattern does; a pattern is a
    registered name or a prefix of one followed by `*`."""

    name: Annotated[
        str,
        PlainValidator(_toolview_name, json_schema_input_type=str),
        Field(description="section 3's server-name rules"),
    ]
    description: Annotated[
        str, Strict(), Message("description must be a string"), BeforeValidator(_absent)
    ] = ""
    include: _pattern_list("include") = []  # type: ignore[valid-type]
    exclude: _pattern_list("exclude") = []  # type: ignore[valid-type]

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("name") is None:
            raise refuse(f"invalid view name: {toolviews.name_problem(None)}")
        return data


class ViewRef(Contract):
    """`POST /v1/views/remove`: the view to remove."""

    name: Annotated[
        str, Strict(), Message("name is required"), not_blank("name is required"), AfterValidator(str.strip)
    ]


# --- groups (SPEC 23.3) ---------------------------------------------------------------------------

INVALID_GROUP = "invalid group name"
_AFTER = "escalate_after_minutes must be a whole number from 1"


def _group_name(name: Any) -> str:
    if not isinstance(name, str) or not rules.GROUP_NAME.match(name):
        raise refuse(INVALID_GROUP)
    return name


GroupName = Annotated[
    str, PlainValidator(_group_name, json_schema_input_type=str), Field(description="[a-z0-9_-]{1,64}")
]


class GroupEdit(Contract):
    """`POST /v1/groups`: make a group, or replace its people and escalation (SPEC 23.3, 24.3)."""

    name: GroupName
    people: Annotated[
        list[str], Strict(), Message("people must be a list of usernames"), BeforeValidator(_absent)
    ] = []
    escalate_to: Annotated[str | None, Strict(), Message("escalate_to must be a group name or null")] = None
    escalate_after_minutes: Annotated[
        int | None, Strict(), Message(_AFTER), _check(lambda v: v is None or v >= 1, _AFTER)
    ] = None

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("name") is None:
            raise refuse(INVALID_GROUP)
        return data


class GroupRef(Contract):
    """`POST /v1/groups/remove`: the group to remove."""

    name: Annotated[str, Strict(), Message("name is required"), not_blank("name is required")]


# --- JSON Schema for the descriptions -------------------------------------------------------------


class PlainJsonSchema(GenerateJsonSchema):
    """JSON Schema without pydantic's generated field titles (a field's name says it)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def tidy(schema: dict) -> dict:
    """A model's schema as a client reads it: no generated title (the docstring is its
    description), and no `"default": null` of a field that has no value when left out."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if prop.get("default", ...) is None:
            del prop["default"]
    return schema


def json_schema(model: type[BaseModel]) -> dict:
    """What a client may send as `model`, as JSON Schema 2020-12 (OpenAPI 3.1's dialect)."""
    out = tidy(model.model_json_schema(schema_generator=PlainJsonSchema))
    for definition in out.get("$defs", {}).values():
        tidy(definition)
    return out


# --- Claude Code's HTTP hooks (SPEC 17.1) ------------------------------------------------------------

PERMISSION_REQUEST, PRE_TOOL_USE = "PermissionRequest", "PreToolUse"
HOOK_EVENTS = (PERMISSION_REQUEST, PRE_TOOL_USE)


def _hook_event(value: Any) -> str:
    if value not in HOOK_EVENTS:
        shown = value if isinstance(value, str) else "" if value is None else str(value)
        raise refuse(f"unsupported hook event: {shown}")
    return value


def _hook_tool_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise refuse("tool_name is required")
    return value


def _hook_tool_input(value: Any) -> dict:
    if not isinstance(value, dict):
        raise refuse("tool_input must be an object")
    return value


def _text_or_empty(value: Any) -> str:
    return value if isinstance(value, str) else ""


class ClaudeCodeHook(Contract):
    """What Claude Code posts to `POST /v1/hooks/claude-code`, checked in the contract's order
    (the event, `tool_name`, `tool_input`). The other fields Claude Code sends
    (`transcript_path`, `permission_mode`, `permission_suggestions`, ...) are not read."""

    model_config = ConfigDict(extra="ignore", frozen=True, validate_default=True)

    hook_event_name: Annotated[
        str, PlainValidator(_hook_event, json_schema_input_type=Literal["PermissionRequest", "PreToolUse"])
    ] = ""
    tool_name: Annotated[str, PlainValidator(_hook_tool_name, json_schema_input_type=str)] = ""
    # None (absent) is validated too (validate_default): it is no object.
    tool_input: Annotated[dict, PlainValidator(_hook_tool_input, json_schema_input_type=dict)] = None  # type: ignore[assignment]
    session_id: Annotated[str, PlainValidator(_text_or_empty, json_schema_input_type=str)] = ""
    cwd: Annotated[str, PlainValidator(_text_or_empty, json_schema_input_type=str)] = ""
    tool_use_id: Annotated[str, PlainValidator(_text_or_empty, json_schema_input_type=str)] = ""


# --- export (SPEC 18.2) --------------------------------------------------------------------------------


def _query_value(name: str, parse: Callable[[str], Any]) -> PlainValidator:
    """An optional query parameter: empty counts as absent; a value `parse` refuses (it raises
    ValueError) answers `invalid <name>: <value>`."""

    def check(value: Any) -> Any:
        if value is None or value == "":
            return None
        try:
            return parse(value)
        except (ValueError, TypeError, AttributeError):
            raise refuse(f"invalid {name}: {value}") from None

    return PlainValidator(check, json_schema_input_type=str)


def _iso_time(raw: str) -> datetime.datetime:
    when = datetime.datetime.fromisoformat(raw.strip())
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def _one_of(*values: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in values:
            raise ValueError(raw)
        return raw

    return parse


class ExportQuery(Contract):
    """The query of `GET /v1/calls/export`; every parameter is optional, an empty one absent."""

    since: Annotated[
        datetime.datetime | None,
        _query_value("since", _iso_time),
        Field(description="ISO 8601 time of created_at, inclusive (UTC when it names no zone)"),
    ] = None
    until: Annotated[
        datetime.datetime | None,
        _query_value("until", _iso_time),
        Field(description="ISO 8601 time of created_at, exclusive"),
    ] = None
    server: Annotated[
        str | None,
        _query_value("server", str),
        Field(description="a server name (an unknown one matches nothing)"),
    ] = None
    tool: Annotated[
        str | None, _query_value("tool", str), Field(description="a registered tool name (likewise)")
    ] = None
    status: Annotated[str | None, _query_value("status", _one_of(*CallStatus.values))] = None
    kind: Annotated[
        str | None,
        _query_value("kind", _one_of(*HISTORY_KINDS)),
        Field(description="`tool`, `prompt`, `resource` or `permission_prompt` (SPEC 20.3)"),
    ] = None
    format: Annotated[
        str | None,
        _query_value("format", _one_of("jsonl", "csv")),
        Field(description="`jsonl` (default) or `csv`"),
    ] = None
    results: Annotated[
        str | None, _query_value("results", _one_of("0", "1")), Field(description="`1` includes results")
    ] = None


class AuditQuery(Contract):
    """The query of `GET /v1/audit` (SPEC 22.2), checked as the export's (18.2)."""

    since: Annotated[
        datetime.datetime | None,
        _query_value("since", _iso_time),
        Field(description="ISO 8601 time of the change, inclusive (UTC when it names no zone)"),
    ] = None
    until: Annotated[
        datetime.datetime | None,
        _query_value("until", _iso_time),
        Field(description="ISO 8601 time of the change, exclusive"),
    ] = None
    action: Annotated[str | None, _query_value("action", _one_of(*AuditAction.values))] = None
    actor: Annotated[
        str | None,
        _query_value("actor", str),
        Field(description="a username, a token's name, `file` or `system` (an unknown one matches nothing)"),
    ] = None
    format: Annotated[
        str | None,
        _query_value("format", _one_of("jsonl", "csv")),
        Field(description="`jsonl` (default) or `csv`"),
    ] = None
