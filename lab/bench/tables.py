"""Emptying a benchmark's database before it measures: a figure must not depend on
how many runs came before it (the tables and their indexes grow with every run)."""

from __future__ import annotations

from django.db import connection

# Every table a submission's life writes to, and those that point at them.
ONEFOLD_TABLES = (
    "review_console_bulkreplayitem, review_console_bulkreplayjob, idempotency_core_attempt, "
    "idempotency_core_delivery, idempotency_core_reviewcase, idempotency_core_operation, "
    "idempotency_core_event, django_q_ormq, django_q_task"
)


def bench_tables_empty(*also: str) -> None:
    """Empties Onefold's submission tables, and `also` (a benchmark's own), on the
    benchmark's database (each command checks the name says "bench" first)."""
    with connection.cursor() as cursor:
        # The audit trail's guard refuses TRUNCATE (and a CASCADE reaching it) to any
        # session but one that says so: this is the bench's own reset.
        cursor.execute("SELECT set_config('onefold.audit_truncate', 'allowed', false)")
        cursor.execute(f"TRUNCATE {', '.join((ONEFOLD_TABLES, *also))} CASCADE")
        cursor.execute("TRUNCATE idempotency_core_auditentry")
