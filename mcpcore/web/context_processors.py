"""Template context every page needs: the pending-confirmations badge in the navigation, and
what the person's role lets the page offer (`may`, SPEC 23.1), and how people sign in (the
sign-in page's buttons, the People page's redirect URI line)."""

from django.conf import settings
from django.http import HttpRequest

from . import roles
from .live import badge_text, pending_count


def pending_badge(request: HttpRequest) -> dict:
    """`pending_badge` is counted only when a template shows it (sign-in page: never)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}

    def badge() -> str:
        return badge_text(pending_count())

    # RoleCheck read the role before the view; a page it did not see (an error page) reads it.
    role = getattr(request, "person_role", None) or roles.role_of(user)
    return {"pending_badge": badge, "may": roles.may(role)}


def sign_on(request: HttpRequest) -> dict:
    """Single sign-on (SPEC 23.2): the provider's name when one is set (`sso_name`, else ""),
    the redirect URI to register there, and whether the password form is offered."""
    return {
        "sso_name": settings.AGENVOY_OIDC_NAME if settings.AGENVOY_OIDC_ISSUER else "",
        "sso_redirect_uri": settings.AGENVOY_OIDC_REDIRECT_URI,
        "password_signin": settings.AGENVOY_PASSWORD_SIGNIN,
    }
