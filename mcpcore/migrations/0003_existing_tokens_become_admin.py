"""Token roles (SPEC 12). Tokens made before roles existed have had every right, so they become
`admin`; tokens made from now on default to `agent`. Session allowances are bound to a token:
the ones granted before this have no token and so only cover the console's own calls."""

import django.db.models.deletion
from django.db import migrations, models

ROLES = [("agent", "Agent"), ("approver", "Approver"), ("admin", "Admin")]


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0002_drop_filestate_content_hash"),
    ]

    operations = [
        # Added with default "admin" so every existing row gets it, then the default moves on.
        migrations.AddField(
            model_name="apitoken",
            name="role",
            field=models.CharField(choices=ROLES, default="admin", max_length=10),
        ),
        migrations.AlterField(
            model_name="apitoken",
            name="role",
            field=models.CharField(choices=ROLES, default="agent", max_length=10),
        ),
        migrations.AddField(
            model_name="sessionallowance",
            name="token",
            field=models.ForeignKey(
                blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, to="mcpcore.apitoken"
            ),
        ),
    ]
