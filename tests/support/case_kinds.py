"""One open case of each kind, each made the way production makes it where a test can
(the engine against the sandbox, a source's `hold` policy, a confirmation limit, a
delivery its map cannot read), else opened through `review_case_open` over a step
left waiting for a person, as the engine and reconciliation open them.

Shared by the browser tests that settle each kind as a plain Reviewer.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.subjects import operation_subject
from idempotency_core.execution.engine import operation_execute
from idempotency_core.execution.outcomes import operation_hold_later
from idempotency_core.intake.sources import source_duplicates_set
from idempotency_core.models import ConfirmationAllowance, Operation, ReviewCase, Source
from idempotency_core.tasks import operation_run
from tests.factories import duplicate_case, ingest, op, permanent_case
from tests.support.console_pages import interrupted_email, unreadable_delivery


def waiting_case(kind: str, key: str, evidence: dict, *, summary: str = "") -> ReviewCase:
    """A case of `kind` over a create waiting for a person (the engine's state for it)."""
    event = ingest(key, contact_from_key=True, message=f"Please call back ({key}).")
    operation = op(event, "create_enquiry")
    Operation.objects.filter(pk=operation.pk).update(status=Operation.Status.NEEDS_REVIEW)
    held = operation_hold_later(operation, now=timezone.now())
    case, _ = review_case_open(
        kind=kind,
        subject=operation_subject(operation.pk),
        summary=summary or f"create_enquiry: {kind}.",
        operation=operation,
        evidence={**evidence, "held_operations": [{"id": i, "step": s} for i, s in held]},
        system="test",
    )
    return case


def gave_up(key: str) -> ReviewCase:
    """A step whose automatic tries were spent on answers that prove nothing was made."""
    return waiting_case(
        ReviewCase.Kind.RETRIES_EXHAUSTED,
        key,
        {"http_status": 503},
        summary="create_enquiry: 5 tries, each HTTP 503.",
    )


def held_confirmation(settings, key: str = "fin-held") -> ReviewCase:
    """The second confirmation to one address in a day, held by a limit of one; then a
    day passes, so it is under the limit again."""
    settings.ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY = 1
    for n in range(2):
        event = ingest(
            f"{key}-{n}",
            contact={"name": "Grace", "email": "grace@example.com"},
            message=f"Enquiry {n}.",
        )
        for operation in event.operations.order_by("position"):
            operation_execute(operation_id=operation.pk)
    ConfirmationAllowance.objects.update(granted_at=timezone.now() - timedelta(hours=25))
    return ReviewCase.objects.get(kind="confirmation_held")


def held_duplicate(key: str) -> ReviewCase:
    """The same person and message twice under the `hold` policy: the second held."""
    source = Source.objects.get_or_create(name="website")[0]
    source_duplicates_set(source=source, policy="hold")
    contact = {"name": "Hedy Lamarr", "email": "hedy@example.com"}
    first = ingest(f"{key}-a", contact=contact, message="Two quotes, please.")
    assert operation_run(op(first, "create_enquiry").pk) == "succeeded"
    second = ingest(f"{key}-b", contact=contact, message="two  quotes, please.")
    operation_run(op(second, "create_enquiry").pk)
    source_duplicates_set(source=source, policy="flag")
    return ReviewCase.objects.get(kind="duplicate_held", event=second)


# The reconciliation's findings, as it writes their evidence.
RECON = {
    ReviewCase.Kind.RECON_MISSING: {"destination_ref": "rec_000041"},
    ReviewCase.Kind.RECON_DUPLICATE: {"record_ids": ["rec_000042", "rec_000043"]},
    ReviewCase.Kind.RECON_ORPHAN: {"destination_ref": "rec_000044"},
    ReviewCase.Kind.RECON_REMOVED: {"destination_ref": "rec_000045"},
    ReviewCase.Kind.RECON_CHANGED: {"destination_ref": "rec_000046"},
    ReviewCase.Kind.RECON_STUCK: {"minutes_waiting": 240},
}


def one_of_each_kind(sandbox, ambiguous_case, settings) -> dict[str, ReviewCase]:
    """An open case of every ReviewCase kind, none sharing a cause with another."""
    cases = {
        "ambiguous_outcome": ambiguous_case("kind-amb", mode="drop_response_after_commit"),
        "interrupted_send": interrupted_email(sandbox, "kind-mail"),
        "permanent_failure": permanent_case("kind-refused"),
        "retries_exhausted": gave_up("kind-gave-up"),
        "suspected_duplicate": duplicate_case(sandbox, key_a="kind-dup-a", key_b="kind-dup-b"),
        "duplicate_held": held_duplicate("kind-held"),
        "duplicate_rule": waiting_case(
            ReviewCase.Kind.DUPLICATE_RULE,
            "kind-rule",
            {"matched_records": ["rec_000040"], "create_anyway": False},
        ),
        "late_replay": waiting_case(ReviewCase.Kind.LATE_REPLAY, "kind-late", {}),
        "confirmation_held": held_confirmation(settings, "kind-conf"),
        "unreadable_submission": unreadable_delivery(),
    }
    for kind, evidence in RECON.items():
        cases[kind] = waiting_case(kind, f"kind-{kind.replace('_', '-')}", evidence)
    assert set(cases) == {kind.value for kind in ReviewCase.Kind}, set(cases)
    return cases
