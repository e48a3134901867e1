"""What reconciliation's findings do to the review queue: one open case per thing that
needs a person, and no reconciliation case left open once its cause is settled."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from idempotency_core.audit.cases import review_case_settle
from idempotency_core.audit.entries import case_audit
from idempotency_core.audit.subjects import event_pair_naming
from idempotency_core.models import Operation, ReconciliationFinding, ReconciliationRun, ReviewCase

SYSTEM = "reconciliation"
RECON_KINDS = (
    ReviewCase.Kind.RECON_MISSING,
    ReviewCase.Kind.RECON_DUPLICATE,
    ReviewCase.Kind.RECON_ORPHAN,
    ReviewCase.Kind.RECON_REMOVED,
    ReviewCase.Kind.RECON_CHANGED,
    ReviewCase.Kind.RECON_STUCK,
)
# Findings whose cause is the operation's own state: once the operation worked (with
# the record it made) or was cancelled by a decision, nothing is left to reconcile.
SETTLED_BY_THEIR_OPERATION = (ReviewCase.Kind.RECON_MISSING, ReviewCase.Kind.RECON_STUCK)
# How many earlier findings a case keeps beside the newest, so daily runs stay bounded.
FINDINGS_KEPT = 10


def case_in_review(finding: ReconciliationFinding) -> ReviewCase | None:
    """The open case that already asks a person about the finding's operation or event
    (a refused enquiry, a duplicate pair it is either of, an earlier finding), locked;
    None when none does. Call inside the transaction that records the finding."""
    about = Q()
    if finding.operation_id is not None:
        about |= Q(operation_id=finding.operation_id)
    if finding.event_id is not None:
        # A pair's case (a suspected or held duplicate) names its earlier event in its
        # subject only.
        about |= Q(event_id=finding.event_id) | event_pair_naming(finding.event_id)
    if not about:
        return None
    open_cases = ReviewCase.objects.select_for_update().filter(
        about, status__in=ReviewCase.OPEN_STATUSES
    )
    # The operation's own case before its event's others.
    ranked = sorted(open_cases, key=lambda c: (c.operation_id != finding.operation_id, c.pk))
    return ranked[0] if ranked else None


def finding_evidence_add(
    case: ReviewCase, finding: ReconciliationFinding, evidence: dict[str, Any]
) -> None:
    """The finding becomes evidence on the case already open, never a case of its own;
    audited. A finding seen again by a later run replaces its earlier entry."""
    entry = {"kind": finding.kind, **evidence}
    kept = [
        earlier
        for earlier in (case.evidence or {}).get("reconciliation", [])
        if (earlier.get("kind"), earlier.get("external_ref"))
        != (finding.kind, evidence.get("external_ref"))
    ]
    case.evidence = {**(case.evidence or {}), "reconciliation": [*kept[-FINDINGS_KEPT:], entry]}
    ReviewCase.objects.filter(pk=case.pk).update(evidence=case.evidence, updated_at=timezone.now())
    case_audit(
        case,
        action="reconciliation_evidence_added",
        system=SYSTEM,
        details={"finding": finding.kind, "reconciliation_run": evidence.get("reconciliation_run")},
    )


def reconciliation_cases_settle(run: ReconciliationRun | None = None) -> list[int]:
    """Resolves, audited with the reason, the open reconciliation cases whose cause is
    settled: their operation worked or was cancelled (missing, stuck); or, for a run,
    every case of its period and destination that the run did not find again (the
    record is back, the duplicate merged). Returns the resolved cases' ids."""
    ids = set(_settled_by_operation().values_list("pk", flat=True))
    if run is not None and not run.dry_run:
        ids |= set(_not_found_again(run).values_list("pk", flat=True))
    resolved = []
    settled = ReviewCase.objects.filter(pk__in=ids).select_related("operation", "event")
    for case in settled.order_by("pk"):
        why = _why_settled(case, run)
        with transaction.atomic():
            if review_case_settle(
                case,
                code="cause_settled",
                action="case_resolved",
                system=SYSTEM,
                reason=why,
                details={"reconciliation_run": run.pk if run else None},
            ):
                resolved.append(case.pk)
    return resolved


def _settled_by_operation() -> QuerySet[ReviewCase]:
    worked = Q(operation__status=Operation.Status.SUCCEEDED) & ~Q(operation__destination_ref="")
    return ReviewCase.objects.filter(
        Q(operation__status=Operation.Status.CANCELLED) | worked,
        kind__in=SETTLED_BY_THEIR_OPERATION,
        status__in=ReviewCase.OPEN_STATUSES,
    )


def _not_found_again(run: ReconciliationRun) -> QuerySet[ReviewCase]:
    in_period = ReviewCase.objects.filter(
        kind__in=RECON_KINDS,
        status__in=ReviewCase.OPEN_STATUSES,
        event__received_at__gte=run.since,
        event__received_at__lt=min(run.until, run.as_of),
        event__operations__step="create_enquiry",
        event__operations__destination_id=run.destination_id,
    )
    if run.source_id is not None:
        in_period = in_period.filter(event__source_id=run.source_id)
    found = ReconciliationFinding.objects.filter(run=run, case__isnull=False).values("case_id")
    return in_period.exclude(pk__in=found)


def _why_settled(case: ReviewCase, run: ReconciliationRun | None) -> str:
    operation = case.operation
    if operation is not None and operation.status == Operation.Status.CANCELLED:
        return "Settled: the step was cancelled by a decision on its submission."
    worked = operation is not None and operation.status == Operation.Status.SUCCEEDED
    if worked and operation is not None and case.kind in SETTLED_BY_THEIR_OPERATION:
        return f"Settled: the step worked since ({operation.destination_ref})."
    return f"Settled: reconciliation run {run.pk if run else ''} no longer finds it."
