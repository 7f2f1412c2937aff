"""Deliveries name their call, so retention (SPEC 18.1) deletes a call's deliveries with it.
Existing rows get it from their stored body (`data.call_id`)."""

import json
import uuid

from django.db import migrations, models


def backfill(apps, schema_editor):
    Delivery = apps.get_model("mcpcore", "Delivery")
    for pk, body in Delivery.objects.filter(call_id__isnull=True).values_list("id", "body").iterator():
        try:
            call_id = uuid.UUID(str(json.loads(body)["data"]["call_id"]))
        except (ValueError, KeyError, TypeError):
            continue  # a test message, or a body without a call
        Delivery.objects.filter(id=pk).update(call_id=call_id)


class Migration(migrations.Migration):
    dependencies = [
        ("mcpcore", "0011_vocabulary_and_dead_fields"),
    ]

    operations = [
        migrations.AddField(
            model_name="delivery",
            name="call_id",
            field=models.UUIDField(blank=True, db_index=True, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
