from django.apps import AppConfig
from django.db.models.signals import post_migrate


class McpcoreConfig(AppConfig):
    name = "mcpcore"
    verbose_name = "MCP console"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Here, not at the top: Django imports this module before the models are loaded, and
        # both modules import models (AppRegistryNotReady at the top).
        from .audit import connect_signin_signals
        from .db.cache import install_triggers

        connect_signin_signals()
        # After every migrate (and test-database flush): the cache generation's triggers.
        post_migrate.connect(install_triggers, sender=self, dispatch_uid="mcpcore-cache-triggers")
