"""The console's vocabulary: every state, status, kind and decision it stores or answers with.

The values are the contract (SPEC 5, 7, 13, 15): agents and pages read them as these exact
strings, so each member's value is its wire form and, where a page shows it, its label too.
Members are `str`s: they compare, hash, serialise to JSON and render in templates as the value.
Pure: imports nothing of the console and needs no settings.
"""

from django.db.models import TextChoices


class ServerState(TextChoices):
    """What the supervisor last observed of a server (`Server.state`)."""

    CONNECTED = "connected", "connected"
    CONNECTING = "connecting", "connecting"
    ERROR = "error", "error"
    DISABLED = "disabled", "disabled"
    # An OAuth server without valid tokens (SPEC 16.1): a person is needed, not a retry.
    NEEDS_AUTHORIZATION = "needs_authorization", "Needs authorization"


class GrantType(TextChoices):
    """How the console gets an OAuth server's tokens (`oauth.grant` in `mcp.json`, SPEC 16)."""

    AUTHORIZATION_CODE = "authorization_code", "authorization_code"
    CLIENT_CREDENTIALS = "client_credentials", "client_credentials"


class FlowStatus(TextChoices):
    """Where one authorization-code flow is (`OAuthFlow.status`, SPEC 16.2): asked for by a
    person, waiting for the browser to come back, the code arrived, or ended."""

    REQUESTED = "requested", "requested"
    WAITING = "waiting", "waiting"
    CODE = "code", "code"
    DONE = "done", "done"
    FAILED = "failed", "failed"


class Transport(TextChoices):
    """How the console reaches a server (`Server.transport`; `type` in `mcp.json`)."""

    STDIO = "stdio", "stdio"
    STREAMABLE_HTTP = "streamable-http", "streamable-http"
    SSE = "sse", "sse"


class CallStatus(TextChoices):
    """Where a tool call is (`ToolCall.status`): live while pending or running, then ended."""

    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    DONE = "done", "done"
    ERROR = "error", "error"
    SKIPPED = "skipped", "skipped"
    EXPIRED = "expired", "expired"
    ABORTED = "aborted", "aborted"
    CANCELLED = "cancelled", "cancelled"
    INTERRUPTED = "interrupted", "interrupted"


# The one place that says which statuses are live and which are final (as plain strings, so
# they go into SQL parameters as they are).
CALL_LIVE: frozenset[str] = frozenset({CallStatus.PENDING.value, CallStatus.RUNNING.value})
CALL_ENDED: frozenset[str] = frozenset(CallStatus.values) - CALL_LIVE


class Mode(TextChoices):
    """The gate's mode as recorded on a call (`ToolCall.mode`); a request's `single-confirm` and
    `always-allow` are aliases of these (`gate.MODES`)."""

    CONFIRM = "confirm", "confirm"
    AUTO = "auto", "auto"


class CallKind(TextChoices):
    """What a call asks (`ToolCall.kind`): a tool of an MCP server, a permission prompt
    (SPEC 13.5) about an agent's own tool, which never runs on a server, or a prompt get or a
    resource read on a server (SPEC 20.3).

    The history and `GET /v1/mcp/calls/<id>` call a tool call's kind `tool` (`history_kind`);
    the inbox keeps `tool_confirm` (SPEC 7)."""

    TOOL_CONFIRM = "tool_confirm", "tool_confirm"
    PERMISSION_PROMPT = "permission_prompt", "permission_prompt"
    PROMPT = "prompt", "prompt"
    RESOURCE = "resource", "resource"


def history_kind(kind: str) -> str:
    """A call's kind as the history and `GET /v1/mcp/calls/<id>` name it (SPEC 20.3)."""
    return "tool" if kind == CallKind.TOOL_CONFIRM else kind


# The kinds the History page and the export filter by, in the order the page offers them.
HISTORY_KINDS = ("tool", CallKind.PROMPT.value, CallKind.RESOURCE.value, CallKind.PERMISSION_PROMPT.value)


def stored_kind(kind: str) -> str:
    """The stored `ToolCall.kind` of a history kind (`history_kind` turned round)."""
    return CallKind.TOOL_CONFIRM.value if kind == "tool" else kind


class CallDecision(TextChoices):
    """Who or what let a call run or stopped it (`ToolCall.decision`; empty while pending).

    The gate's own: `auto`, `allowlist`, `session` (an allowance), `grant` (a time-boxed or
    remembered grant, SPEC 17.3), `rule` (an argument rule, either way). A person's reply: `approve`, `remember`, `session` (approve for the session),
    `deny`, `abort`. The clock's: `expired`. A read no rule held (prompts, resources): `default`.
    """

    AUTO = "auto", "auto"
    ALLOWLIST = "allowlist", "allowlist"
    SESSION = "session", "session"
    RULE = "rule", "rule"
    GRANT = "grant", "grant"
    APPROVE = "approve", "approve"
    REMEMBER = "remember", "remember"
    DENY = "deny", "deny"
    ABORT = "abort", "abort"
    EXPIRED = "expired", "expired"
    # A prompt get or a resource read that no rule held: they run unless a rule says otherwise
    # (SPEC 20.3).
    DEFAULT = "default", "default"


