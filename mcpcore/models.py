"""The console's data. The database is the meeting point between the web side (what is wanted)
and the supervisor (what it observes); the shared files `mcp.json` and `allow_tool` stay the
truth for configuration and trust, and these tables mirror them."""

import datetime
import hashlib
import json
import secrets
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import models
from django.utils import timezone

from . import gate, names, schemas, toolviews
from .choices import (
    CALL_ENDED,
    AuditAction,
    CallDecision,
    CallKind,
    CallStatus,
    DeliveryStatus,
    FlowStatus,
    Mode,
    PersonRole,
    QuestionMode,
    QuestionStatus,
    ServerState,
    TargetKind,
    TokenRole,
    Transport,
    Via,
    history_kind,
)

SECRET_MASK = "********"


def transport_of(config: dict) -> str | None:
    """The transport a server config asks for: an explicit `type`, else `url` over `command`."""
    kind = config.get("type")
    if kind in Transport.values:
        return kind
    if kind == "http":
        return Transport.STREAMABLE_HTTP
    if isinstance(config.get("url"), str) and config["url"].strip():
        return Transport.STREAMABLE_HTTP
    if isinstance(config.get("command"), str) and config["command"].strip():
        return Transport.STDIO
    return None


class Server(models.Model):
    """One MCP server of `mcp.json`. `config` is its entry exactly as in the file (unknown keys
    included); the other fields are derived from it or observed by the supervisor. `signature`
    is the one record of the registered tool list's signature (SPEC 3): the supervisor compares
    a new listing with it, the server page with the one it was rendered from."""

    name = models.CharField(max_length=64, unique=True)
    config = models.JSONField(default=dict)
    transport = models.CharField(max_length=20, choices=Transport.choices, blank=True, default="")
    enabled = models.BooleanField(default=True)
    call_timeout = models.FloatField(null=True, blank=True)
    config_hash = models.CharField(max_length=64, default="")
    # Observed by the supervisor.
    state = models.CharField(max_length=20, choices=ServerState.choices, default=ServerState.CONNECTING)
    last_error = models.TextField(blank=True, default="")
    protocol_version = models.CharField(max_length=32, blank=True, default="")
    server_info = models.JSONField(default=dict, blank=True)
    instructions = models.TextField(blank=True, default="")
    signature = models.CharField(max_length=64, blank=True, default="")
    # The same record for its prompts, and for its resources with their templates (SPEC 20.1).
    prompt_signature = models.CharField(max_length=64, blank=True, default="")
    resource_signature = models.CharField(max_length=64, blank=True, default="")
    last_refresh = models.DateTimeField(null=True, blank=True)
    warnings = models.JSONField(default=list, blank=True)
    # The URIs (`uris`) and templates (`templates`) of this server that other servers claim
    # too, each with those servers' names (SPEC 20.2; `supervisor.registry.record_claims`).
    uri_claims = models.JSONField(default=dict, blank=True)
    # Scale-out lease: exactly one live worker owns a server's session.
    owner = models.CharField(max_length=64, blank=True, default="")
    lease_expires = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Not columns: set on the rows of the server pages for display (live.server_rows), the
    # OAuth standing on the server page's (live.server_with_count, oauth.page_info).
    refreshed_ago: str
    oauth_info: dict | None

    @property
    def needs_authorization(self) -> bool:
        return self.state == ServerState.NEEDS_AUTHORIZATION

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def prefix(self) -> str:
        return names.server_prefix(self.name)

    @property
    def is_connected(self) -> bool:
        return self.state == ServerState.CONNECTED

    @property
    def misconfigured(self) -> bool:
        return self.transport == ""

    @property
    def is_connecting(self) -> bool:
        return self.state == ServerState.CONNECTING

    @property
    def sandbox(self) -> schemas.Sandbox | None:
        """The walls this server runs in (SPEC 26), None when it runs unsandboxed; only a stdio
        server is ever sandboxed, and `AGENVOY_SANDBOX=all` sandboxes those left unsaid."""
        if self.transport != Transport.STDIO:
            return None
        return schemas.sandbox_of(self.config.get("sandbox"), settings.AGENVOY_SANDBOX == "all")

    @staticmethod
    def hash_config(config: dict) -> str:
        return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()

    def apply_config(self, config: dict) -> None:
        """Set `config` and everything derived from it."""
        self.config = config
        self.transport = transport_of(config) or ""
        self.enabled = not bool(config.get("disabled", False))
        timeout = config.get("timeout")
        self.call_timeout = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None
        self.config_hash = self.hash_config(config)

    def to_status(
        self, tool_count: int, oauth: dict | None = None, prompt_count: int = 0, resource_count: int = 0
    ) -> dict:
        """A `GET /v1/mcp/status` item; `oauth` (SPEC 16.1) only on servers that use OAuth;
        `resource_count` counts its resource templates too (SPEC 20.1)."""
        item = {
            "Name": self.name,
            "Transport": self.transport,
            "Connected": self.is_connected,
            "Error": self.last_error if not self.is_connected else "",
            "state": self.state,
            "tools": tool_count,
            "prompts": prompt_count,
            "resources": resource_count,
            "protocol": self.protocol_version,
            "last_refresh": iso(self.last_refresh),
            "worker": self.owner,
            "sandbox": self.sandbox is not None,
        }
        if oauth is not None:
            item["oauth"] = oauth
        return item


