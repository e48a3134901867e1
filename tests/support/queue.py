"""Runs queued django-q2 tasks in the test process, as a worker would run them.

For tests of what a task does (business logic); delivery itself (locks,
redelivery, crashes) is proven with a real `qcluster` elsewhere.
"""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string
from django_q.models import OrmQ


def queued(func: str) -> list[OrmQ]:
    """The queue rows whose task calls `func` (a dotted path), oldest first."""
    return [row for row in OrmQ.objects.order_by("pk") if row.task.get("func") == func]


def run_queued(func: str) -> list[Any]:
    """Runs and acknowledges every queued task that calls `func`; returns their results."""
    results = []
    for row in queued(func):
        task = row.task
        results.append(import_string(func)(*task.get("args", ()), **task.get("kwargs", {})))
        row.delete()
    return results
