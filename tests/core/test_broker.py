"""The queue's dequeue (idempotency_core/broker.py): one statement, no two pushers
ever handed the same row, and django-q2's delivery rules kept (an unacknowledged row
comes back when its lock expires; acknowledging deletes it)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ

from idempotency_core.broker import SkipLockedORM

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def queue_of(count: int) -> str:
    key = f"test-{uuid.uuid4().hex[:8]}"
    OrmQ.objects.bulk_create(
        OrmQ(key=key, payload=f"task-{n}", lock=timezone.now() - timedelta(seconds=1))
        for n in range(count)
    )
    return key


def test_the_configured_broker_is_this_one():
    assert isinstance(get_broker(), SkipLockedORM)


def test_a_dequeue_is_one_statement_and_takes_the_oldest_due_row():
    key = queue_of(3)
    broker = SkipLockedORM(list_key=key)
    broker.get_connection()  # its close_old_connections() first, outside the capture
    with CaptureQueriesContext(connections["default"]) as captured:
        tasks = broker.dequeue()
    assert len(captured.captured_queries) == 1
    first = OrmQ.objects.filter(key=key).order_by("id").first()
    assert tasks == [(first.pk, "task-0")]
    first.refresh_from_db()
    assert first.lock > timezone.now() + timedelta(seconds=Conf.RETRY - 5)  # leased


def test_racing_pushers_are_never_handed_the_same_row():
    key = queue_of(300)
    taken: list[list[int]] = [[] for _ in range(4)]
    start = threading.Barrier(4)

    def pusher(n: int) -> None:
        broker = SkipLockedORM(list_key=key)
        try:
            start.wait()
            while tasks := broker.dequeue():
                taken[n] += [task_id for task_id, _ in tasks]
        finally:
            connections.close_all()

    threads = [threading.Thread(target=pusher, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [task_id for ids in taken for task_id in ids]
    assert len(everything) == 300
    assert len(set(everything)) == 300
    assert sum(1 for ids in taken if ids) > 1  # they did race


def test_an_unacknowledged_row_comes_back_when_its_lock_expires_and_ack_deletes_it():
    key = queue_of(1)
    broker = SkipLockedORM(list_key=key)
    ((task_id, _),) = broker.dequeue()
    assert broker.dequeue() is None  # leased: not handed out again (after a poll's sleep)
    OrmQ.objects.filter(pk=task_id).update(lock=timezone.now() - timedelta(seconds=1))
    assert broker.dequeue() == [(task_id, "task-0")]  # the lease ran out: redelivered
    broker.acknowledge(task_id)
    assert not OrmQ.objects.filter(pk=task_id).exists()
