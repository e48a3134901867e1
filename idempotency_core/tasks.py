"""django-q2 entry points: the dotted paths queued tasks and schedules name."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.conf import settings

from idempotency_core.execution.engine import operation_execute_chain
from idempotency_core.execution.sweeper import operations_sweep
from idempotency_core.intake.ingest import SUSPECTED_DUPLICATE_SCREEN
from idempotency_core.reconciliation.cases import reconciliation_cases_settle
from idempotency_core.reconciliation.compare import reconcile_daily as _reconcile_daily
from idempotency_core.reconciliation.late_repeats import late_repeat_check as _late_repeat_check
from idempotency_core.reconciliation.retention import payloads_purge
from idempotency_core.review.notifications import case_notify as _case_notify
from idempotency_core.review.notifications import notices_digest_send, notifications_sweep


def operation_run(operation_id: int) -> str | None:
    # Before a pipeline's first attempt: ingest's suspected-duplicate search, moved out
    # of the answer's path (intake/ingest.py, suspected_duplicate_flag, says why it is
    # safe), and screened inside the first claim (SUSPECTED_DUPLICATE_SCREEN).
    # Onefold records every outcome on the operation and returns normally, so
    # the broker's own retry is only a backstop for a crashed worker. The steps
    # this one's success releases run in the same task, within its timeout.
    return operation_execute_chain(
        operation_id=operation_id,
        seconds=float(settings.Q_CLUSTER["timeout"]),
        screen=SUSPECTED_DUPLICATE_SCREEN,
    )


def sweep() -> dict[str, int]:
    settled = reconciliation_cases_settle()
    return {
        **asdict(operations_sweep()),
        **notifications_sweep(),
        "reconciliation_cases_settled": len(settled),
    }


def case_notify(case_id: int) -> int:
    """A case opened, escalated or handed on: route it once, send what is due for it."""
    return _case_notify(case_id=case_id)


def notices_digest(user_id: int) -> int:
    """One person's due digest."""
    return notices_digest_send(user_id=user_id)


def late_repeat_check(delivery_id: int) -> int | None:
    """A delivery for an expired key: look the destination up (late_repeats.py)."""
    case = _late_repeat_check(delivery_id=delivery_id)
    return case.pk if case is not None else None


def reconcile_daily() -> list[dict[str, Any]]:
    """Daily schedule: yesterday (UTC), once per CRM destination."""
    return _reconcile_daily()


def purge_payloads() -> dict[str, object]:
    """Daily schedule: erase payloads past their retention."""
    report = asdict(payloads_purge())
    report["cutoff"] = report["cutoff"].isoformat()
    return report