def mask_config(config: dict) -> dict:
    """A copy of a server config with every env and headers value replaced by the mask."""
    out = dict(config)
    for key in ("env", "headers"):
        if isinstance(out.get(key), dict):
            out[key] = {k: SECRET_MASK for k in out[key]}
    oauth = out.get("oauth")
    if isinstance(oauth, dict) and "client_secret" in oauth:
        out["oauth"] = {**oauth, "client_secret": SECRET_MASK}  # SPEC 16.3
    return out


SECRETS_REENTER = "secret values must be entered again when the server's command or url changes"


class SecretsMustBeReentered(ValueError):
    """A posted mask for a server whose command, args or url changed (SPEC 12.3)."""


def _where(config: dict | None) -> tuple[str, list, str]:
    """Where a server's secrets go: its command with its args (`node good.js` and
    `node evil.js` are two programs), and its url."""
    config = config or {}
    args = config.get("args") or []
    return (
        str(config.get("command") or "").strip(),
        [str(a) for a in args] if isinstance(args, list) else [str(args)],
        str(config.get("url") or "").strip(),
    )


def unmask_config(new: dict, old: dict | None) -> dict:
    """Posting the mask back keeps the stored secret value, but only while the server's
    `command`, `args` and `url` stay as stored: else a stored token could be sent to a new
    place (or read by a new script)."""
    oauth = new.get("oauth")
    posts_mask = any(
        v == SECRET_MASK
        for key in ("env", "headers")
        if isinstance(new.get(key), dict)
        for v in new[key].values()
    ) or (isinstance(oauth, dict) and oauth.get("client_secret") == SECRET_MASK)
    # A new server has nothing stored to keep: its masked values simply become empty.
    if posts_mask and old is not None and _where(new) != _where(old):
        raise SecretsMustBeReentered(SECRETS_REENTER)
    out = dict(new)
    for key in ("env", "headers"):
        values = out.get(key)
        if isinstance(values, dict):
            previous = (old or {}).get(key) or {}
            out[key] = {k: (previous.get(k, "") if v == SECRET_MASK else v) for k, v in values.items()}
    if isinstance(oauth, dict) and oauth.get("client_secret") == SECRET_MASK:
        before = (old or {}).get("oauth")
        out["oauth"] = {
            **oauth,
            "client_secret": before.get("client_secret", "") if isinstance(before, dict) else "",
        }
    return out


def iso(value) -> str | None:
    if value is None:
        return None
    return value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")


class Tool(models.Model):
    """A tool of a connected server, registered as `mcp__<server>__<tool>`. Rows of a server are
    replaced together when its server's tool-list signature (`Server.signature`) changes."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="tools")
    tool_name = models.CharField(max_length=512)
    registered_name = models.CharField(max_length=700, unique=True)
    title = models.CharField(max_length=512, blank=True, default="")
    description = models.TextField(blank=True, default="")
    input_schema = models.JSONField(default=dict)
    annotations = models.JSONField(default=dict, blank=True)
    # The server's outputSchema, when it declared one (served again on /mcp, SPEC 13.2).
    output_schema = models.JSONField(null=True, blank=True)
    digest = models.CharField(max_length=64, blank=True, default="")  # definition digest (14.1)
    llm_safe = models.BooleanField(default=True)
    position = models.PositiveIntegerField(default=0)
    # The tool's `_meta` as the server gave it (`ui.resourceUri`, `ui.visibility`: SPEC 20.5).
    meta = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["server__name", "tool_name"]

    def __str__(self) -> str:
        return self.registered_name

    def to_dict(self) -> dict:
        return {
            "name": self.registered_name,
            "description": self.description,
            "parameters": self.input_schema,
            "server": self.server.name,
            "tool": self.tool_name,
            "llm_safe": self.llm_safe,
            # A down server's tools stay registered; agents can see they won't run now.
            "available": self.server.is_connected,
        }


class Prompt(models.Model):
    """A prompt of a connected server (SPEC 20.1), registered as `mcp__<server>__<prompt>` by
    section 3's rules. Rows of a server are replaced together when `Server.prompt_signature`
    changes."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="prompts")
    name = models.CharField(max_length=512)
    registered_name = models.CharField(max_length=700, unique=True)
    title = models.CharField(max_length=512, blank=True, default="")
    description = models.TextField(blank=True, default="")
    # [{"name", "description"?, "required"?, "title"?}] as the server gave them; None when it
    # gave no `arguments` key, which is not the same on the wire as `[]` (SPEC 20.2).
    arguments = models.JSONField(null=True, blank=True, default=list)
    meta = models.JSONField(default=dict, blank=True)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["server__name", "position", "name"]

    def __str__(self) -> str:
        return self.registered_name


