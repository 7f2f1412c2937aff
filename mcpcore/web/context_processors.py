"""Template context every page needs: the pending-confirmations badge in the navigation, and
what the person's role lets the page offer (`may`, SPEC 23.1)."""

from django.http import HttpRequest

from . import roles


def pending_badge(request: HttpRequest) -> dict:
    """`pending_badge` is counted only when a template shows it (sign-in page: never)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}

    def badge() -> str:
        from .live import badge_text, pending_count

        return badge_text(pending_count())

    # RoleCheck read the role before the view; a page it did not see (an error page) reads it.
    role = getattr(request, "person_role", None) or roles.role_of(user)
    return {"pending_badge": badge, "may": roles.may(role)}
