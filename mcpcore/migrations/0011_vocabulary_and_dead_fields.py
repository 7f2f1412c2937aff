"""Issue 19: the fields nothing reads go (`Server.connected_at`, `Server.reconnect_generation`,
`Tool.signature`: `Server.signature` is the one record of a tool list's signature,
`ToolCall.attempts`, `Worker.started_at`), and the fields whose values come from
`mcpcore.choices` say so. Same values as before: no data changes."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mcpcore', '0010_approvals'),
    ]

    operations = [
        migrations.AlterField(
            model_name='permissiongrant',
            name='kind',
            field=models.CharField(choices=[('tool_confirm', 'tool_confirm'), ('permission_prompt', 'permission_prompt')], default='permission_prompt', max_length=20),
        ),
        migrations.RemoveField(
            model_name='server',
            name='connected_at',
        ),
        migrations.RemoveField(
            model_name='server',
            name='reconnect_generation',
        ),
        migrations.RemoveField(
            model_name='tool',
            name='signature',
        ),
        migrations.RemoveField(
            model_name='toolcall',
            name='attempts',
        ),
        migrations.RemoveField(
            model_name='worker',
            name='started_at',
        ),
        migrations.AlterField(
            model_name='server',
            name='transport',
            field=models.CharField(blank=True, choices=[('stdio', 'stdio'), ('streamable-http', 'streamable-http'), ('sse', 'sse')], default='', max_length=20),
        ),
        migrations.AlterField(
            model_name='toolcall',
            name='decision',
            field=models.CharField(blank=True, choices=[('auto', 'auto'), ('allowlist', 'allowlist'), ('session', 'session'), ('rule', 'rule'), ('grant', 'grant'), ('approve', 'approve'), ('remember', 'remember'), ('deny', 'deny'), ('abort', 'abort'), ('expired', 'expired')], default='', max_length=20),
        ),
        migrations.AlterField(
            model_name='toolcall',
            name='mode',
            field=models.CharField(choices=[('confirm', 'confirm'), ('auto', 'auto')], default='confirm', max_length=10),
        ),
        migrations.AlterField(
            model_name='toolcall',
            name='via',
            field=models.CharField(choices=[('rest', 'rest'), ('mcp', 'mcp'), ('hook', 'hook')], default='rest', max_length=4),
        ),
    ]
