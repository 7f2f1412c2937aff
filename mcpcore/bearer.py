"""The bearer tokens every door takes: `/v1` and the console's MCP endpoints accept exactly the
same ones, checked here, below both."""

from django.utils import timezone

from .db import cache
from .models import ApiToken


def authenticate(authorization_header_value: str | None) -> ApiToken | None:
    """The live (not revoked) token named by an `Authorization: Bearer <token>` value, or None.

    Sync (it reads the database): call it from async code through `mcpcore.db` (`read`, or
    within a `write` job)."""
    scheme, _, value = (authorization_header_value or "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    token = cache.token(ApiToken.hash(value.strip()))  # a revoked token is never served from it
    if token is not None:
        now = timezone.now()
        # Touch last_used at most once a minute: a write per call would cost throughput.
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now  # the kept copy too (the column is not watched)
    return token
