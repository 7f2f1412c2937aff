"""The console's vocabulary: every state, status, kind and decision it stores or answers with.

The values are the contract (SPEC 5, 7, 13, 15): agents and pages read them as these exact
strings, so each member's value is its wire form and, where a page shows it, its label too
(`Wire`: the label is the value; only token roles have labels of their own, for the Role select).
Members are `str`s: they compare, hash, serialise to JSON and render in templates as the value.
Pure: imports nothing of the console and needs no settings.
"""

from enum import property as enum_property

from django.db.models import TextChoices


class Wire(TextChoices):
    """Choices whose label is their value: the word of the contract is also the word shown."""

    @enum_property
    def label(self) -> str:
        return self.value


class ServerState(Wire):
    """What the supervisor last observed of a server (`Server.state`)."""

    CONNECTED = "connected"
    CONNECTING = "connecting"
    ERROR = "error"
    DISABLED = "disabled"


class Transport(Wire):
    """How the console reaches a server (`Server.transport`; `type` in `mcp.json`)."""

    STDIO = "stdio"
    STREAMABLE_HTTP = "streamable-http"
    SSE = "sse"


class CallStatus(Wire):
    """Where a tool call is (`ToolCall.status`): live while pending or running, then ended."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"
    SKIPPED = "skipped"
    EXPIRED = "expired"
    ABORTED = "aborted"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


# The one place that says which statuses are live and which are final (as plain strings, so
# they go into SQL parameters as they are).
CALL_LIVE: frozenset[str] = frozenset({CallStatus.PENDING.value, CallStatus.RUNNING.value})
CALL_ENDED: frozenset[str] = frozenset(CallStatus.values) - CALL_LIVE


class Mode(Wire):
    """The gate's mode as recorded on a call (`ToolCall.mode`); a request's `single-confirm` and
    `always-allow` are aliases of these (`gate.MODES`)."""

    CONFIRM = "confirm"
    AUTO = "auto"


class CallKind(Wire):
    """What a call asks (`ToolCall.kind`): a tool of an MCP server, or a permission prompt
    (SPEC 13.5) about an agent's own tool, which never runs on a server."""

    TOOL_CONFIRM = "tool_confirm"
    PERMISSION_PROMPT = "permission_prompt"


class CallDecision(Wire):
    """Who or what let a call run or stopped it (`ToolCall.decision`; empty while pending).

    The gate's own: `auto`, `allowlist`, `session` (an allowance), `grant` (a time-boxed or
    remembered grant, SPEC 17.3), `rule` (an argument rule, either way). A person's reply: `approve`, `remember`, `session` (approve for the session),
    `deny`, `abort`. The clock's: `expired`.
    """

    AUTO = "auto"
    ALLOWLIST = "allowlist"
    SESSION = "session"
    RULE = "rule"
    GRANT = "grant"
    APPROVE = "approve"
    REMEMBER = "remember"
    DENY = "deny"
    ABORT = "abort"
    EXPIRED = "expired"


class RuleDecision(Wire):
    """What an argument rule (SPEC 14.2) says, in the order they win: deny, then ask, then allow."""

    DENY = "deny"
    ASK = "ask"
    ALLOW = "allow"


class Via(Wire):
    """The door a call came in by (`ToolCall.via`): `/v1/mcp/call` (and the pages), `/mcp`, or
    Claude Code's HTTP hooks (`/v1/hooks/claude-code`, SPEC 17.1)."""

    REST = "rest"
    MCP = "mcp"
    HOOK = "hook"


class TokenRole(TextChoices):
    """An API token's role (SPEC 12), fixed when it is made."""

    AGENT = "agent", "Agent"
    APPROVER = "approver", "Approver"
    ADMIN = "admin", "Admin"


class TargetKind(Wire):
    """Where a notification goes (SPEC 15): a Standard Webhooks endpoint or an ntfy topic."""

    WEBHOOK = "webhook"
    NTFY = "ntfy"


class DeliveryStatus(Wire):
    """One message to one target (`Delivery.status`): waiting (or between retries), or final."""

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
