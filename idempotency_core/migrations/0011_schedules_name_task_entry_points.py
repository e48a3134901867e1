"""Schedules name the task entry points in `idempotency_core.tasks`, the one
module whose dotted paths never move (the code behind them moved into layers)."""

from django.db import migrations

MOVES = {
    "onefold-reconcile-daily": (
        "idempotency_core.reconciliation.reconcile_daily",
        "idempotency_core.tasks.reconcile_daily",
    ),
    "onefold-purge-payloads": (
        "idempotency_core.retention.purge_scheduled",
        "idempotency_core.tasks.purge_payloads",
    ),
}


def forward(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    for name, (_old, new) in MOVES.items():
        Schedule.objects.filter(name=name).update(func=new)


def backward(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    for name, (old, _new) in MOVES.items():
        Schedule.objects.filter(name=name).update(func=old)


class Migration(migrations.Migration):
    dependencies = [
        ("idempotency_core", "0010_operation_held_by"),
        ("django_q", "0018_task_success_index"),
    ]

    operations = [migrations.RunPython(forward, backward)]
