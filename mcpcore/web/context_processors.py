"""Template context every page needs: the pending-confirmations badge in the navigation."""

from django.http import HttpRequest

from .live import badge_text, pending_count


def pending_badge(request: HttpRequest) -> dict:
    """`pending_badge` is counted only when a template shows it (sign-in page: never)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}

    def badge() -> str:
        return badge_text(pending_count())

    return {"pending_badge": badge}
