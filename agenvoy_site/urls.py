from allauth.account import views as account_views
from django.urls import include, path, re_path

from mcpcore.api.ops import metrics_view
from mcpcore.web import views

urlpatterns = [
    # What MCP clients probe (SPEC 17.4): JSON 404s, never an HTML page. The OAuth metadata the
    # console does serve (21.1) is answered by the authorization server before Django.
    re_path(
        r"^\.well-known/",
        views.well_known_not_found,
        name="well-known-not-found",
    ),
    path("a/<str:token>", views.one_tap, name="one-tap"),
    path("v1/", include("mcpcore.api.urls")),
    path("metrics", metrics_view, name="metrics"),
    # Signing in is allauth's (SPEC 22.1) at the console's own addresses; its other pages
    # (second factors, password, sessions) under accounts/, reached from the Account page.
    path("login/", account_views.login, name="login"),
    path("logout/", account_views.logout, name="logout"),
    path("accounts/", include("allauth.urls")),
    path("", include("mcpcore.web.urls")),
]
