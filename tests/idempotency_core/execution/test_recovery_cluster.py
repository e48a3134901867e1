"""Failure recovery on real parts: django-q2 clusters killed mid-step, two clusters
and two sweepers under random faults, retry bounds measured from attempt times.

Each test uses real commits (`transaction=True`) because separate processes
(workers, sweepers, gunicorn) must see the rows.
"""

from __future__ import annotations

import itertools
import signal
import statistics
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.utils import timezone

from idempotency_core.execution.sweeper import operations_sweep
from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Attempt, Event, Operation, ReviewCase
from lab.sandbox.store import FAULT_MODES
from tests.factories import ingest, submission
from tests.support.processes import wait_for

LEASE_SECONDS = 6  # config.test_settings

# Serial: workers killed mid-step and back-offs timed against the lease; two clusters
# and two sweepers under faults.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def settled(events: list[Event]) -> bool:
    """Nothing left to do without a person: no step running, scheduled or due."""
    return not Operation.objects.filter(
        event__in=events,
        status__in=[
            Operation.Status.PENDING,
            Operation.Status.RUNNING,
            Operation.Status.RETRY_SCHEDULED,
        ],
    ).exists()


def assert_no_duplicate_effects(stats: dict) -> None:
    for name in ("records_by_external_ref", "tasks_by_external_ref", "messages_by_message_id"):
        duplicated = {ref: n for ref, n in stats[name].items() if n > 1}
        assert not duplicated, f"duplicate effects in {name}: {duplicated}"


def assert_everything_accounted_for(events: list[Event]) -> dict[str, int]:
    """Every operation `succeeded`, or `needs_review` with an open case naming why:
    its own case, or (a later step held behind one in review) the case that holds it."""
    tally: dict[str, int] = defaultdict(int)
    for operation in Operation.objects.filter(event__in=events):
        if operation.status == Operation.Status.SUCCEEDED:
            tally["succeeded"] += 1
            continue
        assert operation.status == Operation.Status.NEEDS_REVIEW, (operation, operation.status)
        if operation.held_by_id is None:
            case = ReviewCase.objects.get(operation=operation, status__in=ReviewCase.OPEN_STATUSES)
            assert case.summary
            tally[f"review:{case.kind}"] += 1
        else:
            holder = ReviewCase.objects.get(
                operation_id=operation.held_by_id, status__in=ReviewCase.OPEN_STATUSES
            )
            assert operation.pk in holder.held_operation_ids
            assert operation.step in holder.summary.partition("Held until this case")[2]
            tally["held behind review"] += 1
    return dict(tally)


def print_unsettled(events: list[Event]) -> None:
    operations = Operation.objects.filter(event__in=events)
    print("\nstatus counts:", dict(Counter(operations.values_list("status", flat=True))))
    busy = operations.exclude(status__in=["succeeded", "needs_review"])
    for operation in busy[:10]:
        attempts = list(operation.attempts.values_list("number", "outcome", "error_message"))
        print(
            operation.pk,
            operation.step,
            operation.status,
            operation.next_attempt_at,
            operation.enqueued_at,
            operation.lease_expires_at,
            attempts,
        )


STEP_ACTIONS = {
    "create_enquiry": "create_record",
    "assign_task": "create_task",
    "send_confirmation": "send_email",
}


@pytest.mark.parametrize("step", list(STEP_ACTIONS))
def test_a_worker_killed_mid_step_leaves_one_effect_or_one_case(sandbox, qcluster_factory, step):
    action = STEP_ACTIONS[step]
    # The destination takes a second to answer, so the kill lands inside the call.
    sandbox.fault(action, "slow", seconds=1.0)
    cluster = qcluster_factory("qcluster-1")
    event = ingest(f"kill-{step}-{uuid.uuid4().hex[:6]}", contact_from_key=True)
    target = event.operations.get(step=step)

    wait_for(
        lambda: (
            Operation.objects.get(pk=target.pk).status == "running"
            and sandbox.stats()["calls"].get(action, 0) >= 1
        ),
        timeout=30,
        what=f"{step} to be in flight",
    )
    cluster.stop(signal.SIGKILL)
    time.sleep(1.5)  # the destination finishes its slow call for the dead worker

    # After the lease, one sweep recovers the operation: nothing stays running.
    wait_for(
        lambda: Operation.objects.get(pk=target.pk).lease_expires_at < timezone.now(),
        timeout=LEASE_SECONDS + 5,
        what="the lease to expire",
    )
    assert operations_sweep().interrupted == 1
    assert not Operation.objects.filter(status="running").exists()
    interrupted = Attempt.objects.get(operation=target, outcome="interrupted")
    assert interrupted.error_class == "LeaseExpired"

    qcluster_factory("qcluster-2")
    qcluster_factory.sweeper()
    wait_for(lambda: settled([event]), timeout=60, what="the event to settle")

    stats = sandbox.stats()
    assert_no_duplicate_effects(stats)
    target.refresh_from_db()
    if step == "send_confirmation":
        # Whether the sink kept a message whose sender vanished is its business;
        # Onefold cannot know, so it sends at most once and a person checks.
        assert (stats["records"], stats["tasks"]) == (1, 1)
        assert stats["messages"] <= 1
        assert target.status == "needs_review"
        case = ReviewCase.objects.get(operation=target)
        assert case.kind == "interrupted_send"
    else:
        assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)
        assert target.status == "succeeded"
        assert set(event.operations.values_list("status", flat=True)) == {"succeeded"}
        assert ReviewCase.objects.count() == 0
        # The effect the dead worker made was adopted, not made again.
        assert Attempt.objects.filter(operation=target, outcome="succeeded", adopted=True).exists()


