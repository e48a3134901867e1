"""What the promise model (tests/test_promise_model.py) reads from the real system.

The promise: per logical submission at most one CRM record, one task and one
confirmation (plus the "send again"s a person asked for), and whatever is not done
waits in exactly one open review case. These helpers read the database and the
sandbox, and wait until there is nothing left for a worker to do.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable

from django.db.models import Q, QuerySet

from idempotency_core.models import Event, Operation, ReviewCase
from tests.support.processes import Sandbox

# Due work: a worker will take it without anyone asking.
BUSY = Q(status=Operation.Status.RUNNING) | Q(
    status__in=Operation.CLAIMABLE, next_attempt_at__isnull=False
)


def operations_of(source_ids: Iterable[int]) -> QuerySet[Operation]:
    return Operation.objects.filter(event__source_id__in=list(source_ids))


def open_cases_of(source_ids: Iterable[int]) -> QuerySet[ReviewCase]:
    ids = list(source_ids)
    return ReviewCase.objects.filter(
        Q(event__source_id__in=ids) | Q(operation__event__source_id__in=ids),
        status__in=ReviewCase.OPEN_STATUSES,
    ).distinct()


def wait_quiet(source_ids: Iterable[int], *, timeout: float = 120) -> None:
    """Until no operation of these sources is running or due (a step waiting for an
    earlier one has no due time); fails loudly, naming what is still busy."""
    ids = list(source_ids)
    deadline = time.monotonic() + timeout
    while True:
        busy = list(
            operations_of(ids)
            .filter(BUSY)
            .values_list("pk", "step", "status", "next_attempt_at", "attempt_count")
        )
        if not busy:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not quiet after {timeout}s: {busy}")
        time.sleep(0.1)


def effects_by_email(sandbox: Sandbox, emails: Iterable[str]) -> tuple[Counter, Counter, Counter]:
    """(records, tasks, messages) at the sandbox per contact address in `emails`."""
    wanted = set(emails)
    records = [r for r in sandbox.records() if r.get("email") in wanted]
    tasks: Counter = Counter()
    for record in records:
        tasks[record["email"]] += len(sandbox.tasks(record["id"]))
    messages = Counter(
        {k: v for k, v in sandbox.stats()["messages_by_recipient"].items() if k in wanted}
    )
    return Counter(r["email"] for r in records), tasks, messages


def cases_holding(operation: Operation, cases: list[ReviewCase]) -> list[ReviewCase]:
    """The open cases an unfinished operation waits in: its own, or the case of the
    earlier step that holds it (which names it in `held_operations`)."""
    return [
        case
        for case in cases
        if case.operation_id == operation.pk
        or (operation.held_by_id is not None and operation.pk in case.held_operation_ids)
    ]


def unfinished_outside_one_case(source_ids: Iterable[int]) -> list[str]:
    """Each operation not succeeded or cancelled that is in no open case, or in more
    than one, with the cases it is in."""
    ids = list(source_ids)
    cases = list(open_cases_of(ids))
    problems = []
    for operation in operations_of(ids).exclude(status__in=Operation.DONE).order_by("pk"):
        holding = cases_holding(operation, cases)
        if len(holding) != 1:
            named = [f"#{c.pk} {c.kind} ({c.subject})" for c in holding]
            problems.append(
                f"operation {operation.pk} {operation.step} {operation.status} "
                f"(event {operation.event_id}) is in {len(holding)} open cases: {named}"
            )
    return problems


def events_waiting(event_ids: Iterable[str]) -> bool:
    """True when one of these events still waits for Onefold or a person: an
    unfinished operation, or an open case about it (an unreadable delivery's)."""
    ids = list(event_ids)
    unfinished = Operation.objects.filter(event_id__in=ids).exclude(status__in=Operation.DONE)
    cases = ReviewCase.objects.filter(
        Q(event_id__in=ids) | Q(operation__event_id__in=ids),
        status__in=ReviewCase.OPEN_STATUSES,
    )
    return unfinished.exists() or cases.exists()


def contact_email(event: Event) -> str:
    return str(((event.payload or {}).get("contact") or {}).get("email") or "")
