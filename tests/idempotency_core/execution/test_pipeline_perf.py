"""A worker runs the steps a success releases in the same task, with the same claim.

`operation_execute_chain` claims the next step in the transaction that records
the success of this one (instead of queueing it), then runs it. These tests
hold it to the rules every claim keeps: one effect per step however many run
it at once, a failure ends the chain, and a task short of time queues the next
step as before. The real-cluster test shows the whole: one task per submission,
and one HTTP and one SMTP connection per worker process, reused across tasks.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ, Task

from idempotency_core import tasks
from idempotency_core.configuration import versions
from idempotency_core.execution import content, engine, outcomes
from idempotency_core.execution.engine import TASK, operation_execute_chain
from idempotency_core.execution.sweeper import operations_sweep, requeue_grace
from idempotency_core.models import Attempt, ConfirmationAllowance, Event, Operation
from idempotency_core.review.replay import operation_replay
from idempotency_core.sql import table_of
from integrations import http
from tests.factories import ingest, op, permanent_case
from tests.support.counting_proxy import CountingProxy
from tests.support.plans import plans_run
from tests.support.processes import Sandbox, start_qcluster, wait_for
from tests.support.queue import queued, run_queued

STEPS = ("create_enquiry", "assign_task", "send_confirmation")

# Counts statements and connections, and its last test runs a real cluster.
pytestmark = [pytest.mark.serial, pytest.mark.usefixtures("unhurried_chain")]


def statuses(event: Event) -> list[str]:
    return [o.status for o in event.operations.order_by("position")]


def effects(sandbox: Sandbox) -> tuple[int, int, int]:
    stats = sandbox.stats()
    return stats["records"], stats["tasks"], stats["messages"]


@pytest.mark.django_db
def test_a_worker_task_runs_every_step_its_successes_release(sandbox):
    event = ingest("chain-1", contact_from_key=True)
    OrmQ.objects.all().delete()  # the first step's task, run here as a worker would
    assert tasks.operation_run(op(event, "create_enquiry").pk) == "succeeded"
    assert statuses(event) == ["succeeded"] * 3
    # One attempt each, claimed by the worker, and nothing left on the queue.
    attempts = Attempt.objects.filter(operation__event=event)
    assert sorted(attempts.values_list("operation__step", "number", "trigger")) == sorted(
        (step, 1, Attempt.Trigger.WORKER) for step in STEPS
    )
    assert not OrmQ.objects.exists()
    assert effects(sandbox) == (1, 1, 1)


@pytest.mark.django_db
def test_a_submissions_three_steps_cost_the_worker_five_statements(sandbox, monkeypatch):
    """Pinned so that no round trip creeps back (execution/statements.py): the first
    claim, which makes the suspected-duplicate search too (claiming only when it finds
    nothing), the first step's rendered content stored before its call
    (execution/content.py), then for each step one statement recording its success and
    claiming the next step with its content (the last one has none to claim). The one
    that claims the email also makes its decision against the sending limits (the
    recipient's lock, then the counts: execution/confirmations.py), committed with that
    claim. Each in its own transaction: no BEGIN, no COMMIT."""
    # In a worker the configuration comes from the per-process cache (config_cache.py),
    # which a test's transaction cannot use: read once here, as a warm worker has it.
    current = versions.config_current()
    monkeypatch.setattr(content, "config_current", lambda: current)
    warm = ingest("chain-warm", contact_from_key=True)  # verifies the destinations
    OrmQ.objects.all().delete()
    tasks.operation_run(op(warm, "create_enquiry").pk)
    event = ingest("chain-count", contact_from_key=True)
    first = op(event, "create_enquiry").pk
    OrmQ.objects.all().delete()
    with CaptureQueriesContext(connection) as captured:
        assert tasks.operation_run(first) == "succeeded"
    assert [_shape(q["sql"]) for q in captured.captured_queries] == [
        "WITH screened",  # no twin near: create_enquiry claimed
        f"UPDATE {table_of(Operation)}",  # create_enquiry's content, before its call
        "WITH waiting",  # success of create_enquiry, assign_task claimed
        # success of assign_task, send_confirmation claimed, counted and allowed
        "WITH waiting",
        "WITH waiting",  # success of send_confirmation
    ]
    assert "onefold_confirmation_allow" in captured.captured_queries[3]["sql"]
    assert statuses(event) == ["succeeded"] * 3
    assert effects(sandbox) == (2, 2, 2)
    allowed = ConfirmationAllowance.objects.get(operation=op(event, "send_confirmation"))
    assert allowed.recipient_digest and not allowed.by_person
    # Each chained claim is an attempt like any other, and read the steps before it.
    attempts = Attempt.objects.filter(operation__event=event).order_by("operation__position")
    assert [(a.number, a.trigger, a.outcome) for a in attempts] == [
        (1, Attempt.Trigger.WORKER, Attempt.Outcome.SUCCEEDED)
    ] * 3
    record = op(event, "create_enquiry").destination_ref
    listed = sandbox.client.get(f"/crm/records/{record}/tasks").json()["results"]
    assert [task["id"] for task in listed] == [op(event, "assign_task").destination_ref]


@pytest.mark.django_db
@pytest.mark.parametrize("analysed", [True, False], ids=["drained-statistics", "none-taken"])
def test_the_workers_statements_find_operations_by_key_whatever_the_statistics_say(
    sandbox, analysed
):
    """Statistics taken when every operation had succeeded (a drained queue) say that
    pending and running ones are rare. Planned with them, the worker's statements
    reached operations through the status index, reading every pending or succeeded
    one of a burst for each step (1.1 ms a statement in a 3,000-submission burst in
    `bench_pipeline`, against 0.3). They must reach them by id and by event only, and
    so on a table never analysed (a new database: `make bench` on a new machine, where
    the success's release read the whole table, 11 ms a statement)."""
    for n in range(150):
        ingest(f"drained-{n}", contact_from_key=True)
    Operation.objects.update(status=Operation.Status.SUCCEEDED)
    if analysed:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE idempotency_core_operation")
    for n in range(150):  # the burst
        event = ingest(f"burst-{n}", contact_from_key=True)
    OrmQ.objects.all().delete()
    with plans_run() as plans:
        assert tasks.operation_run(op(event, "create_enquiry").pk) == "succeeded"
    statements = [p for p in plans if "WITH screened" in p or "WITH waiting" in p]
    assert len(statements) == 4
    assert not [p for p in statements if "operation_status_idx" in p], statements
    # Nor by reading the whole table: each statement touches one event's steps.
    assert not [p for p in statements if "Seq Scan on idempotency_core_operation" in p]
    assert statuses(event) == ["succeeded"] * 3


def _shape(sql: str) -> str:
    """`VERB table`, or for a statement of CTEs, `WITH` and the first one's name."""
    words = sql.split()
    if words[0] == "WITH":
        return f"WITH {words[1]}"
    if " FROM " not in sql:
        return f"{words[0]} {words[1].partition('(')[0]}"
    table = sql.split(" FROM ", 1)[1].split()[0].partition("(")[0]
    return f"{words[0]} {table.strip(chr(34))}"


@pytest.mark.django_db
def test_a_worker_dead_after_a_success_that_claimed_the_next_step_is_recovered_by_the_sweeper(
    sandbox, monkeypatch
):
    """In a chain the success statement claims the next step for this worker. A worker
    that dies before that step's call leaves it claimed by nobody alive: the sweeper
    leaves it alone while the lease runs, then recovers it, and it runs once."""
    event = ingest("chain-dies", contact_from_key=True)
    OrmQ.objects.all().delete()

    def dies(claim: object) -> None:
        raise SystemExit("worker killed before the next step's call")

    with monkeypatch.context() as patched:
        patched.setattr(engine, "operation_perform", _first_only(engine.operation_perform, dies))
        with pytest.raises(SystemExit):
            tasks.operation_run(op(event, "create_enquiry").pk)
    assert statuses(event) == ["succeeded", "running", "pending"]
    assert effects(sandbox) == (1, 0, 0)
    assert operations_sweep().interrupted == 0  # the lease still runs: perhaps only slow
    Operation.objects.filter(pk=op(event, "assign_task").pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert operations_sweep().interrupted == 1
    assert statuses(event) == ["succeeded", "retry_scheduled", "pending"]
    Operation.objects.filter(pk=op(event, "assign_task").pk, enqueued_at__isnull=True).update(
        next_attempt_at=timezone.now()  # the backoff is over (full jitter: it may be already)
    )
    operations_sweep()
    # Queued once, by this sweep or by the one above when the backoff was already over.
    assert [row.task["args"] for row in queued(TASK)] == [(op(event, "assign_task").pk,)]
    assert run_queued(TASK) == ["succeeded"]
    assert statuses(event) == ["succeeded"] * 3
    assert effects(sandbox) == (1, 1, 1)
    recovered = op(event, "assign_task").attempts.order_by("number")
    assert [(a.trigger, a.outcome) for a in recovered] == [
        (Attempt.Trigger.WORKER, Attempt.Outcome.INTERRUPTED),
        (Attempt.Trigger.SWEEPER, Attempt.Outcome.SUCCEEDED),
    ]


@pytest.mark.django_db
def test_a_worker_dead_between_a_success_and_queueing_the_next_step_is_recovered_by_the_sweeper(
    sandbox, monkeypatch
):
    """Outside a chain the success statement makes the next step due before any task
    exists for it; a worker that dies before queueing it leaves a due step without a
    task, which the sweeper queues once the grace has passed, and which then runs once."""
    event = ingest("queue-dies", contact_from_key=True)
    OrmQ.objects.all().delete()

    def dies(operation_id: int) -> None:
        raise SystemExit("worker killed before queueing the next step")

    with monkeypatch.context() as patched:
        patched.setattr(outcomes, "operation_enqueue", dies)
        with pytest.raises(SystemExit):
            operation_execute_chain(operation_id=op(event, "create_enquiry").pk, seconds=0)
    assert statuses(event) == ["succeeded", "pending", "pending"]
    assert op(event, "assign_task").next_attempt_at is not None  # due, with no task
    assert not OrmQ.objects.exists()
    assert operations_sweep().requeued == 0  # within the grace: perhaps only slow
    Operation.objects.filter(pk=op(event, "assign_task").pk).update(
        enqueued_at=timezone.now() - requeue_grace() - timedelta(seconds=1)
    )
    assert operations_sweep().requeued == 1
    assert run_queued(TASK) == ["succeeded"]
    assert statuses(event) == ["succeeded"] * 3
    assert effects(sandbox) == (1, 1, 1)


def _first_only(function: Any, instead: Any) -> Any:
    calls = {"n": 0}

    def first_only(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        return function(*args, **kwargs) if calls["n"] == 1 else instead(*args, **kwargs)

    return first_only


@pytest.mark.django_db
def test_a_success_that_settles_a_case_releases_the_next_step_to_the_chain_too(sandbox):
    """A replayed step's success settles its case in the outcome's transaction, not in
    the one statement; the next step is released there (statements.release_write),
    claimed for this worker as the statement would have: the chain runs on."""
    case = permanent_case("chain-replayed")
    replayer = User.objects.create_user("replayer", is_staff=True)
    replayer.groups.add(Group.objects.get(name="Replay admins"))
    event = case.operation.event
    operation_replay(operation_id=case.operation.pk, actor=replayer, reason="fixed")
    OrmQ.objects.all().delete()  # the replay's task, run here as a worker would
    assert tasks.operation_run(op(event, "create_enquiry").pk) == "succeeded"
    assert statuses(event) == ["succeeded"] * 3
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "replayed")
    later = Attempt.objects.filter(operation__event=event).exclude(operation__step=STEPS[0])
    assert sorted(later.values_list("operation__step", "trigger")) == sorted(
        (step, Attempt.Trigger.WORKER) for step in STEPS[1:]
    )
    assert not OrmQ.objects.exists()
    assert effects(sandbox) == (1, 1, 1)


@pytest.mark.django_db
def test_a_task_without_time_for_another_step_queues_it(sandbox):
    event = ingest("chain-2", contact_from_key=True)
    OrmQ.objects.all().delete()
    operation_execute_chain(operation_id=op(event, "create_enquiry").pk, seconds=0)
    assert statuses(event) == ["succeeded", "pending", "pending"]
    assert [row.task["args"] for row in queued(TASK)] == [(op(event, "assign_task").pk,)]
    assert op(event, "assign_task").next_attempt_at is not None  # due, queued
    assert op(event, "send_confirmation").next_attempt_at is None  # waits for it
    assert effects(sandbox) == (1, 0, 0)


@pytest.mark.django_db
def test_a_step_that_fails_ends_the_chain(sandbox):
    event = ingest("chain-3", contact_from_key=True)
    OrmQ.objects.all().delete()
    sandbox.fault("create_task", "http_503")
    assert tasks.operation_run(op(event, "create_enquiry").pk) == "succeeded"
    assert statuses(event) == ["succeeded", "retry_scheduled", "pending"]
    assert op(event, "send_confirmation").next_attempt_at is None
    assert not OrmQ.objects.exists()  # the retry is the sweeper's to queue when due
    assert effects(sandbox) == (1, 0, 0)


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # threads race on commits
def test_tasks_racing_on_one_pipeline_make_each_effect_once(sandbox):
    event = ingest("chain-4", contact_from_key=True)
    first = op(event, "create_enquiry").pk
    barrier = threading.Barrier(4)

    def worker() -> None:
        try:
            barrier.wait()
            tasks.operation_run(first)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses(event) == ["succeeded"] * 3
    assert Attempt.objects.filter(operation__event=event).count() == 3
    assert effects(sandbox) == (1, 1, 1)


def test_a_forked_process_builds_its_own_http_client():
    parent = http.shared_client()
    assert http.shared_client() is parent  # reused within the process
    pid = os.fork()
    if pid == 0:  # the child: inherits the parent's object, must not use it
        os._exit(0 if http.shared_client() is not parent else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert http.shared_client() is parent


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the cluster commits
def test_a_cluster_runs_each_pipeline_in_one_task_over_reused_connections(sandbox, tmp_path):
    http_proxy, smtp_proxy = CountingProxy(sandbox.http_port), CountingProxy(sandbox.smtp_port)
    proxied = Sandbox(child=sandbox.child, http_port=http_proxy.port, smtp_port=smtp_proxy.port)
    count = 30
    with transaction.atomic():  # posted at once
        events = [ingest(f"burst-{n}", contact_from_key=True) for n in range(count)]
    cluster = start_qcluster(
        tmp_path,
        proxied,
        env={
            "ONEFOLD_Q_WORKERS": "2",
            # Task results kept, to count the tasks; room for three steps in one task
            # however loaded the machine (the lease must outlast the task).
            "ONEFOLD_Q_SAVE_LIMIT": "0",
            "ONEFOLD_Q_TIMEOUT": "20",
            "ONEFOLD_LEASE_SECONDS": "30",
        },
    )
    try:
        done = Operation.objects.filter(status=Operation.Status.SUCCEEDED)
        wait_for(lambda: done.count() == 3 * count, timeout=120, what="every step")
        # The monitor saves a task's result, then acknowledges it (deletes its queue
        # row): stopped at the last step's success, it could lose the last result.
        wait_for(lambda: not OrmQ.objects.exists(), timeout=30, what="every acknowledgement")
    except TimeoutError:
        print(cluster.log()[-10000:])
        raise
    finally:
        cluster.stop()
        http_proxy.close()
        smtp_proxy.close()
    assert effects(sandbox) == (count, count, count)
    assert not Attempt.objects.exclude(number=1).exists()
    # One task per submission, not one per step.
    assert Task.objects.filter(func=TASK, success=True).count() == count
    assert {e.pk for e in events} == set(Event.objects.values_list("pk", flat=True))
    # Each worker process kept one connection to each server across its tasks.
    assert 1 <= http_proxy.accepted <= 2
    assert 1 <= smtp_proxy.accepted <= 2
