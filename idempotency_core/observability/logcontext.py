"""The ids a django-q2 worker's log lines carry while it runs a task."""

from __future__ import annotations

from typing import Any

from idempotency_core.execution.engine import TASK as OPERATION_TASK
from idempotency_core.platform.logfilters import log_ids

# A task's dotted path (a wire format: idempotency_core/tasks.py) -> what its one
# argument is.
_ID_OF_TASK = {
    OPERATION_TASK: "operation_id",
    "idempotency_core.tasks.late_repeat_check": "delivery_id",
}


def task_started(sender: object, task: dict[str, Any], **kwargs: Any) -> None:
    name = _ID_OF_TASK.get(str(task.get("func", "")))
    args = task.get("args") or ()
    log_ids.set({name: str(args[0])} if name and args else None)


def task_finished(sender: object, **kwargs: Any) -> None:
    log_ids.set(None)