class Resource(models.Model):
    """A resource a connected server lists (SPEC 20.1). Its URI is served unchanged; rows of a
    server are replaced together with its templates when `Server.resource_signature` changes."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="resources")
    uri = models.TextField()
    name = models.CharField(max_length=512, blank=True, default="")
    title = models.CharField(max_length=512, blank=True, default="")
    description = models.TextField(blank=True, default="")
    mime_type = models.CharField(max_length=255, blank=True, default="")
    size = models.BigIntegerField(null=True, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    meta = models.JSONField(default=dict, blank=True)
    position = models.PositiveIntegerField(default=0)
    # Not a column: the other servers claiming the same URI, for the server page
    # (display.uri_claims, from Server.uri_claims).
    also: list[str]

    class Meta:
        ordering = ["server__name", "position"]

    def __str__(self) -> str:
        return self.uri


def ui_uri(meta: Any) -> str | None:
    """The `ui://` resource a tool names as its app (`_meta.ui.resourceUri`, or the older flat
    key `ui/resourceUri`)."""
    ui = meta.get("ui") if isinstance(meta, dict) else None
    uri = ui.get("resourceUri") if isinstance(ui, dict) else None
    if not isinstance(uri, str) and isinstance(meta, dict):
        uri = meta.get("ui/resourceUri")
    return uri if isinstance(uri, str) and uri else None


class ResourceTemplate(models.Model):
    """A resource template (RFC 6570 URI template) a connected server lists (SPEC 20.1)."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="resource_templates")
    uri_template = models.TextField()
    name = models.CharField(max_length=512, blank=True, default="")
    title = models.CharField(max_length=512, blank=True, default="")
    description = models.TextField(blank=True, default="")
    mime_type = models.CharField(max_length=255, blank=True, default="")
    annotations = models.JSONField(default=dict, blank=True)
    meta = models.JSONField(default=dict, blank=True)
    position = models.PositiveIntegerField(default=0)
    # Not a column: the other servers claiming a URI it matches (display.uri_claims).
    also: list[str]

    class Meta:
        ordering = ["server__name", "position"]

    def __str__(self) -> str:
        return self.uri_template


class ResourceSubscription(models.Model):
    """A resource some MCP client of the console subscribed to (SPEC 20.2): the worker holding
    the server subscribes upstream to every URI listed here for it (at connect, and when told
    of a new one), so a new holder after a failover subscribes again."""

    server_name = models.CharField(max_length=64)
    uri = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["server_name", "uri"], name="mcpcore_subscription_uniq")
        ]


class View(models.Model):
    """A named set of tools (SPEC 19): a tool is in it when one of `include` matches its
    registered name and none of `exclude` does (`toolviews.Selection`). Served on
    `/mcp/v/<name>`; tokens may be limited to views."""

    name = models.CharField(max_length=64, unique=True)
    description = models.TextField(blank=True, default="")
    include = models.JSONField(default=list)
    exclude = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def selection(self) -> "toolviews.Selection":
        return toolviews.Selection(self.include, self.exclude)


class AllowEntry(models.Model):
    """One line of `allow_tool`; the table mirrors the file, which stays the shared truth."""

    entry = models.CharField(max_length=700, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["entry"]


class ApiToken(models.Model):
    """A bearer token for `/v1`. Only its SHA-256 is stored; the token is shown once. Its role
    (SPEC 12) is fixed when it is made: a party that needs other rights gets a new token."""

    name = models.CharField(max_length=100)
    role = models.CharField(max_length=10, choices=TokenRole.choices, default=TokenRole.AGENT)
    token_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=12, default="")
    may_auto = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Limited to views (SPEC 19): it sees only the tools of `views`, none when it has none
    # left. Fixed when it is made, like the role; an unlimited token sees everything.
    view_limited = models.BooleanField(default=False, db_default=False)
    views: "models.ManyToManyField[View, Any]" = models.ManyToManyField(
        "View", blank=True, related_name="tokens"
    )
    # Not columns: set on the rows of the tokens page for display (views._token_rows), the
    # grants in force by its Prefetch(to_attr="grants").
    used_ago: str
    grants: list["PermissionGrant"]

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def hash(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    @classmethod
    def issue(
        cls,
        name: str,
        may_auto: bool = True,
        role: str = TokenRole.AGENT,
        views: list["View"] | None = None,
    ) -> tuple["ApiToken", str]:
        """Create a token; returns the row and the clear token, which is never stored. Given
        `views` (a list, even an empty one), the token is limited to them (SPEC 19)."""
        if role not in TokenRole.values:
            raise ValueError(f"unknown role: {role}")
        token = "agv_" + secrets.token_urlsafe(32)
        row = cls.objects.create(
            name=name,
            token_hash=cls.hash(token),
            hint=token[:8],
            may_auto=may_auto,
            role=role,
            view_limited=views is not None,
        )
        if views:
            row.views.set(views)
        return row, token

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class Person(models.Model):
    """A person's place in the console (SPEC 23.1): the role of an account that signs in to the
    browser. An account without this row is an `admin`: `createsuperuser`, `make run`'s first
    `admin` and everyone who existed before roles (migration 0026 writes their rows)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="person")
    role = models.CharField(max_length=10, choices=PersonRole.choices, default=PersonRole.ADMIN)
    # Set by the identity provider at each sign-in (SPEC 23.2, AGENVOY_OIDC_ROLES): the People
    # page shows role and groups as `from SSO`, not editable.
    from_sso = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.user} ({self.role})"


class Group(models.Model):
    """A group of people and approver tokens (SPEC 23.3) that confirmations are routed to (24),
    made on the People page, by `POST /v1/groups`, or by the identity provider's claim."""

    name = models.CharField(max_length=64, unique=True)
    people: "models.ManyToManyField[Any, Any]" = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="console_groups"
    )
    tokens: "models.ManyToManyField[ApiToken, Any]" = models.ManyToManyField(
        "ApiToken", blank=True, related_name="groups"
    )
    # Escalation (SPEC 24.3): a confirmation for this group still pending after
    # `escalate_after_minutes` is also for `escalate_to`.
    escalate_to = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="escalated_from"
    )
    escalate_after_minutes = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AppClient(models.Model):
    """An app known to the console as an OAuth authorization server (SPEC 21.2): registered
    through `POST /register` (RFC 7591), or read from its Client ID Metadata Document (an
    `https` client_id, `document`; the row is that document kept, read again after 5 minutes).
    A registered client nobody allowed (`allowed_at` unset) is dropped after 24 hours; `used_at`
    (when a person last had it on the `Allow an app` page) keeps it while strangers'
    registrations pass the 100 kept."""

    client_id = models.CharField(max_length=2000, unique=True)
    name = models.CharField(max_length=200, default="")
    redirect_uris = models.JSONField(default=list)
    auth_method = models.CharField(max_length=30, default="none")
    secret = models.TextField(default="", blank=True)  # sealed (mcpcore.oauth.upstream.seal); "" for none
    document = models.BooleanField(default=False)
    address = models.CharField(max_length=64, default="", blank=True)  # who registered it
    created_at = models.DateTimeField(default=timezone.now)
    fetched_at = models.DateTimeField(null=True, blank=True)
    allowed_at = models.DateTimeField(null=True, blank=True)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["address", "created_at"])]

    def __str__(self) -> str:
        return self.name or self.client_id


