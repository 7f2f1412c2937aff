"""What a person allowed an app (SPEC 21.3, 21.4): grants, authorization codes, and access and
refresh tokens, every one of them kept only as its SHA-256.

A grant owns a real agent `ApiToken`, named `<client name> (app of <person>)` and limited to
the views chosen, so that an app's calls are exactly those of a token of that role and those
views: the inbox, history, notifications and audit name it as they name any token. An access
token maps to that token (`bearer` reads it), valid only on the MCP endpoints of its resource.

Sync: call these in a database job (`mcpcore.db`)."""

import datetime
import hashlib
import secrets

from django.conf import settings
from django.contrib.auth.models import User
from django.core import signing
from django.db import transaction
from django.utils import timezone

from .. import audit, names
from ..choices import AuditAction, TokenRole
from ..models import ApiToken, AppClient, AppCode, AppGrant, AppToken, Server, View

CODE_SECONDS = 60
REFRESH_KEEP = datetime.timedelta(days=30)
GRACE = datetime.timedelta(seconds=30)
TOKEN_NAME_MOST = 100  # ApiToken.name
MCP_PATH = "/mcp"


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def token_name(client_name: str, person: str) -> str:
    """`<client name> (app of <person>)`, the client name cut to fit a token's name."""
    suffix = f" (app of {person})"
    return (client_name or "app")[: max(TOKEN_NAME_MOST - len(suffix), 1)] + suffix


def app_actor(grant: AppGrant) -> audit.Actor:
    return audit.Actor(f"app {grant.client.name or grant.client.client_id}")


def covers(resource: str, path: str) -> bool:
    """Whether a grant for `resource` (an endpoint path) may be used on the MCP endpoint at
    `path`: `/mcp` on all of them, any other on its own only."""
    return resource == MCP_PATH or path.rstrip("/") == resource


def endpoint_path(resource: str) -> str | None:
    """The path of the console's MCP endpoint a `resource` (RFC 8707) names, with or without a
    trailing `/`: `/mcp`, `/mcp/<server>`, `/mcp/v/<view>` or `/mcp/_permission`; None when
    it names none (another host, an unknown server or view)."""
    public = settings.AGENVOY_PUBLIC_URL
    if not resource.startswith(public + MCP_PATH) or any(c in resource for c in "?#"):
        return None
    path = resource[len(public) :]
    path = path[:-1] if path.endswith("/") else path
    if path == MCP_PATH:
        return path
    rest = path[len(MCP_PATH) :]
    if not rest.startswith("/"):
        return None
    rest = rest[1:]
    if rest == "_permission":
        return path
    if rest.startswith("v/"):
        name = rest[2:]
        return path if names.is_valid_server_name(name) and View.objects.filter(name=name).exists() else None
    ok = names.is_valid_server_name(rest) and Server.objects.filter(name=rest).exists()
    return path if ok else None


# The authorization request waiting on the `Allow an app` page travels signed in its URL: no
# row for a request nobody answers, and any web process can show it.
_SALT = "agenvoy.app-allow"
REQUEST_SECONDS = 600


def sign_request(fields: dict) -> str:
    return signing.dumps(fields, salt=_SALT, compress=True)


def read_request(value: str) -> dict | None:
    try:
        fields = signing.loads(value, salt=_SALT, max_age=REQUEST_SECONDS)
    except signing.BadSignature:
        return None
    return fields if isinstance(fields, dict) else None


# --- allowing an app -----------------------------------------------------------------------------


