"""The queue's dequeue (idempotency_core/broker.py): one statement, the primary key
walked whatever the statistics say, no two pushers ever handed the
same row, and django-q2's delivery rules kept (an unacknowledged row
comes back when its lock expires; acknowledging deletes it)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ

from idempotency_core.broker import SkipLockedORM
from tests.support.plans import plans_run

# Serial: the racing pushers must drain the queue within a lease (Conf.RETRY), and the
# plans are read from a table's statistics.
pytestmark = [pytest.mark.serial, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


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
    (sql,) = [q["sql"] for q in captured.captured_queries]
    # As the query log shows a server-bound statement: its parameters quoted in.
    assert sql.startswith(f"SELECT task_id, task_payload FROM onefold_queue_take('{key}', "), sql
    first = OrmQ.objects.filter(key=key).order_by("id").first()
    assert tasks == [(first.pk, "task-0")]
    first.refresh_from_db()
    assert first.lock > timezone.now() + timedelta(seconds=Conf.RETRY - 5)  # leased


def test_a_task_queued_in_a_transaction_is_one_insert_that_rolls_back_with_it():
    broker = SkipLockedORM(list_key="enqueue-test")
    with CaptureQueriesContext(connections["default"]) as captured:
        task_id = broker.enqueue("payload")
    assert [q["sql"].split(" (")[0] for q in captured.captured_queries] == [
        "INSERT INTO django_q_ormq"
    ]
    row = OrmQ.objects.get(pk=task_id)
    assert (row.key, row.payload) == ("enqueue-test", "payload")
    assert row.lock <= timezone.now()  # due at once, as django-q2's own broker queues it
    with pytest.raises(RuntimeError), transaction.atomic():
        broker.enqueue("rolled back")
        raise RuntimeError
    assert not OrmQ.objects.filter(payload="rolled back").exists()


def test_a_burst_is_dequeued_along_the_primary_key_after_a_cluster_idled_on_an_empty_queue():
    """Autovacuum found the queue empty and a cluster polled it so. With those statistics
    the planner's choice was a scan and sort of every due row, so that a burst of N tasks
    cost N rows read for each (0.7 ms of PostgreSQL's CPU a task in a 3,000-task burst
    in `bench_pipeline`); prepared, that plan was kept. It must walk the primary key."""
    OrmQ.objects.all().delete()
    with connections["default"].cursor() as cursor:
        cursor.execute("ANALYZE django_q_ormq")  # as autovacuum finds a queue: empty
    idle = SkipLockedORM(list_key=f"test-{uuid.uuid4().hex[:8]}")
    _keep_the_session(idle)
    for _ in range(8):  # past PostgreSQL's five custom plans of a prepared statement
        assert idle.dequeue() is None
    idle.list_key = queue_of(2000)
    with plans_run(nested=True) as plans:
        ((task_id, _),) = idle.dequeue()
    (plan,) = [p for p in plans if "Update on django_q_ormq" in p]
    assert task_id == OrmQ.objects.filter(key=idle.list_key).order_by("id").first().pk
    assert "Sort" not in plan and "Seq Scan" not in plan, plan
    assert "Index Scan using django_q_ormq_pkey" in plan, plan


def test_the_queues_own_commits_do_not_wait_for_the_wal_flush_and_change_nothing_else():
    """The dequeue's lock and the acknowledgement's DELETE commit without waiting for
    the WAL flush (broker.py says why a loss is safe), each for its own transaction
    only: the session's settings, which the worker's statements run under, are kept."""
    key = queue_of(1)
    broker = SkipLockedORM(list_key=key)
    _keep_the_session(broker)
    # Each in a transaction of the test's, to read the settings its commit will use.
    with transaction.atomic():
        ((task_id, _),) = broker.dequeue()
        assert _settings() == ("off", "on")  # sorting is off only inside the function
    with transaction.atomic():
        broker.acknowledge(task_id)
        assert _settings() == ("off", "on")
    assert not OrmQ.objects.filter(key=key).exists()
    assert _settings() == ("on", "on")


def _settings() -> tuple[str, str]:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('synchronous_commit'), current_setting('enable_sort')"
        )
        return cursor.fetchone()


def _keep_the_session(broker: SkipLockedORM) -> None:
    """django-q2's broker closes connections past their age before each call, and the
    tests' age is 0: the plans are read in this session, so it is kept."""
    broker.get_connection = lambda *args, **kwargs: None


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


def test_an_empty_queue_is_asked_again_sooner_shortly_after_a_task(monkeypatch):
    """At a steady rate the next task is near: after one, the pusher does not wait out
    the whole poll; once the queue has been quiet a while, it does (an idle cluster's
    dequeues stay at Conf.POLL's rate)."""
    from idempotency_core import broker as module

    slept: list[float] = []
    monkeypatch.setattr(module, "sleep", slept.append)
    clock = [1000.0]
    monkeypatch.setattr(module, "monotonic", lambda: clock[0])
    key = queue_of(1)
    broker = SkipLockedORM(list_key=key)

    assert len(broker.dequeue() or []) == 1  # the one task: no sleep
    assert slept == []
    assert broker.dequeue() is None
    clock[0] += module._BUSY_SECONDS + 0.1
    assert broker.dequeue() is None

    assert slept == [module._BUSY_POLL, Conf.POLL]
    assert module._BUSY_POLL < Conf.POLL


def test_the_dequeue_is_planned_once_a_connection():
    """A LANGUAGE sql function with a SET clause is never inlined and its statements are
    planned at every call, which cost the dequeue more than running it
    (docs/benchmarks.md). PL/pgSQL keeps its statements' plans for the connection."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
            "WHERE p.proname = 'onefold_queue_take'"
        )
        assert cursor.fetchall() == [("plpgsql",)]