class AppGrant(models.Model):
    """One app allowed by one person (SPEC 21.4): it owns a real agent `ApiToken` (named
    `<client name> (app of <person>)`, limited to the chosen views) that the app's access
    tokens stand for, so an app is exactly a token of that role and those views."""

    client = models.ForeignKey(AppClient, on_delete=models.CASCADE, related_name="grants")
    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="app_grants")
    token = models.OneToOneField(ApiToken, on_delete=models.CASCADE, related_name="app_grant")
    resource = models.CharField(max_length=300)  # the endpoint's path: /mcp, /mcp/<server>, ...
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.token.name


class AppCode(models.Model):
    """An authorization code (SPEC 21.3), kept only as its SHA-256: single use, 60 seconds,
    bound to its client, redirect URI, PKCE challenge, resource and grant."""

    code_hash = models.CharField(max_length=64, unique=True)
    grant = models.ForeignKey(AppGrant, on_delete=models.CASCADE, related_name="codes")
    redirect_uri = models.CharField(max_length=2000)
    redirect_uri_explicit = models.BooleanField(default=True)
    code_challenge = models.CharField(max_length=128)
    resource = models.CharField(max_length=2000, default="", blank=True)  # as the client sent it
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)


class AppToken(models.Model):
    """An access or refresh token of a grant, kept only as its SHA-256. A refresh token is
    replaced at every use (`replaced_at`); the one just replaced may be used once more within
    30 seconds (`grace_used`). `code`: the authorization code the chain began with."""

    ACCESS, REFRESH = "access", "refresh"
    token_hash = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=10)
    grant = models.ForeignKey(AppGrant, on_delete=models.CASCADE, related_name="tokens")
    code = models.ForeignKey(AppCode, on_delete=models.SET_NULL, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    replaced_at = models.DateTimeField(null=True, blank=True)
    grace_used = models.BooleanField(default=False)
    revoked_at = models.DateTimeField(null=True, blank=True)


def time_ordered_uuid() -> uuid.UUID:
    """A version 7 UUID (RFC 9562): milliseconds since the epoch, then 74 random bits. Call
    rows keyed by it are appended at the end of their indexes instead of anywhere in them, so
    a call dirties a few pages that the next ones share rather than pages of their own."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(secrets.token_bytes(10))
    value = (
        (ms & (2**48 - 1)) << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64 | 0b10 << 62 | rand & (2**62 - 1)
    )
    return uuid.UUID(int=value)


class ToolCall(models.Model):
    """One call, from request through the gate to its result: of a server's tool, a prompt get
    or a resource read, or a permission prompt about an agent's own tool, which never runs on a
    server (`kind`); made through `/v1` or a page's try-it, `/mcp`, or a Claude Code hook
    (`via`). A call waiting for a person (status `pending`) is the pending confirmation:
    `confirm_id` names it. Its statuses, kinds, decisions and doors are in `choices`; the call
    layer (`mcpcore.calls`) writes it, through `db.callsql`."""

    id = models.UUIDField(primary_key=True, default=time_ordered_uuid, editable=False)
    # A permission prompt (SPEC 13.5) asks about an agent's own tool: never run on a server.
    kind = models.CharField(max_length=20, choices=CallKind.choices, default=CallKind.TOOL_CONFIRM)
    # Unique among confirmations (see Meta); calls that run at once have none.
    confirm_id = models.UUIDField(null=True, blank=True)
    # Indexed with created_at (see Meta): the History page's filters, newest first.
    session_id = models.CharField(max_length=200)
    tool_name = models.CharField(max_length=700)
    server_name = models.CharField(max_length=64)
    tool = models.CharField(max_length=512)
    arguments = models.JSONField(default=dict)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.CONFIRM)
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.SET_NULL)
    requested_by = models.CharField(max_length=150, blank=True, default="")
    # Indexed through (status, created_at), which serves lookups by status alone too.
    status = models.CharField(max_length=12, choices=CallStatus.choices, default=CallStatus.PENDING)
    decision = models.CharField(max_length=20, choices=CallDecision.choices, blank=True, default="")
    decided_by = models.CharField(max_length=150, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=64, blank=True, default="")
    result = models.TextField(blank=True, default="")
    is_error = models.BooleanField(default=False)
    truncated = models.BooleanField(default=False)
    result_bytes = models.PositiveBigIntegerField(default=0)
    raw_result = models.TextField(blank=True, default="")
    raw_truncated = models.BooleanField(default=False)
    rule = models.TextField(blank=True, default="")  # the argument rule that decided (14.2)
    definition_changed = models.BooleanField(default=False)  # pinned tool changed (14.1)
    # Held as a repeat (SPEC 25.2): the times this token had already made the same call within
    # AGENVOY_REPEAT_LIMIT's window; 0 for any other call.
    repeated = models.PositiveIntegerField(default=0, db_default=0)
    # Not stored: for a call a limit line refused (SPEC 25.1), whole seconds until one more fits.
    retry_after: int | None = None

    # How far the notifier (calls/notify.py) has told notification targets about this confirmation:
    # 0 nothing yet, 1 that it is pending, 2 that it ended too (or nothing to tell).
    notified = models.PositiveSmallIntegerField(default=0)
    # Which door the call came in by: `rest` (/v1/mcp/call, and a page's try-it), `mcp` (the
    # /mcp endpoints) or `hook` (Claude Code's HTTP hooks, SPEC 17.1).
    via = models.CharField(max_length=4, choices=Via.choices, default=Via.REST)
    # The agent's working directory, as a Claude Code hook gave it (SPEC 17.1).
    cwd = models.CharField(max_length=1000, blank=True, default="")
    # For via=mcp: the upstream CallToolResult as wire JSON, when at most AGENVOY_RESULT_CAP
    # bytes, so the MCP client gets it as it was (SPEC 13.3).
    native_result = models.JSONField(null=True, blank=True)
    # When the /v1 client that made this pending call hung up before it ended: the inbox says
    # the agent stopped waiting (a person's answer still counts, and the agent may fetch the
    # result later). Cleared when an agent waits on the call again.
    agent_left_at = models.DateTimeField(null=True, blank=True)
    # The elicitation modes the MCP client that made the call declared (`form`, `url`, both
    # comma-separated, or none): a server's question is relayed to it when it can answer that
    # mode, else it goes to the inbox (SPEC 20.4).
    client_asks = models.CharField(max_length=10, blank=True, default="")
    # Edit and approve (SPEC 24.5): who changed the arguments before approving, and the
    # arguments as the agent asked (`arguments` holds them as run); None and "" otherwise.
    requested_arguments = models.JSONField(null=True, blank=True)
    edited_by = models.CharField(max_length=150, blank=True, default="")
    # Who decides a confirmation (SPEC 24.1, 24.2): the group its `ask[<group>]` line names
    # ("" for every approver and admin), the approvals it needs, and those it has so far
    # (`[{"by", "at"}]`, in order).
    for_group = models.CharField(max_length=64, blank=True, default="", db_default="")
    approvals_needed = models.PositiveSmallIntegerField(default=1, db_default=1)
    approvals = models.JSONField(default=list, db_default=[])
    # Escalation (SPEC 24.3): the group it is also for once its group's time passed, and when.
    escalated_to = models.CharField(max_length=64, blank=True, default="", db_default="")
    escalated_at = models.DateTimeField(null=True, blank=True)

    # The W3C `traceparent` of the door's span for this call when traces are exported (SPEC
    # 27): whoever runs the call or records a person's decision, in any process, continues
    # that trace. Empty when tracing is off.
    traceparent = models.CharField(max_length=55, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        # Each index costs every call's INSERT (and a status index its UPDATE too): calls that
        # run at once leave the confirmation indexes alone.
        constraints = [
            models.UniqueConstraint(
                fields=["confirm_id"],
                name="mcpcore_toolcall_confirm_id_uniq",
                condition=models.Q(confirm_id__isnull=False),
            ),
        ]
        indexes = [
            # Each filter of the History page with the time order of its pages (SPEC 18.4):
            # a page of a million calls is one index range, whichever filter is set. As many
            # indexes as before: each replaced one on the filter's column alone.
            models.Index(fields=["status", "created_at"], name="mcpcore_call_status_time"),
            models.Index(fields=["server_name", "created_at"], name="mcpcore_call_server_time"),
            models.Index(fields=["tool_name", "created_at"], name="mcpcore_call_tool_time"),
            models.Index(fields=["session_id", "created_at"], name="mcpcore_call_session_time"),
            # The History page's kind filter (SPEC 20.3) for the kinds other than tool calls:
            # partial, so a tool call's INSERT (nearly every call) writes nothing to it.
            models.Index(
                fields=["kind", "created_at"],
                name="mcpcore_call_kind_time",
                condition=~models.Q(kind="tool_confirm"),
            ),
            # The notifier's question every second: confirmations not yet told about in full.
            models.Index(
                fields=["created_at"],
                name="mcpcore_call_to_notify",
                condition=models.Q(confirm_id__isnull=False, notified__lt=2),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.status})"

    @property
    def is_pending(self) -> bool:
        return self.status == CallStatus.PENDING

    @property
    def ended(self) -> bool:
        return self.status in CALL_ENDED

    @property
    def is_permission_prompt(self) -> bool:
        return self.kind == CallKind.PERMISSION_PROMPT

    @property
    def history_kind(self) -> str:
        """The kind as the history names it (SPEC 20.3): `tool` for a tool call."""
        return history_kind(self.kind)

    @property
    def uri(self) -> str | None:
        """A resource read's URI, whole (`tool_name` holds it cut to 700 characters); None for
        any other kind."""
        if self.kind != CallKind.RESOURCE:
            return None
        uri = self.arguments.get("uri") if isinstance(self.arguments, dict) else None
        return uri if isinstance(uri, str) else self.tool_name

    @property
    def repeat_note(self) -> str:
        """`Repeated <n> times in <window>` for a call held as a repeat (SPEC 25.2), else ""."""
        if not self.repeated:
            return ""
        return gate.repeat_text(self.repeated, settings.AGENVOY_REPEAT_LIMIT.partition("/")[2])

    @property
    def for_note(self) -> str:
        """`For <group>`, and `, escalated to <other>` once escalated (SPEC 24.1, 24.3); "" for
        a call no group holds."""
        if not self.for_group:
            return ""
        return f"For {self.for_group}" + (f", escalated to {self.escalated_to}" if self.escalated_to else "")

    @property
    def approvals_note(self) -> str:
        """`1 of 2 approvals: <who>` for a call that needs several (SPEC 24.2), else ""."""
        if self.approvals_needed < 2:
            return ""
        said = f"{len(self.approvals)} of {self.approvals_needed} approvals"
        return said + (": " + ", ".join(a["by"] for a in self.approvals) if self.approvals else "")

    @property
    def is_prompt_or_resource(self) -> bool:
        """A prompt get or a resource read (SPEC 20.3): held only by an `ask` rule, so it is
        approved once or denied (no remember, session or time-boxed approval)."""
        return self.kind in (CallKind.PROMPT, CallKind.RESOURCE)

    @property
    def action(self) -> str:
        """What the call asks, as the history and the inbox say it: `Get prompt <registered
        name>`, `Read <uri> from <server>`, else the tool's name."""
        if self.kind == CallKind.PROMPT:
            return f"Get prompt {self.tool_name}"
        if self.kind == CallKind.RESOURCE:
            return f"Read {self.uri} from {self.server_name}"
        return self.tool_name

    @property
    def duration(self) -> float | None:
        if self.started_at and self.ended_at:
            return (self.ended_at - self.started_at).total_seconds()
        return None

    def to_answer(self) -> dict:
        """The body `POST /v1/mcp/call` answers with."""
        body: dict[str, Any] = {
            "call_id": str(self.id),
            "session_id": self.session_id,
            "status": self.status,
        }
        if self.ended:
            body["result"] = self.result
            body["is_error"] = self.is_error
            if self.status == CallStatus.ABORTED:
                body["abort"] = True
        else:
            body["confirm_id"] = str(self.confirm_id) if self.confirm_id else None
        return body

    def to_dict(self) -> dict:
        body = self.to_answer()
        body.update(
            {
                "tool": self.tool_name,
                "arguments": self.arguments,
                "mode": self.mode,
                "decision": self.decision,
                "decided_by": self.decided_by,
                "reason": self.reason,
                "confirm_id": str(self.confirm_id) if self.confirm_id else None,
                "created_at": iso(self.created_at),
                "decided_at": iso(self.decided_at),
                "started_at": iso(self.started_at),
                "ended_at": iso(self.ended_at),
                "expires_at": iso(self.expires_at),
                "duration": self.duration,
                "truncated": self.truncated,
                "rule": self.rule,
                "via": self.via,
                "kind": self.history_kind,
                "requested_arguments": self.requested_arguments,
                "edited_by": self.edited_by,
                "for": self.for_group or None,
                "approvals": self.approvals,
            }
        )
        if self.kind == CallKind.RESOURCE:
            body["uri"] = self.uri
        return body

    def to_pending(self) -> dict:
        item = {
            "id": str(self.confirm_id),
            "kind": self.kind,
            "session_id": self.session_id,
            "tool_name": self.tool_name,
            "tool_args": self.arguments,
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "call_id": str(self.id),
            "changed": self.definition_changed,
            "repeated": self.repeated,
            "for": self.for_group or None,
            "approvals": self.approvals,
        }
        if self.via == "hook":
            item["cwd"] = self.cwd
        if self.kind == CallKind.RESOURCE:
            item["uri"] = self.uri
        return item


class Question(models.Model):
    """A question a server asked during a call (elicitation, SPEC 20.4): relayed to the MCP
    client that made the call when it declared that mode (status `asked`), else a pending item
    of kind `question` in the inbox (status `pending`) until a person answers, declines or
    cancels it, it expires (the server gets `cancel`), or the call ends. Its id is the
    pending item's id (`GET /v1/pending`, `POST /v1/pending/<id>/answer`, `/pending/<id>/`).
    Kept with its call for the history.

    `guessed`: the server could not say which call asked (a 2025 server with calls of several
    tokens or client sessions in flight); `call` is then the likeliest, and the question went
    to the inbox for people alone: never relayed, never shown to an agent."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    call = models.ForeignKey("ToolCall", on_delete=models.CASCADE, related_name="questions")
    guessed = models.BooleanField(default=False)
    server_name = models.CharField(max_length=64)
    mode = models.CharField(max_length=4, choices=QuestionMode.choices, default=QuestionMode.FORM)
    message = models.TextField(blank=True, default="")
    # Form mode: the server's `requestedSchema`; URL mode: the URL and its elicitation id.
    schema = models.JSONField(null=True, blank=True)
    url = models.TextField(blank=True, default="")
    elicitation_id = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(max_length=10, choices=QuestionStatus.choices, default=QuestionStatus.PENDING)
    # What went back to the server: {"action": "accept" | "decline" | "cancel", "content"?: {...}}.
    answer = models.JSONField(null=True, blank=True)
    answered_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    # How far the notifier has told notification targets (as ToolCall.notified).
    notified = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["status", "created_at"], name="mcpcore_question_status_time")]

    def __str__(self) -> str:
        return f"{self.server_name} asks: {self.message[:40]} ({self.status})"


class SessionAllowance(models.Model):
    """ "Approve for this session": every tool called with this session id by this token runs
    without asking until the allowance is revoked (SPEC 12.2). Another token sending the same
    session id gets nothing; `token` is empty for the console's own (browser) calls."""

    session_id = models.CharField(max_length=200, db_index=True)
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.CASCADE)
    granted_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]


