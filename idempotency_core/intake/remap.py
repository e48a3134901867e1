"""Re-running a source's field map over the deliveries it kept (`manage.py remap`).

A field map can be wrong (a form's ids differ from the preset's). Hook deliveries
are kept raw until payload retention, so once the map is corrected the mapping
is re-run: each event's payload becomes what the corrected map makes of its
first delivery. An enquiry already in the CRM is then *updated* by an operation
of its own (`remap_enquiry:<n>`, with its own stable key, claimed and retried
like any effect): never a second record. The event's key never changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.engine import operation_enqueue
from idempotency_core.intake.hooks import submission_from
from idempotency_core.intake.senders.parsing import MalformedDeliveryError, parse_body
from idempotency_core.intake.senders.profiles import profile_resolve
from idempotency_core.keys import contact_digest, operation_key, payload_fingerprint
from idempotency_core.models import Event, Operation, Source

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


def events_remap(
    *,
    source: Source,
    since: datetime,
    dry_run: bool,
    progress: Callable[[int], None] | None = None,
) -> Iterator[RemapChange]:
    """Yields one change per event whose mapping differs (or cannot be re-run)."""
    profile = profile_resolve(source.profile, source.profile_overrides)
    events = Event.objects.filter(
        source=source, received_at__gte=since, payload__isnull=False
    ).order_by("received_at", "pk")
    for number, event in enumerate(events.iterator(chunk_size=500), 1):
        if progress is not None:
            progress(number)
        delivery = (
            event.deliveries.filter(raw_body__isnull=False).order_by("received_at", "pk").first()
        )
        if delivery is None or delivery.raw_body is None:
            continue  # not a hook delivery, or nothing kept
        try:
            document = parse_body(
                bytes(delivery.raw_body),
                content_type=delivery.content_type,
                parser=profile.parser,
                json_field=profile.json_field,
            )
        except MalformedDeliveryError as exc:
            yield RemapChange(str(event.pk), event.key, (), error=str(exc))
            continue
        _, payload, errors = submission_from(source, profile, document, {})
        if errors:
            yield RemapChange(str(event.pk), event.key, (), error=f"invalid: {sorted(errors)}")
            continue
        changed = _changed(event.payload or {}, payload)
        if not changed:
            continue
        operation_id = None if dry_run else _apply(event, payload, changed)
        yield RemapChange(str(event.pk), event.key, changed, update_operation_id=operation_id)


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


def _apply(event: Event, payload: dict[str, object], changed: tuple[str, ...]) -> int | None:
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
            system="remap",
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
