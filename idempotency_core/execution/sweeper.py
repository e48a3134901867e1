"""The sweeper: recovers what crashed and re-enqueues what was lost (docs/architecture.md)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone
from django_q.brokers import get_broker

from idempotency_core.execution.claims import Claim, ClaimedAttempt
from idempotency_core.execution.engine import operation_enqueue
from idempotency_core.execution.outcomes import operation_record_outcome
from idempotency_core.execution.perform import AttemptResult
from idempotency_core.models import Attempt, Operation

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepReport:
    interrupted: int
    requeued: int


def operations_sweep(
    *, batch_size: int = 500, scope: QuerySet[Operation] | None = None
) -> SweepReport:
    """One pass. `scope` limits it to some operations (the drill sweeps only its own)."""
    operations = Operation.objects.all() if scope is None else scope
    return SweepReport(
        interrupted=_interrupt_expired_leases(operations, batch_size=batch_size),
        requeued=_requeue_due(operations, batch_size=batch_size),
    )


def requeue_grace() -> timedelta:
    """How long a queued task may go unclaimed before it can be presumed lost.

    The ORM broker hands an unacknowledged task out again after `retry`; past
    that, a task that still has not claimed its operation is gone, provided the
    queue is not simply behind (see `_queue_is_drained`).
    """
    return timedelta(seconds=settings.Q_CLUSTER["retry"] + settings.ONEFOLD_SWEEP_SECONDS)


def _queue_is_drained() -> bool:
    """True when no task is waiting in the broker for a worker: only then is a late task
    presumed lost (under a backlog every task looks late, and copies grow the backlog)."""
    return bool(get_broker().queue_size() == 0)


def _interrupt_expired_leases(operations: QuerySet[Operation], *, batch_size: int) -> int:
    now = timezone.now()
    expired = list(
        operations.filter(status=Operation.Status.RUNNING, lease_expires_at__lt=now)
        .order_by("lease_expires_at")
        .values_list("pk", "claim_token")[:batch_size]
    )
    interrupted = 0
    for operation_id, token in expired:
        if token is None:
            continue  # a running row always holds a claim (operation_running_has_claim)
        operation = Operation.objects.select_related("event__source", "destination").get(
            pk=operation_id
        )
        attempt = Attempt.objects.filter(
            operation_id=operation_id, claim_token=token, outcome__isnull=True
        ).first()
        if attempt is None:
            continue  # the worker (or another sweeper) finished it meanwhile
        claim = Claim(
            operation=operation,
            attempt=ClaimedAttempt(attempt.pk, attempt.number),
            token=token,
        )
        result = AttemptResult(
            outcome=Attempt.Outcome.INTERRUPTED,
            error_class="LeaseExpired",
            message=f"the lease expired at {operation.lease_expires_at:%Y-%m-%d %H:%M:%S} UTC "
            "with no outcome recorded (worker died or hung)",
        )
        if operation_record_outcome(
            claim=claim, result=result, system=Attempt.Trigger.SWEEPER, learned=False
        ):
            interrupted += 1
    return interrupted


def _requeue_due(operations: QuerySet[Operation], *, batch_size: int) -> int:
    now = timezone.now()
    # Due and never queued for this due time: scheduled retries, replays.
    not_queued = Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=F("next_attempt_at"))
    with transaction.atomic():
        if _queue_is_drained():
            not_queued |= Q(enqueued_at__lt=now - requeue_grace())
        due = list(
            operations.select_for_update(skip_locked=True)
            .filter(status__in=Operation.CLAIMABLE, next_attempt_at__lte=now)
            .filter(not_queued)
            .order_by("next_attempt_at")
            .values_list("pk", flat=True)[:batch_size]
        )
        Operation.objects.filter(pk__in=due).update(enqueued_at=now)
        for operation_id in due:
            operation_enqueue(operation_id)
    return len(due)
