"""A step's task is queued with django-q2's own `async_task`, through the broker class
(`idempotency_core.broker`), to the queue `tasks_queued_to` names."""

from __future__ import annotations

import os

import pytest
from django.db import transaction
from django_q.conf import Conf
from django_q.models import OrmQ

from idempotency_core.broker import SkipLockedORM
from idempotency_core.execution import enqueue
from idempotency_core.execution.engine import TASK, operation_enqueue, tasks_queued_to

pytestmark = pytest.mark.django_db


def test_operation_enqueue_queues_through_async_task_to_the_named_queue():
    with tasks_queued_to("package-test"):
        operation_enqueue(5)
    (row,) = OrmQ.objects.filter(key="package-test")
    assert row.task["func"] == TASK and row.task["args"] == (5,) and row.task["kwargs"] == {}
    assert row.task["name"] == "operation-5" and row.task["cluster"] == "package-test"


def test_each_queue_has_one_broker_per_process():
    operation_enqueue(6)
    operation_enqueue(7)
    broker = enqueue._broker(Conf.CLUSTER_NAME, os.getpid())
    assert isinstance(broker, SkipLockedORM) and broker.list_key == Conf.CLUSTER_NAME
    assert [row.task["args"] for row in OrmQ.objects.order_by("pk")] == [(6,), (7,)]


def test_the_task_rolls_back_with_the_transaction_that_queued_it():
    with pytest.raises(RuntimeError), transaction.atomic():
        operation_enqueue(8)
        assert OrmQ.objects.count() == 1
        raise RuntimeError
    assert not OrmQ.objects.exists()
