"""A person's erasure at the CRM (`person erase --crm`): one operation per erased event
whose enquiry the CRM holds, step `erase_person`, with its own key derived as every
operation key is (so a second request finds the same operation, never a second one).

The engine runs it as any effect: claimed, attempted, its outcome recorded. Deleting
twice is as once (the adapter reads a 404 as "already deleted"), so an unclear attempt
is simply repeated: a lost answer and its retry delete the person once.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone

from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.destinations import is_crm
from idempotency_core.execution.engine import operation_enqueue, operation_execute
from idempotency_core.execution.steps import ERASE_STEP
from idempotency_core.keys import operation_key
from idempotency_core.models import Attempt, Event, Operation

# After every pipeline step and merge: releasing "the next step" never picks it.
ERASE_POSITION = 200
RESUMED_ACTION = "crm_erasure_resumed"


def crm_erasures_create(
    *, event_ids: tuple[Any, ...], actor: User | None, now: datetime, system: str = ""
) -> list[int]:
    """The erasure operations of these events (created, or found from an earlier
    request): one per event whose enquiry a CRM holds. Call inside the transaction."""
    created = []
    enquiries = Operation.objects.filter(
        event_id__in=event_ids, step="create_enquiry", status=Operation.Status.SUCCEEDED
    ).exclude(destination_ref="")
    for enquiry in enquiries.select_related("event__source", "destination"):
        if not is_crm(enquiry.destination):
            continue
        event: Event = enquiry.event
        tasks = Operation.objects.filter(
            event=event, step="assign_task", status=Operation.Status.SUCCEEDED
        ).exclude(destination_ref="")
        operation, made = Operation.objects.get_or_create(
            event=event,
            step=ERASE_STEP,
            defaults={
                "position": ERASE_POSITION,
                "destination": enquiry.destination,
                "key": operation_key(
                    source_salt=event.source.key_salt, event_key=event.key, step=ERASE_STEP
                ),
                "arguments": {
                    "record_id": enquiry.destination_ref,
                    "task_ids": list(tasks.values_list("destination_ref", flat=True)),
                },
                "next_attempt_at": now,
                "next_trigger": Attempt.Trigger.REVIEWER if actor else Attempt.Trigger.WORKER,
                "next_triggered_by": actor,
                "enqueued_at": now,
            },
        )
        if not made and operation.status == Operation.Status.CANCELLED:
            _resume(operation, actor=actor, system=system, now=now)
        created.append(operation.pk)
    return created


def _resume(operation: Operation, *, actor: User | None, system: str, now: datetime) -> None:
    """A cancelled deletion (an older erasure cancelled it with the person's other steps
    when the request was made again) made due again under its own key: deleting is
    repeatable, so no earlier attempt needs checking. Only while it is still cancelled
    (the erasure holds the row's lock; the status says so)."""
    resumed = Operation.objects.filter(pk=operation.pk, status=Operation.Status.CANCELLED).update(
        status=Operation.Status.PENDING,
        next_attempt_at=now,
        next_trigger=Attempt.Trigger.REVIEWER if actor else Attempt.Trigger.WORKER,
        next_triggered_by=actor,
        enqueued_at=now,
        completed_at=None,
        held_by=None,
        updated_at=now,
    )
    if resumed:
        audit_record(
            action=RESUMED_ACTION,
            actor=actor,
            system=system,
            operation=operation,
            reason="A new erasure request asks the CRM again to delete the person.",
            details={"operation_key": operation.key},
        )


def crm_erasures_enqueue(operation_ids: list[int]) -> None:
    """For the workers (the console's request calls no destination)."""
    for operation_id in operation_ids:
        operation_enqueue(operation_id)


def crm_erasures_run(operation_ids: list[int], *, wait_seconds: float = 60.0) -> dict[int, str]:
    """Runs each erasure here and now, retrying while its next attempt falls within
    `wait_seconds`; what is left (a later retry, a case) the sweeper and the workers
    take on. Returns each operation's status."""
    deadline = time.monotonic() + wait_seconds
    statuses = {}
    for operation_id in operation_ids:
        while True:
            operation_execute(operation_id=operation_id)
            operation = Operation.objects.get(pk=operation_id)
            due = operation.next_attempt_at
            if operation.status not in Operation.CLAIMABLE or due is None:
                break
            delay = max(0.0, (due - timezone.now()).total_seconds())
            if time.monotonic() + delay > deadline:
                break
            time.sleep(delay)
        statuses[operation_id] = operation.status
    return statuses
