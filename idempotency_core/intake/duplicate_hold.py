"""Suspected duplicates held before the write: a source's `duplicates` policy `hold`."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.subjects import event_pair_subject
from idempotency_core.execution.outcomes import operation_hold_later
from idempotency_core.models import Event, Operation, ReviewCase, Source

HELD_KIND = ReviewCase.Kind.DUPLICATE_HELD


def message_normalised(message: object) -> str:
    """The message as the duplicate match compares it: case and whitespace set aside."""
    return " ".join(str(message or "").split()).casefold()


def source_holds_duplicates(source_id: int) -> bool:
    return Source.objects.filter(pk=source_id, duplicates="hold").exists()


def duplicate_hold(*, earlier: Event, later: Event) -> ReviewCase | None:
    """Holds `later`'s steps and opens the case; the case of this pair if one was
    opened before (a second task, a crash and rerun). None when `later`'s first
    step was already tried: it may be in the CRM, so the caller flags the pair."""
    now = timezone.now()
    subject = event_pair_subject(earlier.pk, later.pk)
    with transaction.atomic():
        # The two events' tasks may find the pair at once: one holds, one reads its case.
        Event.objects.select_for_update().filter(pk=later.pk).values_list("pk").first()
        existing = ReviewCase.objects.filter(subject=subject, kind=HELD_KIND).first()
        if existing is not None:
            return existing
        held_first = Operation.objects.filter(
            event_id=later.pk, position=0, attempt_count=0, status__in=Operation.CLAIMABLE
        ).update(
            status=Operation.Status.NEEDS_REVIEW,
            next_attempt_at=None,
            enqueued_at=None,
            last_error="Held: a suspected duplicate of an earlier submission; a reviewer decides.",
            updated_at=now,
        )
        if not held_first:
            return None
        first = Operation.objects.get(event_id=later.pk, position=0)
        held = [(first.pk, first.step), *operation_hold_later(first, now=now)]
        case, _ = review_case_open(
            kind=HELD_KIND,
            subject=subject,
            summary=_summary(earlier, later, [step for _, step in held]),
            event=later,
            operation=first,
            evidence={
                "event_ids": [str(earlier.pk), str(later.pk)],
                "held_operations": [{"id": pk, "step": step} for pk, step in held],
            },
            system="ingest",
        )
    return case


def _summary(earlier: Event, later: Event, steps: list[str]) -> str:
    window = timedelta(seconds=settings.ONEFOLD_DUPLICATE_WINDOW_SECONDS)
    return (
        f"The same contact sent the same {later.form or 'form'} message twice within "
        f"{window.total_seconds() / 60:.0f} minutes under different keys ({earlier.key!r}, "
        f"{later.key!r}). The source holds suspected duplicates: the second submission "
        f"was not written to the CRM ({', '.join(steps)} wait). A reviewer decides: "
        "'Same enquiry' links it to the first submission and writes nothing; "
        "'Separate enquiry' lets it run as usual."
    )