def allow(
    client: AppClient,
    user: User,
    resource: str,
    views: list[View],
    *,
    redirect_uri: str,
    redirect_uri_explicit: bool,
    code_challenge: str,
    asked_resource: str,
    by: audit.Actor,
) -> tuple[AppGrant, str]:
    """A new grant of `client` for `user` on `resource` (an endpoint path), replacing that
    person's earlier grant of the same client (its token's pending calls are the caller's to
    end first, with `calls.revoke_token`), and its authorization code (returned clear, kept as
    its hash). `views` empty: every tool."""
    now = timezone.now()
    with transaction.atomic():
        for earlier in earlier_grants(client, user):
            _end(earlier, now, by)
        token, _clear = ApiToken.issue(
            token_name(client.name or client.client_id, user.get_username()),
            may_auto=False,
            role=TokenRole.AGENT,
            views=views or None,
        )
        grant = AppGrant.objects.create(client=client, user=user, token=token, resource=resource)
        if client.allowed_at is None:
            AppClient.objects.filter(pk=client.pk).update(allowed_at=now)
        code = "agvc_" + secrets.token_urlsafe(32)  # 256 random bits
        AppCode.objects.create(
            code_hash=digest(code),
            grant=grant,
            redirect_uri=redirect_uri,
            redirect_uri_explicit=redirect_uri_explicit,
            code_challenge=code_challenge,
            resource=asked_resource,
            expires_at=now + datetime.timedelta(seconds=CODE_SECONDS),
        )
        audit.record(
            AuditAction.GRANT_ALLOW,
            token.name,
            actor=by,
            after=_state(grant, views),
        )
    return grant, code


def earlier_grants(client: AppClient, user: User):
    """The grants in force of `client` for `user`, which allowing it again replaces."""
    return AppGrant.objects.filter(client=client, user=user, revoked_at__isnull=True)


def _state(grant: AppGrant, views: list[View] | None = None) -> dict:
    names = sorted(v.name for v in views) if views is not None else grant_views(grant)
    return {
        "id": grant.pk,
        "client_id": grant.client.client_id,
        "client_name": grant.client.name,
        "resource": grant.resource,
        "role": TokenRole.AGENT,
        "views": names,
    }


def grant_views(grant: AppGrant) -> list[str]:
    return sorted(grant.token.views.values_list("name", flat=True))


# --- codes ---------------------------------------------------------------------------------------


def code_row(client_id: str, code: str) -> AppCode | None:
    """The unused code of this client, or None. A code used before: every token issued from
    it is revoked (SPEC 21.4) and None."""
    row = (
        AppCode.objects.select_related("grant", "grant__client")
        .filter(code_hash=digest(code), grant__client__client_id=client_id)
        .first()
    )
    if row is None:
        return None
    if row.used_at is not None:
        _revoke_chain(row)
        return None
    return row


def _revoke_chain(code: AppCode) -> None:
    AppToken.objects.filter(code=code, revoked_at__isnull=True).update(revoked_at=timezone.now())


def exchange_code(code: AppCode) -> tuple[str, str, int] | None:
    """Spend the code (once: a second exchange gets None and revokes what the first got) and
    issue an access and a refresh token. Returns (access, refresh, expires_in)."""
    with transaction.atomic():
        if not AppCode.objects.filter(pk=code.pk, used_at__isnull=True).update(used_at=timezone.now()):
            _revoke_chain(code)
            return None
        if code.expires_at < timezone.now() or not _grant_live(code.grant_id):
            return None
        return _issue(code.grant, code)


def _grant_live(grant_id: int) -> bool:
    return AppGrant.objects.filter(
        pk=grant_id, revoked_at__isnull=True, token__revoked_at__isnull=True
    ).exists()


def _issue(grant: AppGrant, code: AppCode | None) -> tuple[str, str, int]:
    now = timezone.now()
    seconds = settings.AGENVOY_OAUTH_ACCESS_SECONDS
    access = "agvat_" + secrets.token_urlsafe(32)
    refresh = "agvrt_" + secrets.token_urlsafe(32)
    AppToken.objects.bulk_create(
        [
            AppToken(
                token_hash=digest(access),
                kind=AppToken.ACCESS,
                grant=grant,
                code=code,
                expires_at=now + datetime.timedelta(seconds=seconds),
            ),
            AppToken(
                token_hash=digest(refresh),
                kind=AppToken.REFRESH,
                grant=grant,
                code=code,
                expires_at=now + REFRESH_KEEP,
            ),
        ]
    )
    return access, refresh, seconds


# --- refresh tokens ------------------------------------------------------------------------------


