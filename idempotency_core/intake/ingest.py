"""Ingest: one logical submission becomes one event, its operations and a delivery.

Flow 1 of DESIGN.md. The unique constraint on (source, key) is the guarantee;
reading first is only a fast path for repeats. Concurrent first receipts race on
the INSERT: one wins, the others fall back to reading the winner's event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.subjects import event_pair_subject
from idempotency_core.execution.destinations import destination_for
from idempotency_core.execution.engine import operation_enqueue
from idempotency_core.execution.steps import EDIT_PIPELINE, STEPS, pipeline_for
from idempotency_core.keys import contact_digest, key_expired, operation_key, payload_fingerprint
from idempotency_core.models import Delivery, Event, Operation, ReviewCase, Source

LATE_REPEAT_TASK = "idempotency_core.tasks.late_repeat_check"


class KeyReusedError(Exception):
    """The key names an event whose payload differs from this one."""

    def __init__(self, event: Event) -> None:
        super().__init__(f"idempotency key reused with a different payload (event {event.pk})")
        self.event = event


class _EventExistsError(Exception):
    """The (source, key) was inserted by a concurrent delivery first."""


class InvalidRevisionError(Exception):
    """`revises` names no earlier submission of this contact at this source."""


@dataclass(frozen=True)
class RawDelivery:
    """A hook's delivery as received, kept on its delivery row (see `remap`)."""

    body: bytes
    content_type: str
    verification: str

    def as_fields(self) -> dict[str, Any]:
        return {
            "raw_body": self.body,
            "content_type": self.content_type[:200],
            "verification": self.verification[:200],
        }


@dataclass(frozen=True)
class IngestResult:
    event: Event
    created: bool


def event_ingest(
    *,
    source: Source,
    key: str,
    payload: dict[str, Any],
    submitted_at: datetime | None = None,
    raw: RawDelivery | None = None,
) -> IngestResult:
    """Records a delivery and returns its event, creating it (and its operations) once.

    Raises KeyReusedError, after recording the refused delivery, when the key is
    known with another payload fingerprint, and InvalidRevisionError (nothing
    recorded) when a new submission `revises` something it cannot.
    """
    fingerprint = payload_fingerprint(payload)
    existing = Event.objects.filter(source=source, key=key).first()
    if existing is None:
        revised = _revised_event(source=source, key=key, payload=payload)
        try:
            return IngestResult(
                event=_event_create(
                    source=source,
                    key=key,
                    payload=payload,
                    fingerprint=fingerprint,
                    submitted_at=submitted_at,
                    revises=revised,
                    raw=raw,
                ),
                created=True,
            )
        except _EventExistsError:
            # Another request inserted the same (source, key) first and committed.
            existing = Event.objects.get(source=source, key=key)
    return _repeat_delivery(event=existing, fingerprint=fingerprint, raw=raw)


def _revised_event(*, source: Source, key: str, payload: dict[str, Any]) -> Event | None:
    """The earlier event an edit revises (DESIGN.md, "Edits"), checked before anything
    is stored: same source, same contact, and not the submission itself."""
    revises = payload.get("revises")
    if not revises:
        return None
    if revises == key:
        raise InvalidRevisionError("A submission cannot revise itself.")
    original = Event.objects.filter(source=source, key=revises).first()
    if original is None:
        raise InvalidRevisionError(f"No earlier submission {revises!r} from this source.")
    email = str((payload.get("contact") or {}).get("email", ""))
    if original.contact_digest != contact_digest(email):
        raise InvalidRevisionError(
            "An edit must come from the contact of the submission it revises."
        )
    return original