class Worker(models.Model):
    """A live supervisor (the embedded one or an `mcpworker`): its channel and heartbeat."""

    name = models.CharField(max_length=64, unique=True)
    channel = models.CharField(max_length=200)
    heartbeat = models.DateTimeField(default=timezone.now)


class FileState(models.Model):
    """What happened the last time a shared file was read: its problem, if it has one."""

    name = models.CharField(max_length=32, unique=True)
    error = models.TextField(blank=True, default="")
    checked_at = models.DateTimeField(default=timezone.now)


# --- permission prompts (SPEC 13.5) -------------------------------------------------------------


class PermissionGrant(models.Model):
    """A tool name granted to one token, kept in the console (never in `allow_tool`):

    - "Approve and remember" on a permission prompt (`kind` permission_prompt, no `expires_at`):
      later prompts of this exact `tool_name` (the agent's own tool, e.g. `Bash`) by this token
      are allowed at once, until revoked on the Tokens page (SPEC 13.5);
    - "Approve for 1 hour" or `remember_for` (SPEC 17.3), on either kind of call: the same, until
      `expires_at`; for a tool call (`kind` tool_confirm) `tool_name` is the registered name.

    A grant applies to calls of its own kind only; revoking the token ends its grants."""

    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="permission_grants")
    kind = models.CharField(max_length=20, choices=CallKind.choices, default=CallKind.PERMISSION_PROMPT)
    tool_name = models.CharField(max_length=700)
    granted_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)  # None: until revoked
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Not a column: how long it has left, set for the tokens page (views._token_rows).
    left_text: str

    class Meta:
        ordering = ["tool_name"]
        indexes = [models.Index(fields=["token", "tool_name"])]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.token_id})"

    @classmethod
    def in_force(cls, now=None):
        """Grants neither revoked nor past their end."""
        now = now or timezone.now()
        return cls.objects.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


