from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("mcpcore", "0027_people_audit_actions")]

    operations = [
        migrations.AddField(
            model_name="toolcall",
            name="requested_arguments",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="toolcall",
            name="edited_by",
            field=models.CharField(blank=True, default="", max_length=150),
        ),
    ]