def _event_create(
    *,
    source: Source,
    key: str,
    payload: dict[str, Any],
    fingerprint: str,
    submitted_at: datetime | None,
    revises: Event | None = None,
    raw: RawDelivery | None = None,
) -> Event:
    destinations = {role: destination_for(source, role) for role in ("crm", "email")}
    now = timezone.now()
    with transaction.atomic():
        event = Event(
            source=source,
            key=key,
            fingerprint=fingerprint,
            payload=payload,
            form=str(payload.get("form", ""))[:100],
            contact_digest=contact_digest(str((payload.get("contact") or {}).get("email", ""))),
            submitted_at=submitted_at,
            revises=revises,
        )
        # INSERT ... ON CONFLICT DO NOTHING: the unique constraint still decides between
        # racing first deliveries, but the loser's statement never fails, so the
        # database never logs a failed INSERT with the contact's details in it.
        Event.objects.bulk_create([event], ignore_conflicts=True)
        if not Event.objects.filter(pk=event.pk).exists():
            raise _EventExistsError
        pipeline = EDIT_PIPELINE if revises else pipeline_for(source, event.form)
        operations = Operation.objects.bulk_create(
            Operation(
                event=event,
                step=step,
                position=position,
                destination=destinations[STEPS[step].destination],
                key=operation_key(source_salt=source.key_salt, event_key=key, step=step),
                # Only the first step is due now; each later one is released by
                # the success of the one before it.
                next_attempt_at=now if position == 0 else None,
                enqueued_at=now if position == 0 else None,
            )
            for position, step in enumerate(pipeline)
        )
        Delivery.objects.create(
            source=source,
            event=event,
            outcome=Delivery.Outcome.ACCEPTED,
            # A hook answers its first delivery 200 (senders count only 200 as success).
            status_code=202 if raw is None else 200,
            fingerprint=fingerprint,
            payload_matched=True,
            **(raw.as_fields() if raw else {}),
        )
        # Same transaction as the rows (ORM broker): no event without its task.
        operation_enqueue(operations[0].pk)
        if revises is None:
            _flag_suspected_duplicate(event, now=now)
    return event


def _flag_suspected_duplicate(event: Event, *, now: datetime) -> None:
    """Opens a case when the same person sent the same message again under a new key.

    Both events are kept and processed (two genuine submissions must both
    count); a person decides whether to merge the records (never automatic).
    """
    payload = event.payload or {}
    if not event.contact_digest:
        return
    window = timedelta(seconds=settings.ONEFOLD_DUPLICATE_WINDOW_SECONDS)
    earlier = (
        Event.objects.filter(
            source_id=event.source_id,
            contact_digest=event.contact_digest,
            form=event.form,
            received_at__gte=now - window,
            payload__message=payload.get("message", ""),
        )
        .exclude(pk=event.pk)
        .order_by("-received_at")
        .first()
    )
    if earlier is None:
        return
    review_case_open(
        kind=ReviewCase.Kind.SUSPECTED_DUPLICATE,
        subject=event_pair_subject(earlier.pk, event.pk),
        summary=(
            f"The same contact sent the same {event.form or 'form'} message twice within "
            f"{window.total_seconds() / 60:.0f} minutes under different keys ({earlier.key!r}, "
            f"{event.key!r}). Both were processed. A reviewer should compare the two CRM "
            "records and merge them if they are one enquiry, or resolve as not a duplicate."
        ),
        event=event,
        evidence={"event_ids": [str(earlier.pk), str(event.pk)]},
        system="ingest",
    )


def _repeat_delivery(
    *, event: Event, fingerprint: str, raw: RawDelivery | None = None
) -> IngestResult:
    """Records a repeat, answered from the stored event. For an expired key, a
    worker then checks the destination (late_repeats.py): nothing is called here."""
    matched = event.fingerprint == fingerprint
    with transaction.atomic():
        delivery = Delivery.objects.create(
            source_id=event.source_id,
            event=event,
            outcome=Delivery.Outcome.REPLAYED if matched else Delivery.Outcome.KEY_REUSED,
            status_code=200 if matched else 422,
            fingerprint=fingerprint,
            payload_matched=matched,
            # Once the event's payload is purged, its repeats keep nothing either.
            **(raw.as_fields() if raw and event.payload is not None else {}),
        )
        if key_expired(event.received_at):
            async_task(LATE_REPEAT_TASK, delivery.pk, task_name=f"late-repeat-{delivery.pk}")
    if not matched:
        raise KeyReusedError(event)
    return IngestResult(event=event, created=False)


def delivery_refused(
    *, source: Source, outcome: str, status_code: int, detail: str = ""
) -> Delivery:
    """Counts a refused request without keeping anything of its content. `detail` says
    why in Onefold's words (a hook's verification outcome), never the sender's."""
    return Delivery.objects.create(
        source=source, outcome=outcome, status_code=status_code, verification=detail[:200]
    )


def event_status(statuses: list[str]) -> str:
    """`completed` when every operation is done, `needs_review` when any needs it."""
    if any(s == Operation.Status.NEEDS_REVIEW for s in statuses):
        return "needs_review"
    if statuses and all(s in Operation.DONE for s in statuses):
        return "completed"
    return "processing"
