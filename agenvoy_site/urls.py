from django.contrib.auth import views as auth_views
from django.urls import include, path

from mcpcore.api.ops import metrics_view

urlpatterns = [
    path("v1/", include("mcpcore.api.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("mcpcore.urls")),
]
