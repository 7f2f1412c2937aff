from allauth.account import views as account_views
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from mcpcore.api.ops import metrics_view
from mcpcore.web import views

urlpatterns = [
    # What MCP clients probe for OAuth (SPEC 17.4): JSON 404s, never the sign-in page.
    re_path(
        r"^\.well-known/(?:oauth-protected-resource|oauth-authorization-server|openid-configuration)(?:/.*)?$",
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
    path("accounts/", include("allauth.urls")),
    path("", include("mcpcore.web.urls")),
]
