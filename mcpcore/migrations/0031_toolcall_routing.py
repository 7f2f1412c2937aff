from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0030_toolcall_traceparent"),
    ]

    operations = [
        migrations.AddField(
            model_name="toolcall",
            name="for_group",
            field=models.CharField(blank=True, db_default="", default="", max_length=64),
        ),
        migrations.AddField(
            model_name="toolcall",
            name="approvals_needed",
            field=models.PositiveSmallIntegerField(db_default=1, default=1),
        ),
        migrations.AddField(
            model_name="toolcall",
            name="approvals",
            field=models.JSONField(db_default=[], default=list),
        ),
    ]
