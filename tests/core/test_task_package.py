"""The task ingest inserts with a submission's rows (`operation_task_package`) is the one
django-q2's own `async_task` would queue for that operation: same dictionary, same
signing, read back by django-q2's own `SignedPackage.loads` as a worker reads it."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from django.dispatch import receiver
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signals import pre_enqueue
from django_q.signing import BadSignature, SignedPackage
from django_q.tasks import async_task

from idempotency_core.execution.engine import (
    TASK,
    operation_enqueue,
    operation_task_package,
    tasks_queued_to,
)


class _Kept:
    """A broker for `async_task` that keeps the signed package instead of queueing it."""

    def __init__(self, list_key: str) -> None:
        self.list_key = list_key
        self.package = ""

    def enqueue(self, package: str) -> str:
        self.package = package
        return "kept"


def _async_tasks_package(operation_id: int, queue: str | None) -> dict[str, object]:
    options = {"cluster": queue} if queue else {}
    kept = _Kept(queue or Conf.CLUSTER_NAME)
    async_task(TASK, operation_id, task_name=f"operation-{operation_id}", broker=kept, **options)
    return SignedPackage.loads(kept.package)


def _without_ids_and_times(task: dict[str, object]) -> dict[str, object]:
    assert re.fullmatch(r"[0-9a-f]{32}", str(task["id"]))  # as django-q2's, a uuid4's hex
    assert isinstance(task["started"], datetime) and timezone.is_aware(task["started"])
    return {key: value for key, value in task.items() if key not in ("id", "started")}


@pytest.mark.parametrize("queue", [None, "drill-queue"])
def test_the_package_is_the_task_async_task_would_queue(queue):
    def built() -> tuple[str, dict[str, object]]:
        list_key, package = operation_task_package(41)
        return list_key, SignedPackage.loads(package)

    if queue:
        with tasks_queued_to(queue):
            list_key, ours = built()
    else:
        list_key, ours = built()
    theirs = _async_tasks_package(41, queue)
    assert list_key == (queue or Conf.CLUSTER_NAME)
    assert _without_ids_and_times(ours) == _without_ids_and_times(theirs)
    assert list(ours) == list(theirs)  # the same keys, in the same order
    assert ours["args"] == (41,) and ours["kwargs"] == {}


@pytest.mark.parametrize(
    ("attribute", "key"), [("CACHED", "cached"), ("ACK_FAILURES", "ack_failure")]
)
def test_the_clusters_overrides_reach_the_package_as_async_task_adds_them(
    monkeypatch, attribute, key
):
    monkeypatch.setattr(Conf, attribute, True)
    ours = SignedPackage.loads(operation_task_package(7)[1])
    assert _without_ids_and_times(ours) == _without_ids_and_times(_async_tasks_package(7, None))
    assert ours[key] is True


def test_each_package_has_an_id_of_its_own_and_the_pre_enqueue_signal_sees_it():
    seen: list[dict[str, object]] = []

    @receiver(pre_enqueue)
    def keep(sender, task, **kwargs):
        seen.append(task)

    try:
        first = SignedPackage.loads(operation_task_package(1)[1])
        second = SignedPackage.loads(operation_task_package(1)[1])
    finally:
        pre_enqueue.disconnect(keep)
    assert first["id"] != second["id"]
    assert [task["id"] for task in seen] == [first["id"], second["id"]]


def test_a_package_is_signed_so_that_a_worker_refuses_one_altered():
    package = operation_task_package(3)[1]
    with pytest.raises(BadSignature):
        SignedPackage.loads(package[:-5] + "xxxxx")


@pytest.mark.django_db
def test_operation_enqueue_still_queues_through_async_task_to_the_same_queue():
    with tasks_queued_to("package-test"):
        operation_enqueue(5)
    (row,) = OrmQ.objects.filter(key="package-test")
    assert row.task["func"] == TASK and row.task["args"] == (5,)
    assert _without_ids_and_times(row.task) == _without_ids_and_times(
        _async_tasks_package(5, "package-test")
    )