def test_two_clusters_and_two_sweepers_under_random_faults(sandbox, web_server, qcluster_factory):
    events_wanted = 500
    sandbox.client.post(
        "/_sandbox/chaos",
        json={
            "rate": 0.2,
            "seed": 20261129,
            "modes": list(FAULT_MODES),  # every one the sandbox has
        },
    ).raise_for_status()
    for name in ("cluster-a", "cluster-b"):
        qcluster_factory(name)
    for name in ("sweeper-a", "sweeper-b"):
        qcluster_factory.sweeper(name)

    _, _, key = source_create_with_key(name="chaos")
    url = f"{web_server.url}/api/v1/submissions/"

    def post(i: int) -> int:
        body = submission(contact={"name": f"C{i}", "email": f"c{i}@example.com"})
        response = httpx.post(
            url,
            json=body,
            headers={"Authorization": f"Api-Key {key}", "Idempotency-Key": f"chaos-{i}"},
            timeout=60,
        )
        return response.status_code

    with ThreadPoolExecutor(max_workers=12) as pool:
        codes = list(pool.map(post, range(events_wanted)))
    assert codes.count(202) == events_wanted

    events = list(Event.objects.filter(source__name="chaos"))
    try:
        wait_for(lambda: settled(events), timeout=600, interval=1, what="all events to settle")
    except TimeoutError:
        print_unsettled(events)
        raise

    stats = sandbox.stats()
    assert_no_duplicate_effects(stats)
    tally = assert_everything_accounted_for(events)
    print(f"\noutcomes over {events_wanted} events: {tally}; sandbox calls: {stats['calls']}")
    # Every succeeded enquiry is in the CRM under its own key, and nothing else is.
    succeeded_keys = set(
        Operation.objects.filter(
            event__in=events, step="create_enquiry", status="succeeded"
        ).values_list("key", flat=True)
    )
    assert succeeded_keys <= set(stats["records_by_external_ref"])
    assert tally["succeeded"] > events_wanted  # most of the 1,500 operations went through
    assert sum(stats["calls"].values()) > 3 * events_wanted


def attempt_gaps(operation: Operation) -> list[float]:
    starts = list(operation.attempts.order_by("number").values_list("started_at", flat=True))
    return [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]


def test_retries_back_off_honour_retry_after_and_stop_at_the_bound(sandbox, qcluster_factory):
    timings = {"ONEFOLD_RETRY_BASE_SECONDS": "1", "ONEFOLD_RETRY_MAX_SECONDS": "8"}
    qcluster_factory("qcluster", **timings)
    qcluster_factory.sweeper("sweeper", **timings)

    # Permanent: one attempt, a case, no retry.
    sandbox.fault("create_record", "http_400")
    permanent = ingest(f"permanent-{uuid.uuid4().hex[:6]}", contact_from_key=True)
    wait_for(lambda: settled([permanent]), timeout=60, what="the permanent failure")
    enquiry = permanent.operations.get(step="create_enquiry")
    assert enquiry.status == "needs_review" and enquiry.attempts.count() == 1
    assert ReviewCase.objects.get(operation=enquiry).kind == "permanent_failure"

    # Retry-After: the next attempt waits at least as long as the destination asked.
    sandbox.fault("create_record", "http_429", seconds=2)
    throttled = ingest(f"throttled-{uuid.uuid4().hex[:6]}", contact_from_key=True)
    wait_for(lambda: settled([throttled]), timeout=60, what="the throttled event")
    enquiry = throttled.operations.get(step="create_enquiry")
    assert enquiry.status == "succeeded"
    assert list(enquiry.attempts.values_list("retry_after_seconds", flat=True)) in (
        [2.0, None],
        [None, 2.0],
    )
    assert attempt_gaps(enquiry)[0] >= 2.0

    # Retryable: four attempts (ONEFOLD_MAX_ATTEMPTS), growing delays, then a case.
    operations_wanted = 24
    sandbox.fault("create_record", "http_503", times=4 * operations_wanted, seconds=0)
    failing = [
        ingest(f"503-{i}-{uuid.uuid4().hex[:6]}", contact_from_key=True)
        for i in range(operations_wanted)
    ]
    wait_for(lambda: settled(failing), timeout=120, what="the retries to run out")
    gaps_by_position: dict[int, list[float]] = defaultdict(list)
    for event in failing:
        enquiry = event.operations.get(step="create_enquiry")
        assert enquiry.status == "needs_review"
        assert list(enquiry.attempts.values_list("outcome", flat=True)) == ["retryable"] * 4
        assert ReviewCase.objects.get(operation=enquiry).kind == "retries_exhausted"
        for position, gap in enumerate(attempt_gaps(enquiry), start=1):
            # Full jitter up to base x 2^(n-1), plus the sweeper's and poller's delay.
            assert gap <= 1.0 * 2 ** (position - 1) + 2.0, (position, gap)
            gaps_by_position[position].append(gap)
    means = [statistics.mean(gaps_by_position[p]) for p in (1, 2, 3)]
    print(f"\nmean gap after attempts 1, 2, 3: {[round(m, 2) for m in means]} s")
    # Ceilings 1 s, 2 s, 4 s: the third delay is clearly the longest on average.
    assert means[0] < means[2] and means[1] < means[2]
    assert sandbox.stats()["records"] == 1  # only the throttled event's enquiry
