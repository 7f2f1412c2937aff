"""Views (SPEC 19): the `View` rows, and tokens limited to views (`view_limited` and the
views they may see)."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0013_toolcall_history_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="View",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=64, unique=True)),
                ("description", models.TextField(blank=True, default="")),
                ("include", models.JSONField(default=list)),
                ("exclude", models.JSONField(default=list)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                "ordering": ["name"],
            },
        ),
        migrations.AddField(
            model_name="apitoken",
            name="view_limited",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="views",
            field=models.ManyToManyField(blank=True, related_name="tokens", to="mcpcore.view"),
        ),
    ]
