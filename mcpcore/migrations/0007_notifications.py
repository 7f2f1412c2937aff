"""Notification targets and deliveries (SPEC 15), and how far each confirmation was told."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0006_tool_pins_and_rules"),
    ]

    operations = [
        migrations.CreateModel(
            name="NotificationTarget",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("kind", models.CharField(choices=[("webhook", "webhook"), ("ntfy", "ntfy")], max_length=10)),
                ("url", models.URLField(max_length=2000)),
                ("secret", models.CharField(blank=True, default="", max_length=200)),
                ("created_by", models.CharField(blank=True, default="", max_length=150)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={"ordering": ["created_at", "id"]},
        ),
        migrations.CreateModel(
            name="Delivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "target",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="mcpcore.notificationtarget",
                    ),
                ),
                ("event_type", models.CharField(max_length=40)),
                ("message_id", models.CharField(max_length=64, unique=True)),
                ("body", models.TextField()),
                ("attempts", models.PositiveSmallIntegerField(default=0)),
                ("next_attempt_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "status",
                    models.CharField(
                        choices=[("pending", "pending"), ("sent", "sent"), ("failed", "failed")],
                        default="pending",
                        max_length=10,
                    ),
                ),
                ("last_status_code", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("last_error", models.TextField(blank=True, default="")),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("last_attempt_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={"ordering": ["-created_at", "-id"]},
        ),
        migrations.AddIndex(
            model_name="delivery",
            index=models.Index(fields=["status", "next_attempt_at"], name="mcpcore_delivery_due"),
        ),
        # Calls made before notifications existed count as told: nobody is notified about them.
        migrations.AddField(
            model_name="toolcall",
            name="notified",
            field=models.PositiveSmallIntegerField(default=2),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="toolcall",
            name="notified",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(
                condition=models.Q(("confirm_id__isnull", False), ("notified__lt", 2)),
                fields=["created_at"],
                name="mcpcore_call_to_notify",
            ),
        ),
    ]
