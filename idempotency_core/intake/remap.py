"""Re-running a source's field map over the deliveries it kept (`manage.py remap`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from idempotency_core.audit.cases import review_case_settle
from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.engine import operation_enqueue
from idempotency_core.intake.hooks import (
    FINGERPRINT_PREFIX,
    event_kept_from,
    mapped_key_before_020,
    missing_lines,
    submission_from,
)
from idempotency_core.intake.ingest import event_operations_create, first_kept_body
from idempotency_core.intake.senders.parsing import MalformedDeliveryError, parse_body
from idempotency_core.intake.senders.profiles import Profile, profile_resolve
from idempotency_core.keys import contact_digest, operation_key, payload_fingerprint
from idempotency_core.models import Event, Operation, ReviewCase, Source

REMAP_STEP = "remap_enquiry"
# After every pipeline step, like merges: releasing "the next step" never picks it.
REMAP_POSITION = 90


@dataclass(frozen=True)
class RemapChange:
    event_id: str
    key: str
    # Names of what changed ("contact.email", "message", ...): never the values.
    changed: tuple[str, ...]
    # The CRM record is updated by this operation (None: nothing in the CRM yet).
    update_operation_id: int | None = None
    error: str = ""
    # An unreadable submission the map now reads: given its pipeline, first step queued
    # (with dry_run: would be).
    admitted: bool = False
    # ...or settled as a repeat of this event, made from the same delivery.
    repeat_of: str = ""


def unreadable_waiting() -> Exists:
    """True for an event that waits, unreadable, for a corrected map (its
    `unreadable_submission` case open), as an expression over the event's row."""
    return Exists(
        ReviewCase.objects.filter(
            event=OuterRef("pk"),
            kind=ReviewCase.Kind.UNREADABLE,
            status__in=ReviewCase.OPEN_STATUSES,
        )
    )


def events_remap(
    *,
    source: Source,
    since: datetime | None,
    dry_run: bool,
    progress: Callable[[int], None] | None = None,
    unreadable_only: bool = False,
    actor: User | None = None,
    reason: str = "",
) -> Iterator[RemapChange]:
    """Yields one change per event whose mapping differs (or cannot be re-run), from
    `since` (None: every kept delivery), or only the unreadable ones waiting. `actor` is
    the person who applied it, and `reason` theirs, for the audit."""
    profile = profile_resolve(source.profile, source.profile_overrides)
    events = (
        Event.objects.filter(source=source, payload__isnull=False)
        .annotate(
            waiting=unreadable_waiting(),
            has_operations=Exists(Operation.objects.filter(event=OuterRef("pk"))),
        )
        .order_by("received_at", "pk")
    )
    if since is not None:
        events = events.filter(received_at__gte=since)
    if unreadable_only:
        events = events.filter(waiting=True)
    for number, event in enumerate(events.iterator(chunk_size=500), 1):
        if progress is not None:
            progress(number)
        if not getattr(event, "has_operations", True) and not getattr(event, "waiting", False):
            continue  # unreadable, and a person closed its case: theirs to decide
        change = _event_remap(event, profile, dry_run=dry_run, actor=actor, reason=reason)
        if change is not None:
            yield change


def _event_remap(
    event: Event, profile: Profile, *, dry_run: bool, actor: User | None, reason: str
) -> RemapChange | None:
    document = kept_document(event, profile)
    if isinstance(document, str):
        return RemapChange(str(event.pk), event.key, (), error=document) if document else None
    _, payload, errors = submission_from(event.source, profile, document, {})
    waiting = bool(getattr(event, "waiting", False))
    if errors:
        what = "still unreadable" if waiting else "invalid"
        return RemapChange(
            str(event.pk), event.key, (), error=f"{what}: {'; '.join(missing_lines(errors))}"
        )
    changed = _changed(event.payload or {}, payload)
    if waiting:
        twin = delivery_twin(event, profile, document, payload)
        if twin is not None:
            settled = dry_run or _settle_as_repeat(event, twin, actor=actor, reason=reason)
            return (
                RemapChange(str(event.pk), event.key, (), repeat_of=str(twin.pk))
                if settled
                else None
            )
        admitted = dry_run or _admit(event, payload, changed, actor=actor, reason=reason)
        return (
            RemapChange(str(event.pk), event.key, changed, admitted=admitted) if admitted else None
        )
    if not changed:
        return None
    operation_id = None if dry_run else _apply(event, payload, changed, actor=actor, reason=reason)
    return RemapChange(str(event.pk), event.key, changed, update_operation_id=operation_id)


