"""The bearer tokens every door takes: `/v1` and the console's MCP endpoints accept exactly the
same ones, checked here, below both. An app's OAuth access token (SPEC 21.4) stands for its
grant's own `ApiToken`, on the MCP endpoints of its resource only (`app_token`)."""

from django.db import transaction
from django.utils import timezone

from . import audit
from .choices import AuditAction, TokenRole
from .db import cache
from .models import ApiToken, View
from .oauth import grants


def authenticate(authorization_header_value: str | None) -> ApiToken | None:
    """The live (not revoked) token named by an `Authorization: Bearer <token>` value, or None.

    Sync (it reads the database): call it from async code through `mcpcore.db` (`read`, or
    within a `write` job)."""
    value = _bearer(authorization_header_value)
    if value is None or value.startswith(APP_PREFIX):
        return None
    token = cache.token(ApiToken.hash(value))  # a revoked token is never served from it
    if token is not None:
        _touch(token)
    return token


APP_PREFIX = "agvat_"  # an app's access token (mcpcore.oauth.grants)


def _bearer(header: str | None) -> str | None:
    scheme, _, value = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def _touch(token: ApiToken) -> None:
    now = timezone.now()
    # Touch last_used at most once a minute: a write per call would cost throughput.
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now  # the kept copy too (the column is not watched)


def app_token(authorization_header_value: str | None, path: str | None = None) -> ApiToken | None:
    """The grant's token an app's live access token stands for, when it may be used on the MCP
    endpoint at `path` (None: anywhere it is valid, to tell `/v1` apart); else None. Sync,
    like `authenticate`."""
    value = _bearer(authorization_header_value)
    if value is None or not value.startswith(APP_PREFIX):
        return None
    row = cache.app_token(grants.digest(value))
    if row is None or row.expires_at < timezone.now():
        return None
    if path is not None and not grants.covers(row.grant.resource, path):
        return None
    _touch(row.grant.token)
    return row.grant.token


def issue(
    name: str,
    may_auto: bool = True,
    role: str = TokenRole.AGENT,
    views: list[View] | None = None,
    *,
    by: audit.Actor,
) -> tuple[ApiToken, str]:
    """`ApiToken.issue` and its `token.create` audit row (role, views; never the token), in
    one transaction. Returns the row and the clear token, shown once."""
    with transaction.atomic():
        row, token = ApiToken.issue(name, may_auto, role, views)
        after = {
            "role": row.role,
            "views": sorted(v.name for v in views) if row.view_limited and views else [],
            "limited_to_views": row.view_limited,
            "may_auto": row.may_auto,
            "id": row.pk,
        }
        audit.record(AuditAction.TOKEN_CREATE, row.name, actor=by, after=after)
    return row, token
