"""django-q2's ORM broker, with a dequeue that is one statement and never races.

django-q2's own dequeue (`django_q/brokers/orm.py`) reads the due rows, then tries a
compare-and-set UPDATE on each one's `lock`; two clusters' pushers read the same row,
one of them loses and reads again. Measured with two clusters (`bench_pipeline`), a
submission cost twice the CPU it cost with one. Here, on PostgreSQL, a pusher takes
its rows in one statement that skips the rows another pusher is taking at that
moment (`FOR UPDATE SKIP LOCKED`) and sets their lock as django-q2 does, to now +
`retry`: the delivery rules are unchanged (TASK-QUEUE.md: a row not acknowledged is
handed out again when its lock expires; a row is acknowledged by deleting it). On
SQLite, django-q2's own dequeue runs. `Q_CLUSTER["broker_class"]` names this class.
"""

from __future__ import annotations

from datetime import timedelta
from time import sleep
from typing import Any

from django.db import connections
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf

from idempotency_core.sql import prepared_cursor

_DEQUEUE = """
UPDATE django_q_ormq SET lock = %s
WHERE id IN (
    SELECT id FROM django_q_ormq WHERE key = %s AND lock < %s
    ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id, payload
"""
_ACKNOWLEDGE = "DELETE FROM django_q_ormq WHERE id = %s"


class SkipLockedORM(ORM):  # type: ignore[misc]  # django-q2 ships no types
    def dequeue(self) -> list[tuple[Any, Any]] | None:
        if connections[Conf.ORM].vendor != "postgresql":
            return super().dequeue()  # type: ignore[no-any-return]
        self.get_connection()  # as django-q2 does: close connections past their age
        now = timezone.now()
        with prepared_cursor(Conf.ORM) as cursor:
            cursor.execute(
                _DEQUEUE,
                [now + timedelta(seconds=Conf.RETRY), self.list_key, now, Conf.BULK],
            )
            tasks = [(row[0], row[1]) for row in cursor.fetchall()]
        if tasks:
            return tasks
        sleep(Conf.POLL)  # empty queue, spare the cpu (django-q2's own behaviour)
        return None

    def delete(self, task_id: Any) -> None:
        if connections[Conf.ORM].vendor != "postgresql":
            super().delete(task_id)
            return
        self.get_connection()
        with prepared_cursor(Conf.ORM) as cursor:
            cursor.execute(_ACKNOWLEDGE, [task_id])
