"""`/v1` routes (SPEC 7). Every route but the OpenAPI description needs a bearer token."""

from django.urls import URLPattern, path, re_path

from . import openapi, ops, views


def _named(route: str, view) -> URLPattern:
    """`route`, named `api-` and the route with `-` for `/` (`mcp/tools`: `api-mcp-tools`)."""
    return path(route, view, name="api-" + route.replace("/", "-"))


urlpatterns = [
    path("openapi.json", openapi.openapi_json, name="openapi"),
    _named("mcp", views.mcp_servers),
    _named("mcp/remove", views.mcp_remove),
    _named("mcp/tools", views.mcp_tools),
    _named("mcp/status", views.mcp_status),
    _named("mcp/reconnect", views.mcp_reconnect),
    _named("mcp/authorize", views.mcp_authorize),
    _named("mcp/instructions", views.mcp_instructions),
    _named("mcp/call", views.mcp_call),
    path("mcp/calls/<str:call_id>", views.mcp_call_detail, name="api-mcp-call-detail"),
    path("mcp/calls/<str:call_id>/cancel", views.mcp_call_cancel, name="api-mcp-call-cancel"),
    _named("pending", views.pending),
    _named("pending/decide", views.pending_decide),
    path("pending/<str:question_id>/answer", views.pending_answer, name="api-pending-answer"),
    path("pending/<str:item_id>/extend", views.pending_extend, name="api-pending-extend"),
    path("session/<str:session_id>/confirm/<str:confirm_id>", views.confirm, name="api-confirm"),
    _named("allowlist", views.allowlist_view),
    _named("rules", views.rules_view),
    _named("hooks/claude-code", views.claude_code_hook),
    _named("calls/export", ops.calls_export),
    _named("audit", ops.audit_export),
    _named("views", views.toolviews_view),
    _named("views/remove", views.toolviews_remove),
    _named("groups", views.groups_view),
    _named("groups/remove", views.groups_remove),
    _named("grants", views.app_grants_list),
    path("grants/<str:grant_id>/revoke", views.app_grant_revoke, name="api-grant-revoke"),
    path("<path:rest>", views.not_found, name="api-not-found"),
    # What <path:> can't match ("" and paths with newlines) also answers JSON, after auth.
    re_path(r"^[\s\S]*\Z", views.not_found, name="api-not-found-any"),
]
