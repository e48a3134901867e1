"""Ingest: one logical submission becomes one event, its operations and a delivery."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.subjects import event_pair_subject, event_subject
from idempotency_core.config_cache import config_cached
from idempotency_core.execution.destinations import destination_for
from idempotency_core.execution.engine import Screen
from idempotency_core.execution.steps import EDIT_PIPELINE, STEPS, pipeline_for
from idempotency_core.intake.duplicate_hold import (
    duplicate_hold,
    message_normalised,
    source_holds_duplicates,
)
from idempotency_core.intake.ingest_statement import rows_insert
from idempotency_core.keys import contact_digest, key_expired, operation_key, payload_fingerprint
from idempotency_core.models import Delivery, Event, Operation, ReviewCase, Source
from idempotency_core.sql import instance_new, prepared_cursor

LATE_REPEAT_TASK = "idempotency_core.tasks.late_repeat_check"


class KeyReusedError(Exception):
    """The key names an event whose payload differs from this one."""

    def __init__(self, event: Event) -> None:
        super().__init__(f"idempotency key reused with a different payload (event {event.pk})")
        self.event = event


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
    # A repeat's operations' statuses, read with its event (for the answer's status).
    statuses: list[str] = field(default_factory=list)


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
    destinations = _destination_ids(source)
    revises = _revised_candidate(source=source, payload=payload)
    event = _new_event(source, key, payload, submitted_at=submitted_at, revises=revises)
    refused = _revision_refused(event, payload)
    if refused is None:
        operations, delivery = _event_rows(event, destinations=destinations, raw=raw)
        if rows_insert(event=event, operations=operations, delivery=delivery):
            return IngestResult(event=event, created=True)
    elif not Event.objects.filter(source=source, key=key).exists():
        # An edit that cannot revise what it names is refused, recording nothing, only
        # under a new key: a known key is a repeat, answered from its event whatever
        # this payload says (`_repeat_delivery`), as for any repeat.
        raise InvalidRevisionError(refused)
    # Autocommit: the statement that created nothing waited for a racing winner's
    # commit, so this read finds the event.
    return _repeat_answered(event, raw=raw)


def _new_event(
    source: Source,
    key: str,
    payload: dict[str, Any],
    *,
    submitted_at: datetime | None,
    revises: Event | None = None,
) -> Event:
    """The event a delivery makes, not yet inserted."""
    contact = payload.get("contact") or {}
    event = instance_new(
        Event,
        {
            "source_id": source.pk,
            "key": key,
            "fingerprint": payload_fingerprint(payload),
            "payload": payload,
            "form": str(payload.get("form", ""))[:100],
            "contact_digest": contact_digest(str(contact.get("email", ""))),
            "submitted_at": submitted_at,
            "revises_id": revises.pk if revises else None,
        },
    )
    # The instances in hand, as the keyword constructor would have kept them.
    event.source = source
    if revises is not None:
        event.revises = revises
    return event


def _repeat_answered(event: Event, *, raw: RawDelivery | None) -> IngestResult:
    """The answer to a delivery whose key the source already used: its event, or
    KeyReusedError when that event was made from another payload."""
    result, matched = _repeat_delivery(
        source=event.source,
        key=event.key,
        fingerprint=event.fingerprint,
        raw=raw,
        sender_digest=event.contact_digest,
    )
    if not matched:
        raise KeyReusedError(result.event)
    return result


@dataclass(frozen=True)
class Unreadable:
    """Why a verified delivery maps to no submission, as its case shows it: what could
    not be read (field names and rules, never a value) and the map that read it."""

    missing: list[str]
    profile: str
    field_map: dict[str, Any]


def event_ingest_unreadable(
    *,
    source: Source,
    key: str,
    payload: dict[str, Any],
    raw: RawDelivery,
    unreadable: Unreadable,
    submitted_at: datetime | None = None,
    status_code: int = 202,
) -> IngestResult:
    """Keeps a verified delivery that maps to no valid submission (docs/senders.md,
    "Unreadable deliveries"), or answers its repeat.

    New: its event (no operation), its delivery and an `unreadable_submission` case, in
    one transaction; a corrected map (`remap.events_remap`) later gives it operations."""
    event = _new_event(source, key, payload, submitted_at=submitted_at)
    with transaction.atomic():
        Event.objects.bulk_create([event], ignore_conflicts=True)
        # Visible here only if this transaction inserted it: a racing winner's row is
        # another id.
        created = Event.objects.filter(pk=event.pk).exists()
        if created:
            event._state.adding = False
            Delivery.objects.create(
                source=source,
                event=event,
                outcome=Delivery.Outcome.UNREADABLE,
                status_code=status_code,
                fingerprint=event.fingerprint,
                payload_matched=True,
                **raw.as_fields(),
            )
            _unreadable_case_open(event, unreadable)
    if created:
        return IngestResult(event=event, created=True)
    return _repeat_answered(event, raw=raw)


def _unreadable_case_open(event: Event, unreadable: Unreadable) -> ReviewCase:
    missing = "; ".join(unreadable.missing) or "no valid submission"
    case, _ = review_case_open(
        kind=ReviewCase.Kind.UNREADABLE,
        subject=event_subject(event.pk),
        summary=(
            f"A delivery to {event.source.name} passed its signature or token, but its "
            f"field map found no valid submission in it ({missing}). It is kept with its "
            "raw body under its key; nothing was sent to the CRM and no email went out. "
            "Correct the source's field map (the field-map editor on the source's page, or "
            "its profile_overrides) and apply it: the submission then runs like any other, "
            "under its original key. Close the case if it is spam or a test."
        ),
        event=event,
        evidence={
            "missing": unreadable.missing,
            "profile": unreadable.profile,
            "field_map": unreadable.field_map,
        },
        system="ingest",
    )
    return case


def _destination_ids(source: Source) -> dict[str, int]:
    """The destination of each role for this source, by id (all an operation row needs),
    from the per-process cache: a source's or a destination's change empties it."""
    return config_cached(
        ("destinations", source.pk, source.crm_id, source.mailer_id),
        lambda: {role: destination_for(source, role).pk for role in ("crm", "email")},
    )


def _revised_candidate(*, source: Source, payload: dict[str, Any]) -> Event | None:
    """The earlier event an edit names (one read, for edits only), checked by
    `_revision_refused`."""
    revises = payload.get("revises")
    if not revises:
        return None
    return Event.objects.filter(source=source, key=revises).first()


def _revision_refused(event: Event, payload: dict[str, Any]) -> str | None:
    """Why an edit cannot revise what it names, or None (not an edit, or a valid one).
    An edit revises an earlier event (docs/senders.md, "Repeats, edits and
    duplicates"): same source, same contact, and not the submission itself."""
    revises = payload.get("revises")
    if not revises:
        return None
    if revises == event.key:
        return "A submission cannot revise itself."
    if event.revises is None:
        return f"No earlier submission {revises!r} from this source."
    if event.revises.contact_digest != event.contact_digest:
        return "An edit must come from the contact of the submission it revises."
    return None


def _event_rows(
    event: Event, *, destinations: dict[str, int], raw: RawDelivery | None
) -> tuple[list[dict[str, object]], dict[str, object]]:
    """The new event's operations, first step due now, and its delivery, as their
    columns' values (`rows_insert` gives every other column its default)."""
    operations = _operation_values(event, destinations=destinations, now=timezone.now())
    delivery: dict[str, object] = {
        "source_id": event.source_id,
        "event_id": event.pk,
        "outcome": Delivery.Outcome.ACCEPTED,
        # A hook answers its first delivery 200 (senders count only 200 as success).
        "status_code": 202 if raw is None else 200,
        "fingerprint": event.fingerprint,
        "payload_matched": True,
        **(raw.as_fields() if raw else {}),
    }
    return operations, delivery


def _operation_values(
    event: Event, *, destinations: dict[str, int], now: datetime
) -> list[dict[str, object]]:
    """The event's pipeline as its operations' values, the first step due `now`."""
    source = event.source
    pipeline = EDIT_PIPELINE if event.revises_id else pipeline_for(source, event.form)
    return [
        {
            "event_id": event.pk,
            "step": step,
            "position": position,
            "destination_id": destinations[STEPS[step].destination],
            "key": operation_key(source_salt=source.key_salt, event_key=event.key, step=step),
            # Only the first step is due now; each later one is released by the success
            # of the one before it.
            "next_attempt_at": now if position == 0 else None,
            "enqueued_at": now if position == 0 else None,
        }
        for position, step in enumerate(pipeline)
    ]


def event_operations_create(*, event: Event, now: datetime) -> list[Operation]:
    """Gives an event kept without operations (an unreadable submission, now read by a
    corrected map) its pipeline, as a new submission's would be: keys derived from its
    original key, the first step due. Call inside the transaction that locks the event
    and settles its case; queuing the first step (on that same transaction) is the
    caller's. The unique constraint on (event, step) refuses a second pipeline."""
    destinations = _destination_ids(event.source)
    return Operation.objects.bulk_create(
        [
            instance_new(Operation, values)
            for values in _operation_values(event, destinations=destinations, now=now)
        ]
    )


def _repeat_delivery(
    *,
    source: Source,
    key: str,
    fingerprint: str,
    raw: RawDelivery | None = None,
    sender_digest: str = "",
) -> tuple[IngestResult, bool]:
    """Records a repeat, answered from the stored event; True when its payload matched.
    For an expired key, a worker then checks the destination (late_repeats.py): nothing
    is called here. Runs after the statement that created nothing (or the read that
    found the key of a refused edit): the event is committed, so this read finds it."""
    operations = list(
        Operation.objects.filter(event__source=source, event__key=key)
        .select_related("event")
        .order_by("position")
    )
    event = operations[0].event if operations else Event.objects.get(source=source, key=key)
    matched = event.fingerprint == fingerprint or (
        raw is not None and _same_delivery(event, kept_unreadable=not operations, raw=raw)
    )
    delivery = Delivery.objects.create(
        source_id=event.source_id,
        event=event,
        outcome=Delivery.Outcome.REPLAYED if matched else Delivery.Outcome.KEY_REUSED,
        status_code=200 if matched else 422,
        fingerprint=fingerprint,
        payload_matched=matched,
        # A refused delivery is another sender's: whose, for their export and erasure.
        sender_digest="" if matched else sender_digest,
        # Once the event's payload is purged, its repeats keep nothing either.
        **(raw.as_fields() if raw and event.payload is not None else {}),
    )
    if key_expired(event.received_at):
        async_task(LATE_REPEAT_TASK, delivery.pk, task_name=f"late-repeat-{delivery.pk}")
    statuses = [operation.status for operation in operations]
    return IngestResult(event=event, created=False, statuses=statuses), matched


def _same_delivery(event: Event, *, kept_unreadable: bool, raw: RawDelivery) -> bool:
    """A hook's repeat whose mapped content differs from its event's because the field
    map changed between them, not the delivery: the event was kept unreadable (what a
    broken map made of it is no content to compare), or its first delivery is this
    one byte for byte. Either way it is the same submission, never a reused key."""
    if kept_unreadable:
        return True
    first = first_kept_body(event)
    return first is not None and first == raw.body


def first_kept_body(event: Event) -> bytes | None:
    """The raw body of the event's first kept delivery (None: not a hook's, or purged)."""
    body = (
        event.deliveries.filter(raw_body__isnull=False)
        .order_by("received_at", "pk")
        .values_list("raw_body", flat=True)
        .first()
    )
    return None if body is None else bytes(body)


def suspected_duplicate_flag(*, operation_id: int) -> ReviewCase | None:
    """Opens a case when the same person sent the same message again under a new key.

    Both events are kept and processed; a person decides about merging (under `hold`,
    duplicate_hold.py, the later one waits). Run by the first step's task, not by ingest:
    it cannot be lost (queued with the event, swept if missing), and it sees committed
    events on both sides, so racing pairs are flagged too, in one case.
    """
    event = _first_event_with_twin(operation_id)
    if event is None:
        return None
    earlier, later = _duplicate_pair(event)
    if earlier is None or later is None:
        return None
    if source_holds_duplicates(event.source_id):  # the `hold` policy: duplicate_hold.py
        held = duplicate_hold(earlier=earlier, later=later)
        if held is not None:
            return held
    window = timedelta(seconds=settings.ONEFOLD_DUPLICATE_WINDOW_SECONDS)
    case, _ = review_case_open(
        kind=ReviewCase.Kind.SUSPECTED_DUPLICATE,
        subject=event_pair_subject(earlier.pk, later.pk),
        summary=(
            f"The same contact sent the same {later.form or 'form'} message twice within "
            f"{window.total_seconds() / 60:.0f} minutes under different keys ({earlier.key!r}, "
            f"{later.key!r}). Both were processed. A reviewer should compare the two CRM "
            "records and merge them if they are one enquiry, or resolve as not a duplicate."
        ),
        event=later,
        evidence={"event_ids": [str(earlier.pk), str(later.pk)]},
        system="ingest",
    )
    return case


# The submissions near event e: its contact's to its form within the window on either
# side, edits aside. A twin is one of them with e's message too, compared in Python
# (`_duplicate_pair`): the same contact's submissions to one form within the window are
# few. Written once, for the claim's screen and for both reads below.
_NEAR = """idempotency_core_event t
    WHERE t.source_id = e.source_id AND t.contact_digest = e.contact_digest
      AND t.form = e.form AND t.revises_id IS NULL AND t.id <> e.id
      AND t.received_at >= e.received_at - %s::interval
      AND t.received_at <= e.received_at + %s::interval"""
# Event e (of first operation o, before its first attempt) has a submission near it.
_TWIN_NEAR = f"EXISTS (SELECT FROM {_NEAR})"
_FIRST_ATTEMPT = """o.id = %s AND o.position = 0 AND o.attempt_count = 0
  AND e.revises_id IS NULL AND e.contact_digest <> ''"""
_OPERATION_EVENT = "idempotency_core_operation o JOIN idempotency_core_event e ON e.id = o.event_id"
_TWIN_NEAR_SQL = f"SELECT e.id, {_TWIN_NEAR} FROM {_OPERATION_EVENT} WHERE {_FIRST_ATTEMPT}"
# The submissions near event e (by id): the earlier ones (received at the same moment
# included) from the nearest, then the later ones from the nearest.
_NEARBY_SQL = f"""SELECT t.* FROM idempotency_core_event e, {_NEAR} AND e.id = %s
    ORDER BY t.received_at > e.received_at,
      abs(extract(epoch FROM t.received_at - e.received_at)), t.id"""


def _window_twice() -> list[object]:
    window = timedelta(seconds=settings.ONEFOLD_DUPLICATE_WINDOW_SECONDS)
    return [window, window]


# The first claim of a pipeline waits for `suspected_duplicate_flag` only where the
# search would find something; the usual case, no twin, is decided inside the claim's
# own statement (engine.Screen), which the answer never waits for either.
SUSPECTED_DUPLICATE_SCREEN = Screen(
    sql=f"EXISTS (SELECT FROM {_OPERATION_EVENT} WHERE {_TWIN_NEAR} AND {_FIRST_ATTEMPT})",
    params=_window_twice,
    check=lambda operation_id: suspected_duplicate_flag(operation_id=operation_id),
)


def _first_event_with_twin(operation_id: int) -> Event | None:
    """The event whose first step is `operation_id`, before that step's first attempt,
    if any submission of the same contact to the same form lies within the window on
    either side: one prepared read, which is all the usual case costs (the messages are
    compared by `_duplicate_pair` only when such a submission exists)."""
    with prepared_cursor() as cursor:
        cursor.execute(_TWIN_NEAR_SQL, [*_window_twice(), operation_id])
        row = cursor.fetchone()
    if row is None or not row[1]:
        return None
    return Event.objects.get(pk=row[0])


def _duplicate_pair(event: Event) -> tuple[Event | None, Event | None]:
    """The event and its nearest earlier twin within the window, else its nearest later
    one (found when this task runs after the later event committed), in time order."""
    # The message matches with case and whitespace set aside.
    message = message_normalised((event.payload or {}).get("message", ""))
    nearby = Event.objects.raw(_NEARBY_SQL, [*_window_twice(), event.pk])
    twin = next(
        (t for t in nearby if message_normalised((t.payload or {}).get("message")) == message),
        None,
    )
    if twin is None:
        return None, None
    return (twin, event) if twin.received_at <= event.received_at else (event, twin)


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
