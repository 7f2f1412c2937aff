"""The table of the cache every process shares (settings.CACHES): allauth keeps there the
authenticator-app codes already used and its rate limits (issue 41.15, 41.17)."""

from django.core.management import call_command
from django.db import migrations

TABLE = "mcpcore_cache"  # settings.CACHES["default"]["LOCATION"]


def create(apps, schema_editor) -> None:
    call_command("createcachetable", TABLE, database=schema_editor.connection.alias, verbosity=0)


def drop(apps, schema_editor) -> None:
    schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(TABLE)}")


class Migration(migrations.Migration):
    dependencies = [("mcpcore", "0022_appclient_used_at")]

    operations = [migrations.RunPython(create, drop)]