# --- trust that follows the tool (SPEC 14) ----------------------------------------------------


class ToolPin(models.Model):
    """The definition of a tool when it became trusted. A trusted tool whose digest no longer
    matches its pin waits for a person in every mode until it is trusted again."""

    registered_name = models.CharField(max_length=700, unique=True)
    digest = models.CharField(max_length=64)
    description = models.TextField(blank=True, default="")
    input_schema = models.JSONField(default=dict)
    pinned_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["registered_name"]


class RuleLine(models.Model):
    """One rule of the last good `rules` file: what stays in force while the file has a bad
    line (the file, when it parses, is the truth)."""

    line = models.PositiveIntegerField()
    text = models.TextField()

    class Meta:
        ordering = ["line"]


# --- notifications (SPEC 15) ------------------------------------------------------------------


class NotificationTarget(models.Model):
    """Where the console tells people about confirmations: a Standard Webhooks endpoint, signed
    with `secret` (`whsec_<base64>`, shown once when made), or an ntfy topic URL, whose
    `secret` is its optional access token (sent as `Authorization: Bearer`, never shown)."""

    # What people call it (SPEC 15; default: the URL's host), e.g. in `<name> (one-tap)`.
    name = models.CharField(max_length=100, blank=True, default="")
    kind = models.CharField(max_length=10, choices=TargetKind.choices)
    url = models.URLField(max_length=2000)
    # Kept in clear: signing (or the ntfy header) needs it. Never shown again after the page
    # that made it.
    secret = models.CharField(max_length=200, blank=True, default="")
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    # The groups whose confirmations and questions it gets (SPEC 24.7); none: all of them.
    groups: "models.ManyToManyField[Group, Any]" = models.ManyToManyField(
        Group, blank=True, related_name="targets"
    )
    # Not a column: its latest deliveries, set for the Notifications page (views._targets).
    recent: list["Delivery"]

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.url}"

    def save(self, *args, **kwargs) -> None:
        # Without a name it is called by its URL's host (SPEC 15), however it is made.
        if not self.name.strip():
            self.name = (urlsplit(self.url).hostname or self.url)[:100]
        super().save(*args, **kwargs)

    def group_names(self) -> frozenset[str]:
        """The groups it names (prefetched `groups` when the caller did)."""
        return frozenset(g.name for g in self.groups.all())


