from allauth import urls as allauth_urls
from allauth.account import views as account_views
from django.conf import settings
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path, re_path
from django.views.generic import RedirectView

from mcpcore.api.ops import metrics_view
from mcpcore.web import signin, views


def _routed(patterns: list, change) -> list:
    """allauth's URLs at any depth, each named one as `change(pattern)` says: itself, another
    pattern in its place, or None (not routed: its name does not resolve either, and allauth's
    pages then offer no link to it)."""
    kept: list = []
    for p in patterns:
        if isinstance(p, URLResolver):
            kept.append(
                URLResolver(
                    p.pattern, _routed(p.url_patterns, change), p.default_kwargs, p.app_name, p.namespace
                )
            )
        elif not (isinstance(p, URLPattern) and p.name):
            kept.append(p)
        elif (p := change(p)) is not None:
            kept.append(p)
    return kept


# Single sign-on makes the provider's people at their first sign-in and never joins an identity
# to a person already there (SPEC 23.2): allauth's sign-up form for them and its page that
# connects an identity to the signed-in person are not routed. Its URLs kept under an older
# name (`social/...`) only redirect to pages of its own: not routed either.
_SOCIAL_UNWANTED = {"socialaccount_signup", "socialaccount_connections"}


def _console_terms(p: URLPattern) -> URLPattern | None:
    name = p.name or ""
    if name in _SOCIAL_UNWANTED:
        return None
    if name == "account_login":  # allauth's own address of the sign-in page: the same refusals
        return path(str(p.pattern), signin.login, name=name)
    # The password-reset pages mail the person: they exist only when the console has a mail
    # server (AGENVOY_SMTP_URL, settings.AGENVOY_MAIL); without, no "Forgot your password?" link.
    if not settings.AGENVOY_MAIL and ("password_reset" in name or "reset_password" in name):
        return None
    return p


_allauth = [
    p for p in _routed(allauth_urls.urlpatterns, _console_terms) if not str(p.pattern).startswith("social/")
]

urlpatterns = [
    # What MCP clients probe (SPEC 17.4): JSON 404s, never an HTML page. The OAuth metadata the
    # console does serve (21.1) is answered by the authorization server before Django.
    re_path(
        r"^\.well-known/",
        views.well_known_not_found,
        name="well-known-not-found",
    ),
    path("a/<str:token>", views.one_tap, name="one-tap"),
    # Asked for by browsers and tools that don't read the pages' <link rel="icon">; not a 404.
    path(
        "favicon.ico", RedirectView.as_view(url=static("mcpcore/favicon.svg"), permanent=True), name="favicon"
    ),
    path("v1/", include("mcpcore.api.urls")),
    path("metrics", metrics_view, name="metrics"),
    # Signing in is allauth's (SPEC 22.1) at the console's own addresses; its other pages
    # (second factors, password, sessions) under accounts/, reached from the Account page.
    path("login/", signin.login, name="login"),
    path("logout/", account_views.logout, name="logout"),
    # A person added on the People page sets their password here (SPEC 23.1), signed out.
    path("set-password/<uidb64>/<token>/", views.SetPassword.as_view(), name="set-password"),
    path("accounts/", include(_allauth)),
    path("", include("mcpcore.web.urls")),
]
