"""Queuing an operation's task. The message carries the operation's id and nothing else."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.tasks import async_task

TASK = "idempotency_core.tasks.operation_run"

# The queue (django-q2 cluster name) tasks go to; the drill sends its own to a
# queue no worker cluster listens on, so it alone decides when its steps run.
_queue: ContextVar[str | None] = ContextVar("onefold_queue", default=None)


@contextmanager
def tasks_queued_to(name: str) -> Iterator[None]:
    token = _queue.set(name)
    try:
        yield
    finally:
        _queue.reset(token)


def operation_enqueue(operation_id: int) -> None:
    """Puts a task on the queue. The message carries the id and nothing else.

    With the ORM broker on the business database this insert joins the caller's
    transaction: the task exists exactly when the row that needs it does.
    """
    queue = _queue.get()
    options = {"cluster": queue} if queue else {}
    broker = _broker(queue or Conf.CLUSTER_NAME, os.getpid())
    async_task(TASK, operation_id, task_name=f"operation-{operation_id}", broker=broker, **options)


@lru_cache(maxsize=16)
def _broker(queue: str, pid: int) -> Any:
    """The process's broker for `queue`, made once: `async_task` would make one for every
    task. By process: a forked child makes its own."""
    return get_broker(queue)
