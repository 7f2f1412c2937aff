"""Pages of the console. Collection actions live outside `servers/<name>/`, so no server name
(`add`, `import`, ...) can shadow them."""

from django.urls import path

from . import views

urlpatterns = [
    path("", views.servers, name="servers"),
    path("add-server/", views.server_add, name="server-add"),
    path("add-example-server/", views.server_example, name="server-example"),
    path("import-servers/", views.server_import, name="server-import"),
    path("reconnect-all/", views.server_reconnect, name="server-reconnect-all"),
    path("servers/<str:name>/", views.server_detail, name="server-detail"),
    path("servers/<str:name>/edit/", views.server_edit, name="server-edit"),
    path("servers/<str:name>/remove/", views.server_remove, name="server-remove"),
    path("servers/<str:name>/enable/", views.server_enable, {"enabled": True}, name="server-enable"),
    path("servers/<str:name>/disable/", views.server_enable, {"enabled": False}, name="server-disable"),
    path("servers/<str:name>/reconnect/", views.server_reconnect, name="server-reconnect"),
    path("servers/<str:name>/trust/", views.server_trust, name="server-trust"),
    path("servers/<str:name>/authorize/", views.server_authorize, name="server-authorize"),
    path("servers/<str:name>/forget-authorization/", views.server_forget, name="server-forget"),
    path("servers/<str:name>/try/", views.tool_try, name="tool-try"),
    path("servers/<str:name>/try-form/", views.tool_try_form, name="tool-try-form"),
    path("oauth/callback", views.oauth_callback, name="oauth-callback"),
    path("pending/", views.pending, name="pending"),
    path("pending/<str:confirm_id>/reply/", views.pending_reply, name="pending-reply"),
    path("pending/feed/", views.pending_feed, name="pending-feed"),
    path("pending/<uuid:confirm_id>/", views.pending_detail, name="pending-detail"),
    path("pending/<uuid:question_id>/answer/", views.pending_answer, name="pending-answer"),
    path("pending/allowances/<int:pk>/revoke/", views.allowance_revoke, name="allowance-revoke"),
    path("history/", views.history, name="history"),
    path("history/<uuid:call_id>/", views.call_detail, name="call-detail"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/create/", views.token_create, name="token-create"),
    path("tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("tokens/grants/<int:pk>/revoke/", views.permission_grant_revoke, name="grant-revoke"),
    path("tokens/apps/<int:pk>/revoke/", views.app_grant_revoke, name="app-revoke"),
    path("apps/allow/", views.app_allow, name="app-allow"),
    path("rules/", views.rules_page, name="rules"),
    path("views/", views.toolviews_page, name="views"),
    path("views/<str:name>/remove/", views.toolview_remove, name="view-remove"),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/<int:pk>/test/", views.notification_test, name="notification-test"),
    path("notifications/<int:pk>/remove/", views.notification_remove, name="notification-remove"),
    path("audit/", views.audit_page, name="audit"),
    path("account/", views.account, name="account"),
    path("account/sessions/<int:pk>/sign-out/", views.session_sign_out, name="session-sign-out"),
]
