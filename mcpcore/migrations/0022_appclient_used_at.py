from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0021_prompt_arguments_as_given"),
    ]

    operations = [
        migrations.AddField(
            model_name="appclient",
            name="used_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