class Delivery(models.Model):
    """One message to one target, sent (and retried) by the notifier in the background. The
    body is stored as sent, so every retry carries the same bytes and the same `message_id`."""

    target = models.ForeignKey(NotificationTarget, on_delete=models.CASCADE, related_name="deliveries")
    # The confirmation it tells of (none for a test message): retention deletes the two
    # together (SPEC 18.1). A plain column, so deleting calls stays one DELETE per batch.
    call_id = models.UUIDField(null=True, blank=True, db_index=True)
    event_type = models.CharField(max_length=40)
    message_id = models.CharField(max_length=64, unique=True)
    body = models.TextField()
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="mcpcore_delivery_due")]

    def __str__(self) -> str:
        return f"{self.event_type} to {self.target_id} ({self.status})"

    @property
    def badge(self) -> str:
        """The status badge it shares with calls: sent looks done, failed looks like an error."""
        badges: dict[str, str] = {
            DeliveryStatus.SENT: CallStatus.DONE,
            DeliveryStatus.FAILED: CallStatus.ERROR,
        }
        return badges.get(self.status, CallStatus.PENDING)

    @property
    def is_pending(self) -> bool:
        return self.status == DeliveryStatus.PENDING


# --- cache generation (issue 11) ----------------------------------------------------------------


