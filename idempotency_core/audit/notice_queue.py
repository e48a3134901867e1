"""Queueing a case's notification task when the case opens.

A case opened anywhere (the engine, ingest, a reconciliation, a reviewer's action)
goes through `review_case_open`, which calls `case_notify_enqueue` in the
transaction that inserted the case: with django-q2's ORM broker on the business
database, the task exists exactly when the case does (docs/task-queue.md), and
the sweeper's notification pass (review/notifications.py) covers a task lost later.
The task itself routes the case and sends (`idempotency_core.tasks.case_notify`).

Only while the business configuration has a `review` block: without one nobody is
notified, and opening a case queues nothing, as before routing existed.
"""

from __future__ import annotations

from django_q.tasks import async_task

from idempotency_core.config_cache import config_cached
from idempotency_core.models import BusinessConfigVersion

NOTIFY_TASK = "idempotency_core.tasks.case_notify"


def review_configured() -> bool:
    """Whether the newest configuration version has a `review` block."""
    return config_cached(("review_configured",), _newest_has_review)


def _newest_has_review() -> bool:
    newest = (
        BusinessConfigVersion.objects.order_by("-number")
        .values_list("document__review", flat=True)
        .first()
    )
    return bool(newest)


def case_notify_enqueue(case_id: int, *, force: bool = False) -> None:
    """Queues the case's notification task (the message carries the case id alone).
    `force`: whatever the configuration says (a hand on is notified without a block)."""
    if force or review_configured():
        async_task(NOTIFY_TASK, case_id, task_name=f"case-notify-{case_id}")
