"""`/v1` routes (SPEC 7). Every route but the OpenAPI description needs a bearer token."""

from django.urls import path, re_path

from . import openapi, ops, views

urlpatterns = [
    path("openapi.json", openapi.openapi_json, name="openapi"),
    path("mcp", views.mcp_servers, name="api-mcp"),
    path("mcp/remove", views.mcp_remove, name="api-mcp-remove"),
    path("mcp/tools", views.mcp_tools, name="api-mcp-tools"),
    path("mcp/status", views.mcp_status, name="api-mcp-status"),
    path("mcp/reconnect", views.mcp_reconnect, name="api-mcp-reconnect"),
    path("mcp/instructions", views.mcp_instructions, name="api-mcp-instructions"),
    path("mcp/call", views.mcp_call, name="api-mcp-call"),
    path("mcp/calls/<str:call_id>", views.mcp_call_detail, name="api-mcp-call-detail"),
    path("mcp/calls/<str:call_id>/cancel", views.mcp_call_cancel, name="api-mcp-call-cancel"),
    path("pending", views.pending, name="api-pending"),
    path("session/<str:session_id>/confirm/<str:confirm_id>", views.confirm, name="api-confirm"),
    path("allowlist", views.allowlist_view, name="api-allowlist"),
    path("rules", views.rules_view, name="api-rules"),
    path("hooks/claude-code", views.claude_code_hook, name="api-hooks-claude-code"),
    path("calls/export", ops.calls_export, name="api-calls-export"),
    path("<path:rest>", views.not_found, name="api-not-found"),
    # What <path:> can't match ("" and paths with newlines) also answers JSON, after auth.
    re_path(r"^[\s\S]*\Z", views.not_found, name="api-not-found-any"),
]
