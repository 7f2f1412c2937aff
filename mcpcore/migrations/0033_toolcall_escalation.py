from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0032_notificationtarget_groups"),
    ]

    operations = [
        migrations.AddField(
            model_name="toolcall",
            name="escalated_to",
            field=models.CharField(blank=True, db_default="", default="", max_length=64),
        ),
        migrations.AddField(
            model_name="toolcall",
            name="escalated_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
