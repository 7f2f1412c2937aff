from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0003_existing_tokens_become_admin"),
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
