"""The History page's filters with the time order of its pages (SPEC 18.4): the indexes on
`status`, `server_name`, `tool_name` and `session_id` become (column, created_at), so a page of
a million calls is one index range whichever filter is set. As many indexes as before. The
single-column ones are dropped by name (as 0009 does), so SQLite does not rebuild the table."""

from django.db import migrations, models

SINGLE = ("session_id_25792cd3", "tool_name_0c93e7e3", "server_name_dbb05cfa")


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0012_delivery_call_id"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="toolcall", name="mcpcore_too_status_aeeedd_idx"),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="toolcall", name="server_name", field=models.CharField(max_length=64)
                ),
                migrations.AlterField(
                    model_name="toolcall", name="session_id", field=models.CharField(max_length=200)
                ),
                migrations.AlterField(
                    model_name="toolcall", name="tool_name", field=models.CharField(max_length=700)
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    [
                        statement
                        for name in SINGLE
                        for statement in (
                            f'DROP INDEX IF EXISTS "mcpcore_toolcall_{name}"',
                            # PostgreSQL's second index of an indexed varchar (LIKE lookups).
                            f'DROP INDEX IF EXISTS "mcpcore_toolcall_{name}_like"',
                        )
                    ],
                    reverse_sql=[
                        f'CREATE INDEX "mcpcore_toolcall_{name}" ON "mcpcore_toolcall" ("{name.rsplit("_", 1)[0]}")'
                        for name in SINGLE
                    ],
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(fields=["status", "created_at"], name="mcpcore_call_status_time"),
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(fields=["server_name", "created_at"], name="mcpcore_call_server_time"),
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(fields=["tool_name", "created_at"], name="mcpcore_call_tool_time"),
        ),
        migrations.AddIndex(
            model_name="toolcall",
            index=models.Index(fields=["session_id", "created_at"], name="mcpcore_call_session_time"),
        ),
    ]
