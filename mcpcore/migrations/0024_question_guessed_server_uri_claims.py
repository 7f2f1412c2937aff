from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0023_shared_cache"),
    ]

    operations = [
        migrations.AddField(
            model_name="question",
            name="guessed",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="server",
            name="uri_claims",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
