from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0002_drop_filestate_content_hash"),
    ]

    operations = [
        migrations.AddField(
            model_name="tool",
            name="output_schema",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="toolcall",
            name="via",
            field=models.CharField(default="rest", max_length=4),
        ),
        migrations.AddField(
            model_name="toolcall",
            name="native_result",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
