"""The cache generation row (issue 11); its triggers are (re)installed after every migrate by
`mcpcore.cache.install_triggers`, so a table rebuilt by a later migration keeps them."""

from django.db import migrations, models


def first_row(apps, schema_editor):
    apps.get_model("mcpcore", "CacheGeneration").objects.get_or_create(id=1, defaults={"n": 0})


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0007_notifications"),
    ]

    operations = [
        migrations.CreateModel(
            name="CacheGeneration",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("n", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunPython(first_row, migrations.RunPython.noop),
    ]
