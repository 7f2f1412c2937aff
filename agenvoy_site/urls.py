from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path

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
    path("v1/", include("mcpcore.api.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("mcpcore.web.urls")),
]