def refresh_row(client_id: str, value: str) -> tuple[AppToken | None, bool, AppGrant | None]:
    """The refresh token `value` of this client if it may be used, whether it is the grace use
    of one just replaced, and the grant to revoke when it was used after it was replaced (past
    the grace, or twice in it: SPEC 21.4 revokes the whole grant; `revoke_grant`, by the caller,
    which also ends the grant's token as `calls.revoke_token` does)."""
    row = (
        AppToken.objects.select_related("grant", "grant__client", "grant__token", "code")
        .filter(token_hash=digest(value), kind=AppToken.REFRESH, grant__client__client_id=client_id)
        .first()
    )
    now = timezone.now()
    if row is None or row.revoked_at is not None or row.expires_at < now or not _grant_live(row.grant_id):
        return None, False, None
    if row.replaced_at is None:
        return row, False, None
    if now - row.replaced_at <= GRACE and AppToken.objects.filter(pk=row.pk, grace_used=False).update(
        grace_used=True
    ):
        return row, True, None
    return None, False, row.grant


def rotate(row: AppToken, grace: bool) -> tuple[str, str, int] | None:
    """New tokens for a refresh token, which is replaced (its grace use replaces nothing)."""
    with transaction.atomic():
        if not grace and not AppToken.objects.filter(pk=row.pk, replaced_at__isnull=True).update(
            replaced_at=timezone.now()
        ):
            return None
        return _issue(row.grant, row.code)


# --- access tokens -------------------------------------------------------------------------------


def access_row(value: str) -> AppToken | None:
    """A live access token (not expired, not revoked, its grant and token live)."""
    row = (
        AppToken.objects.select_related("grant", "grant__client", "grant__token")
        .filter(
            token_hash=digest(value),
            kind=AppToken.ACCESS,
            revoked_at__isnull=True,
            grant__revoked_at__isnull=True,
            grant__token__revoked_at__isnull=True,
        )
        .first()
    )
    if row is None or row.expires_at < timezone.now():
        return None
    return row


def revoke_token(client_id: str, value: str) -> None:
    """RFC 7009: revoke one of the client's own tokens: an access token alone; a refresh token
    with every token of its grant. Anything else is ignored."""
    row = (
        AppToken.objects.select_related("grant", "grant__client")
        .filter(token_hash=digest(value), grant__client__client_id=client_id, revoked_at__isnull=True)
        .first()
    )
    if row is None:
        return
    now = timezone.now()
    if row.kind == AppToken.ACCESS:
        AppToken.objects.filter(pk=row.pk).update(revoked_at=now)
    else:
        AppToken.objects.filter(grant=row.grant, revoked_at__isnull=True).update(revoked_at=now)


# --- grants --------------------------------------------------------------------------------------


def revoke_grant(grant: AppGrant, by: audit.Actor, reason: str = "") -> bool:
    """End a grant: its token and every access and refresh token of it stop working at once
    on every process (the token cache's generation moves with the rows). Returns whether this
    call ended it."""
    with transaction.atomic():
        return _end(grant, timezone.now(), by, reason)


def _end(grant: AppGrant, now: datetime.datetime, by: audit.Actor, reason: str = "") -> bool:
    if not AppGrant.objects.filter(pk=grant.pk, revoked_at__isnull=True).update(revoked_at=now):
        return False
    ApiToken.objects.filter(pk=grant.token_id, revoked_at__isnull=True).update(revoked_at=now)
    AppToken.objects.filter(grant=grant, revoked_at__isnull=True).update(revoked_at=now)
    after: dict = {"revoked": True}
    if reason:
        after["reason"] = reason
    audit.record(AuditAction.GRANT_REVOKE, grant.token.name, actor=by, before=_state(grant), after=after)
    return True


def live_grants():
    """The grants in force, newest first, for the Tokens page and `GET /v1/grants`."""
    return (
        AppGrant.objects.filter(revoked_at__isnull=True)
        .select_related("client", "user", "token")
        .prefetch_related("token__views")
        .order_by("-created_at")
    )


def to_dict(grant: AppGrant) -> dict:
    """A grant as `GET /v1/grants` shows it (never a token)."""
    return {
        "id": grant.pk,
        "client_name": grant.client.name,
        "client_id": grant.client.client_id,
        "allowed_by": grant.user.get_username(),
        "name": grant.token.name,
        "resource": grant.resource,
        "role": grant.token.role,
        "views": sorted(v.name for v in grant.token.views.all()) if grant.token.view_limited else [],
        "created_at": grant.created_at.isoformat(),
        "last_used_at": grant.token.last_used_at.isoformat() if grant.token.last_used_at else None,
    }
