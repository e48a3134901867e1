"""A refused delivery's sender (`Delivery.sender_digest`), and a hook's kept delivery
found by its bytes (`hooks.event_kept_from`)."""

from django.db import migrations, models

import idempotency_core.models.events


class Migration(migrations.Migration):
    dependencies = [("idempotency_core", "0002_queue_take_cached_plan")]

    operations = [
        migrations.AddField(
            model_name="delivery",
            name="sender_digest",
            field=models.CharField(blank=True, db_default="", default="", max_length=64),
        ),
        migrations.AddIndex(
            model_name="delivery",
            index=models.Index(
                models.F("source"),
                idempotency_core.models.events.BodyDigest("raw_body"),
                condition=models.Q(("payload_matched", True), ("raw_body__isnull", False)),
                name="delivery_source_body_idx",
            ),
        ),
    ]
