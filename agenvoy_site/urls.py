from allauth import urls as allauth_urls
from allauth.account import views as account_views
from django.conf import settings
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path, re_path
from django.views.generic import RedirectView

from mcpcore.api.ops import metrics_view
from mcpcore.web import views


def _without_password_reset(patterns: list) -> list:
    """allauth's URLs less its password-reset pages, at any depth: they mail the person, so
    they exist only when the console has a mail server (AGENVOY_SMTP_URL, settings.AGENVOY_MAIL). Not routed, their
    names do not resolve either, and allauth then offers no "Forgot your password?" link."""
    kept: list = []
    for p in patterns:
        if isinstance(p, URLResolver):
            kept.append(
                URLResolver(
                    p.pattern,
                    _without_password_reset(p.url_patterns),
                    p.default_kwargs,
                    p.app_name,
                    p.namespace,
                )
            )
        elif not (
            isinstance(p, URLPattern)
            and p.name
            and ("password_reset" in p.name or "reset_password" in p.name)
        ):
            kept.append(p)
    return kept


_allauth = allauth_urls.urlpatterns
if not settings.AGENVOY_MAIL:
    _allauth = _without_password_reset(_allauth)

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
    path("login/", account_views.login, name="login"),
    path("logout/", account_views.logout, name="logout"),
    # A person added on the People page sets their password here (SPEC 23.1), signed out.
    path("set-password/<uidb64>/<token>/", views.SetPassword.as_view(), name="set-password"),
    path("accounts/", include(_allauth)),
    path("", include("mcpcore.web.urls")),
]
