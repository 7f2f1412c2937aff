from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0029_toolcall_repeated"),
    ]

    operations = [
        migrations.AddField(
            model_name="toolcall",
            name="traceparent",
            field=models.CharField(blank=True, default="", max_length=55),
        ),
    ]
