"""ToolCall costs less to write: no index of its own on `status` ((status, expires_at) serves
it), confirmation ids unique through a partial constraint (calls that run at once have none),
and time-ordered ids. Built so that SQLite rebuilds the table once, not once per change."""

from django.db import migrations, models

import mcpcore.models

STATUSES = [
    ("pending", "pending"),
    ("running", "running"),
    ("done", "done"),
    ("error", "error"),
    ("skipped", "skipped"),
    ("expired", "expired"),
    ("aborted", "aborted"),
    ("cancelled", "cancelled"),
    ("interrupted", "interrupted"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0008_cache_generation"),
    ]

    operations = [
        # The status index, by the name Django gave it on every backend.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="toolcall",
                    name="status",
                    field=models.CharField(choices=STATUSES, default="pending", max_length=12),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    [
                        'DROP INDEX IF EXISTS "mcpcore_toolcall_status_310c8685"',
                        # PostgreSQL's second index of an indexed varchar (LIKE lookups).
                        'DROP INDEX IF EXISTS "mcpcore_toolcall_status_310c8685_like"',
                    ],
                    reverse_sql=[
                        'CREATE INDEX "mcpcore_toolcall_status_310c8685" ON "mcpcore_toolcall" ("status")'
                    ],
                ),
            ],
        ),
        # The one rebuild on SQLite (a column's UNIQUE can't be dropped otherwise).
        migrations.AlterField(
            model_name="toolcall",
            name="confirm_id",
            field=models.UUIDField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name="toolcall",
            constraint=models.UniqueConstraint(
                condition=models.Q(("confirm_id__isnull", False)),
                fields=("confirm_id",),
                name="mcpcore_toolcall_confirm_id_uniq",
            ),
        ),
        # A default is Python's business: nothing changes in the database.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="toolcall",
                    name="id",
                    field=models.UUIDField(
                        default=mcpcore.models.time_ordered_uuid,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
            ],
        ),
    ]
