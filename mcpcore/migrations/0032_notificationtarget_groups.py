from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0031_toolcall_routing"),
    ]

    operations = [
        migrations.AddField(
            model_name="notificationtarget",
            name="groups",
            field=models.ManyToManyField(blank=True, related_name="targets", to="mcpcore.group"),
        ),
    ]