def kept_document(event: Event, profile: Profile) -> dict[str, object] | str:
    """The event's first kept delivery read with `profile`; else why not ("" when
    nothing was kept: not a hook delivery, or purged)."""
    delivery = event.deliveries.filter(raw_body__isnull=False).order_by("received_at", "pk").first()
    if delivery is None or delivery.raw_body is None:
        return ""
    try:
        return parse_body(
            bytes(delivery.raw_body),
            content_type=delivery.content_type,
            parser=profile.parser,
            json_field=profile.json_field,
        )
    except MalformedDeliveryError as exc:
        return str(exc)


def delivery_twin(
    event: Event, profile: Profile, document: dict[str, object], payload: dict[str, object]
) -> Event | None:
    """Another event of the source made from the same delivery as `event`, and given
    its steps: kept under the key such a delivery had before 0.2.0 (a fingerprint of
    what the map made of it, found here with today's map), else one kept from the very
    same bytes, whatever map read them then (`event_kept_from`). Only an event with
    its steps is a twin: two unreadable copies must not each settle as the other's
    repeat, leaving nothing to run. A key that is the sender's own id has no such
    twin: the unique constraint on the key already makes it one event."""
    if not event.key.startswith(FINGERPRINT_PREFIX):
        return None
    earlier_key = mapped_key_before_020(profile, document, payload)
    if earlier_key != event.key:
        twin = (
            Event.objects.filter(source_id=event.source_id, key=earlier_key)
            .filter(Exists(Operation.objects.filter(event=OuterRef("pk"))))
            .first()
        )
        if twin is not None:
            return twin
    body = first_kept_body(event)
    if body is None:
        return None
    return event_kept_from(event.source_id, body, other_than=event, planned=True)


def _settle_as_repeat(event: Event, twin: Event, *, actor: User | None, reason: str) -> bool:
    """The unreadable case settled as a repeat of `twin`, linked and audited; nothing is
    created. False when its case was settled meanwhile (checked under the lock)."""
    with transaction.atomic():
        waiting = _still_waiting(event)
        if waiting is None:
            return False
        review_case_settle(
            waiting[1],
            code="repeat",
            note=(
                "The same delivery was already processed as another submission; "
                "nothing was created for this one."
            ),
            action="settled_as_repeat",
            actor=actor,
            system="remap",
            reason=reason,
            details={"repeat_of": str(twin.pk), "repeat_of_key": twin.key},
        )
    return True


def _still_waiting(event: Event) -> tuple[Event, ReviewCase] | None:
    """The event, locked, and its open unreadable case, while it still waits without
    operations; None once it was admitted or its case settled. Call in a transaction."""
    locked = Event.objects.select_for_update().select_related("source").get(pk=event.pk)
    case = (
        ReviewCase.objects.select_for_update()
        .filter(event=locked, kind=ReviewCase.Kind.UNREADABLE)
        .filter(status__in=ReviewCase.OPEN_STATUSES)
        .first()
    )
    if case is None or locked.operations.exists():
        return None
    return locked, case


