"""django-q2's ORM broker, with a dequeue that never races and reads few rows, and
prepared statements: the one module that writes django-q2's queue table."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from time import monotonic, sleep
from typing import Any

from django.db import close_old_connections, transaction
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from idempotency_core.sql import prepared_cursor

# The queue's own commits do not wait for the WAL flush (`synchronous_commit` off, for
# their transaction only). A crash of PostgreSQL can then lose a lock taken or a row
# deleted in the moments before it, and the task is handed out again: the
# at-least-once delivery Onefold is built for (docs/task-queue.md), which the claim
# screens. What a task does is written by the worker's own statements, whose commits
# wait for the flush. The dequeue's function sets it in its body.
_NO_FLUSH_WAIT = "set_config('synchronous_commit', 'off', true)"
_ENQUEUE = "INSERT INTO django_q_ormq (key, payload, lock) VALUES (%s, %s, %s) RETURNING id"
_DEQUEUE = "SELECT task_id, task_payload FROM onefold_queue_take(%s, %s, %s, %s)"
# One statement, its setting made in it (it needs no plan of its own).
_ACKNOWLEDGE = f"DELETE FROM django_q_ormq WHERE id = %s AND (SELECT {_NO_FLUSH_WAIT}) = 'off'"


@dataclass
class HeldTasks:
    """Tasks `async_task` handed the broker inside `tasks_held`, for the caller's own
    statement to write: `sql(count, source)` is a data-modifying WITH part that inserts each
    task once for every row of `source`, the caller's guard (none: no task)."""

    tasks: list[tuple[str, str]] = field(default_factory=list)

    @staticmethod
    def sql(count: int, source: str) -> str:
        """The part for `count` tasks (its parameters: `params`)."""
        row = f"SELECT %s, %s, %s::timestamptz FROM {source}"
        rows = " UNION ALL ".join(row for _ in range(count))
        return f"INSERT INTO django_q_ormq (key, payload, lock) {rows}"

    def params(self, due: datetime) -> list[object]:
        return [value for key, task in self.tasks for value in (key, task, due)]


_held: ContextVar[HeldTasks | None] = ContextVar("onefold_held_tasks", default=None)


@contextmanager
def tasks_held() -> Iterator[HeldTasks]:
    """Within the block, this broker keeps what it is handed for the caller's statement
    (`HeldTasks.sql`) instead of writing it: a new submission's rows and its first task
    are then one statement, one round trip, and exist together or not at all."""
    held = HeldTasks()
    token = _held.set(held)
    try:
        yield held
    finally:
        _held.reset(token)


# After a task, an empty queue is asked again every _BUSY_POLL seconds for _BUSY_SECONDS:
# a rate's next submission waits at most that for the pusher, not the whole poll.
_BUSY_POLL = 0.01
_BUSY_SECONDS = 1.0


class SkipLockedORM(ORM):  # type: ignore[misc]  # django-q2 ships no types
    _busy_until = 0.0

    def enqueue(self, task: str) -> Any:
        """As django-q2's ORM broker: due at once, in the caller's transaction if any;
        within `tasks_held`, kept for the caller's statement."""
        held = _held.get()
        if held is not None:
            held.tasks.append((self.list_key or Conf.CLUSTER_NAME, task))
            return None
        if transaction.get_autocommit(using=Conf.ORM):  # as django-q2's `get_connection`
            close_old_connections()
        with prepared_cursor(Conf.ORM) as cursor:
            cursor.execute(_ENQUEUE, [self.list_key or Conf.CLUSTER_NAME, task, timezone.now()])
            return cursor.fetchone()[0]

    def dequeue(self) -> list[tuple[Any, Any]] | None:
        self.get_connection()  # as django-q2 does: close connections past their age
        now = timezone.now()
        with prepared_cursor(Conf.ORM) as cursor:
            cursor.execute(
                _DEQUEUE, [self.list_key, now + timedelta(seconds=Conf.RETRY), now, Conf.BULK]
            )
            tasks = [(row[0], row[1]) for row in cursor.fetchall()]
        if tasks:
            self._busy_until = monotonic() + _BUSY_SECONDS
            return tasks
        # Empty queue, spare the CPU (django-q2's own behaviour); shortly after a task,
        # the next one is likely near (a steady rate of submissions), and would wait for
        # the whole poll: asked again sooner.
        sleep(_BUSY_POLL if monotonic() < self._busy_until else Conf.POLL)
        return None

    def delete(self, task_id: Any) -> None:
        self.get_connection()
        with prepared_cursor(Conf.ORM) as cursor:
            cursor.execute(_ACKNOWLEDGE, [task_id])
