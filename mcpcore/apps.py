from django.apps import AppConfig


class McpcoreConfig(AppConfig):
    name = "mcpcore"
    verbose_name = "MCP console"
    default_auto_field = "django.db.models.BigAutoField"