class CacheGeneration(models.Model):
    """One row whose `n` database triggers raise on every change to tokens, servers' state,
    tools and pins, in any process and through any door (`mcpcore.db.cache` installs them). A
    process keeps what it read of those tables only while `n` is what it was then."""

    n = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"generation {self.n}"


# --- OAuth upstream (SPEC 16) -------------------------------------------------------------------


class OAuthAccount(models.Model):
    """The console's OAuth standing with one server (SPEC 16.4): its client registration and
    tokens, each encrypted (`mcpcore.oauth.upstream`), the absolute expiry of the access token kept
    beside them, and what the pages show (who authorized, when, the scopes). Bound to the
    `url` it was made for: the tokens are never offered to another address. `detected`: the
    server asked for OAuth itself (401 + `WWW-Authenticate: Bearer`) with no `oauth` key."""

    server_name = models.CharField(max_length=64, unique=True)
    url = models.TextField(default="")
    detected = models.BooleanField(default=False)
    client_info = models.TextField(blank=True, default="")  # encrypted JSON
    tokens = models.TextField(blank=True, default="")  # encrypted JSON
    expires_at = models.DateTimeField(null=True, blank=True)
    issued_at = models.DateTimeField(null=True, blank=True)
    scopes = models.JSONField(default=list, blank=True)
    authorized_by = models.CharField(max_length=150, blank=True, default="")
    authorized_at = models.DateTimeField(null=True, blank=True)
    renewals = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"oauth {self.server_name}"


class OAuthFlow(models.Model):
    """One authorization-code flow (SPEC 16.2), the meeting point of the web process that a
    person's browser comes back to and the worker that holds the server: the worker records
    the authorization URL and its `state`, `/oauth/callback` (on any web process) records the
    code (encrypted) or the authorization server's error. Lives 10 minutes; a new flow for
    the same server deletes the older ones."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    server_name = models.CharField(max_length=64, db_index=True)
    status = models.CharField(max_length=12, choices=FlowStatus.choices, default=FlowStatus.REQUESTED)
    state = models.CharField(max_length=200, blank=True, default="", db_index=True)
    url = models.TextField(blank=True, default="")
    code = models.TextField(blank=True, default="")  # encrypted
    error = models.TextField(blank=True, default="")
    requested_by = models.CharField(max_length=150, blank=True, default="")
    finished_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"flow {self.server_name} ({self.status})"


# --- audit trail (SPEC 22.2) --------------------------------------------------------------------


class AuditEntry(models.Model):
    """One change of what the console trusts or who may use it: who (`actor`: a person's
    username, a token's name, `file`, `system`), from where, what (`action`, `object`), and the
    state `before` and `after` it, secrets masked (`mcpcore.audit` writes them). Written once:
    no page, route or admin changes or deletes a row; only retention prunes them."""

    at = models.DateTimeField(default=timezone.now)
    actor = models.CharField(max_length=200)
    address = models.CharField(max_length=64, blank=True, default="")
    action = models.CharField(max_length=32, choices=AuditAction.choices)
    object = models.CharField(max_length=700, blank=True, default="")
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            # Newest-first keyset pages over (at, id), and the Audit page's two filters with
            # the same order: a page of a million rows is one index range whichever is set.
            models.Index(fields=["at", "id"], name="mcpcore_audit_time"),
            models.Index(fields=["action", "at", "id"], name="mcpcore_audit_action_time"),
            models.Index(fields=["actor", "at", "id"], name="mcpcore_audit_actor_time"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.object} by {self.actor}"

    def to_dict(self) -> dict:
        """A row as `GET /v1/audit` streams it (a JSON Lines line)."""
        return {
            "id": self.pk,
            "at": iso(self.at),
            "actor": self.actor,
            "address": self.address,
            "action": self.action,
            "object": self.object,
            "before": self.before,
            "after": self.after,
        }