def _changed(before: dict[str, object], after: dict[str, object]) -> tuple[str, ...]:
    names: list[str] = []
    for name in ("form", "message", "submitted_at", "fields"):
        if before.get(name) != after.get(name):
            names.append(name)
    contact_before = before.get("contact") or {}
    contact_after = after.get("contact") or {}
    assert isinstance(contact_before, dict) and isinstance(contact_after, dict)
    for name in ("name", "email", "phone"):
        if contact_before.get(name) != contact_after.get(name):
            names.append(f"contact.{name}")
    return tuple(names)


def _admit(
    event: Event,
    payload: dict[str, object],
    changed: tuple[str, ...],
    *,
    actor: User | None,
    reason: str,
) -> bool:
    """An unreadable submission becomes an ordinary one: its payload, its pipeline under
    its original key, the first step queued and its case resolved, in one transaction.
    False when it was admitted or its case settled meanwhile (checked under the lock)."""
    now = timezone.now()
    with transaction.atomic():
        waiting = _still_waiting(event)
        if waiting is None:
            return False
        locked, case = waiting
        _payload_store(locked, payload)
        operations = event_operations_create(event=locked, now=now)
        review_case_settle(
            case,
            code="remapped",
            note="Read with the corrected field map; processed under its original key.",
            action="remapped",
            actor=actor,
            system="remap",
            reason=reason,
            details={
                "changed": list(changed),
                "admitted": True,
                "operations": [operation.pk for operation in operations],
            },
            now=now,
        )
        operation_enqueue(operations[0].pk)  # same transaction as its row (ORM broker)
    return True


def _payload_store(event: Event, payload: dict[str, object]) -> None:
    """The event's content as the corrected map reads it (its key never changes)."""
    contact = payload.get("contact") or {}
    email = str(contact.get("email", "")) if isinstance(contact, dict) else ""
    submitted_at = payload.get("submitted_at")
    event.payload = payload
    event.fingerprint = payload_fingerprint(payload)
    event.contact_digest = contact_digest(email)
    event.form = str(payload.get("form", ""))[:100]
    event.submitted_at = (
        parse_datetime(submitted_at) if isinstance(submitted_at, str) and submitted_at else None
    )
    event.save(update_fields=["payload", "fingerprint", "contact_digest", "form", "submitted_at"])


def _apply(
    event: Event,
    payload: dict[str, object],
    changed: tuple[str, ...],
    *,
    actor: User | None,
    reason: str,
) -> int | None:
    """Stores the new mapping; where the enquiry exists, queues its update."""
    now = timezone.now()
    with transaction.atomic():
        locked = Event.objects.select_for_update().get(pk=event.pk)
        contact = payload.get("contact") or {}
        email = str(contact.get("email", "")) if isinstance(contact, dict) else ""
        Event.objects.filter(pk=locked.pk).update(
            payload=payload,
            fingerprint=payload_fingerprint(payload),
            contact_digest=contact_digest(email),
        )
        enquiry = locked.operations.filter(step="create_enquiry").first()
        operation = None
        if enquiry is not None and enquiry.status == Operation.Status.SUCCEEDED:
            operation = _update_operation(locked, enquiry, now=now)
        audit_record(
            action="remapped",
            actor=actor,
            system="remap",
            reason=reason,
            event=locked,
            operation=operation,
            details={
                "changed": list(changed),
                "update_operation": operation.pk if operation else None,
            },
        )
        if operation is not None:
            operation_enqueue(operation.pk)  # same transaction as its row (ORM broker)
    return operation.pk if operation is not None else None


def _update_operation(event: Event, enquiry: Operation, *, now: datetime) -> Operation:
    number = event.operations.filter(step__startswith=f"{REMAP_STEP}:").count() + 1
    step = f"{REMAP_STEP}:{number}"
    return Operation.objects.create(
        event=event,
        step=step,
        position=REMAP_POSITION,
        destination=enquiry.destination,
        key=operation_key(source_salt=event.source.key_salt, event_key=event.key, step=step),
        next_attempt_at=now,
        enqueued_at=now,
    )