class RuleDecision(TextChoices):
    """What an argument rule (SPEC 14.2) says, in the order they win: deny, then ask, then allow;
    a `limit` line (SPEC 25.1) decides nothing but refuses a call over its rate."""

    DENY = "deny", "deny"
    ASK = "ask", "ask"
    ALLOW = "allow", "allow"
    LIMIT = "limit", "limit"


class Via(TextChoices):
    """The door a call came in by (`ToolCall.via`): `/v1/mcp/call` (and the pages), `/mcp`, or
    Claude Code's HTTP hooks (`/v1/hooks/claude-code`, SPEC 17.1)."""

    REST = "rest", "rest"
    MCP = "mcp", "mcp"
    HOOK = "hook", "hook"


class TokenRole(TextChoices):
    """An API token's role (SPEC 12), fixed when it is made."""

    AGENT = "agent", "Agent"
    APPROVER = "approver", "Approver"
    ADMIN = "admin", "Admin"


class PersonRole(TextChoices):
    """A person's role (SPEC 23.1), in the token roles' words; `viewer` has no token."""

    ADMIN = "admin", "Admin"
    APPROVER = "approver", "Approver"
    VIEWER = "viewer", "Viewer"


class TargetKind(TextChoices):
    """Where a notification goes (SPEC 15): a Standard Webhooks endpoint or an ntfy topic."""

    WEBHOOK = "webhook", "webhook"
    NTFY = "ntfy", "ntfy"


class DeliveryStatus(TextChoices):
    """One message to one target (`Delivery.status`): waiting (or between retries), or final."""

    PENDING = "pending", "pending"
    SENT = "sent", "sent"
    FAILED = "failed", "failed"


class AuditAction(TextChoices):
    """What an audit row records (SPEC 22.2): each change of what the console trusts or who
    may use it, exactly as the contract names it."""

    SERVER_ADD = "server.add", "server.add"
    SERVER_EDIT = "server.edit", "server.edit"
    SERVER_REMOVE = "server.remove", "server.remove"
    SERVER_AUTHORIZE = "server.authorize", "server.authorize"
    SERVER_FORGET = "server.forget", "server.forget"
    TRUST_CHANGE = "trust.change", "trust.change"
    RULES_CHANGE = "rules.change", "rules.change"
    VIEW_ADD = "view.add", "view.add"
    VIEW_EDIT = "view.edit", "view.edit"
    VIEW_REMOVE = "view.remove", "view.remove"
    TOKEN_CREATE = "token.create", "token.create"
    TOKEN_REVOKE = "token.revoke", "token.revoke"
    GRANT_ALLOW = "grant.allow", "grant.allow"
    GRANT_REVOKE = "grant.revoke", "grant.revoke"
    ALLOWANCE_ADD = "allowance.add", "allowance.add"
    ALLOWANCE_REVOKE = "allowance.revoke", "allowance.revoke"
    NOTIFY_ADD = "notify.add", "notify.add"
    NOTIFY_EDIT = "notify.edit", "notify.edit"
    NOTIFY_REMOVE = "notify.remove", "notify.remove"
    SIGNIN_OK = "signin.ok", "signin.ok"
    SIGNIN_FAILED = "signin.failed", "signin.failed"
    SIGNIN_LOCKED = "signin.locked", "signin.locked"
    MFA_ADD = "mfa.add", "mfa.add"
    MFA_REMOVE = "mfa.remove", "mfa.remove"
    PERSON_ADD = "person.add", "person.add"
    PERSON_EDIT = "person.edit", "person.edit"
    GROUP_ADD = "group.add", "group.add"
    GROUP_EDIT = "group.edit", "group.edit"
    GROUP_REMOVE = "group.remove", "group.remove"


class QuestionMode(TextChoices):
    """How a server asks (SPEC 20.4): a form built from its schema, or a URL to open."""

    FORM = "form", "form"
    URL = "url", "url"


class QuestionStatus(TextChoices):
    """Where a server's question is (`Question.status`): relayed to the MCP client (`asked`),
    waiting in the inbox (`pending`), or ended: `answered` (accept), `declined`,
    `cancelled` (a person's cancel, the client gone, the call ended) or `expired`."""

    ASKED = "asked", "asked"
    PENDING = "pending", "pending"
    ANSWERED = "answered", "answered"
    DECLINED = "declined", "declined"
    CANCELLED = "cancelled", "cancelled"
    EXPIRED = "expired", "expired"
