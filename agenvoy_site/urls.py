from allauth import urls as allauth_urls
from allauth.account import views as account_views
from django.conf import settings
from django.templatetags.static import static
from django.urls import URLPattern, URLResolver, include, path, re_path
from django.views.generic import RedirectView

from mcpcore.api.ops import metrics_view
from mcpcore.web import signin, views


def _without(patterns: list, unwanted) -> list:
    """allauth's URLs less those whose name `unwanted(name)` says, at any depth. Not routed,
    their names do not resolve either, and allauth's pages then offer no link to them."""
    kept: list = []
    for p in patterns:
        if isinstance(p, URLResolver):
            kept.append(
                URLResolver(
                    p.pattern, _without(p.url_patterns, unwanted), p.default_kwargs, p.app_name, p.namespace
                )
            )
        elif not (isinstance(p, URLPattern) and p.name and unwanted(p.name)):
            kept.append(p)
    return kept


def _password_reset(name: str) -> bool:
    """The password-reset pages mail the person: they exist only when the console has a mail
    server (AGENVOY_SMTP_URL, settings.AGENVOY_MAIL); without, no "Forgot your password?" link."""
    return "password_reset" in name or "reset_password" in name


# Single sign-on makes the provider's people at their first sign-in and never joins an identity
# to a person already there (SPEC 23.2): allauth's sign-up form for them and its page that
# connects an identity to the signed-in person are not routed. The same holds for its URLs
# kept under an older name (`social/...`), which only redirect to these.
_SOCIAL_UNWANTED = {"socialaccount_signup", "socialaccount_connections"}

_allauth = _without(allauth_urls.urlpatterns, lambda name: name in _SOCIAL_UNWANTED)
_allauth = [p for p in _allauth if not str(p.pattern).startswith("social/")]
if not settings.AGENVOY_MAIL:
    _allauth = _without(_allauth, _password_reset)

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
    path("accounts/login/", signin.login),  # allauth's own address for it: the same refusals
    path("logout/", account_views.logout, name="logout"),
    path("accounts/", include(_allauth)),
    path("", include("mcpcore.web.urls")),
]
