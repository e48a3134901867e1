"""`person export`: everything Onefold holds about one email address, as one document
(GDPR article 15): the submissions with their payloads and raw deliveries, what each
effect sent and where it went, the cases about them, the deliveries of theirs that were
refused under another submission's key, the audit entries naming them, and every other
row that quotes them: each place the erasure scrubs (`QUOTING_COLUMNS`), so that the
export shows what the erasure would remove. The export is audited by a keyed digest of
the address, never the address."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib.auth.models import User
from django.db.models import Q, QuerySet
from django.utils import timezone

from idempotency_core.audit.entries import audit_record
from idempotency_core.models import AuditEntry, Delivery, Event, Operation, ReviewCase
from idempotency_core.privacy.erasure import QUOTING_COLUMNS, quoting_rows
from idempotency_core.privacy.person import (
    EXPORTED_ACTION,
    Person,
    person_deliveries,
    person_find,
)

# A case as the document shows it: what was asked and how it was settled.
_CASE_FIELDS = (
    "id",
    "kind",
    "status",
    "summary",
    "evidence",
    "resolution_code",
    "resolution_note",
    "created_at",
    "resolved_at",
)


def person_export(
    *, address: str, actor: User | None = None, system: str = ""
) -> dict[str, Any] | None:
    """The document, or None when Onefold holds nothing about the address."""
    person = person_find(address)
    if not person.found:
        return None
    events = (
        Event.objects.filter(pk__in=person.event_ids)
        .select_related("source")
        .order_by("received_at")
    )
    document = {
        "address": person.address,
        "exported_at": timezone.now().isoformat(),
        "submissions": [_submission(event, person) for event in events],
        "refused_deliveries": [
            _delivery(d)
            for d in person_deliveries((), person.refused_ids)
            .exclude(event_id__in=person.event_ids)
            .select_related("source")
            .order_by("received_at", "pk")
        ],
        "audit_entries": [_entry(entry) for entry in person_audit_entries(person)],
        "quoted_elsewhere": _quoted_elsewhere(person),
    }
    audit_record(
        action=EXPORTED_ACTION,
        actor=actor,
        system=system,
        reason="personal data request: export",
        details={"digest": person.digest, "events": [str(pk) for pk in person.event_ids]},
    )
    return document


def person_audit_entries(person: Person) -> QuerySet[AuditEntry]:
    """Entries about the person's events, cases and operations, their earlier requests,
    and any other entry that quotes what they sent."""
    ids = person.event_ids
    return AuditEntry.objects.filter(
        Q(event_id__in=ids)
        | Q(case__event_id__in=ids)
        | Q(operation__event_id__in=ids)
        | Q(details__digest=person.digest)
        | person.anywhere.mentions(["reason", "details"])
    ).order_by("at", "pk")


def _quoted_elsewhere(person: Person) -> dict[str, list[dict[str, Any]]]:
    """Everyone else's rows that quote the person, by table (their own rows are in
    `submissions`)."""
    found = {}
    for label, fields in QUOTING_COLUMNS:
        model = apps.get_model(label)
        _, others = quoting_rows(model, fields, person)
        rows = list(others.order_by("pk").values("pk", *fields))
        if rows:
            found[str(model._meta.verbose_name_plural)] = rows
    return found


def _delivery(delivery: Delivery) -> dict[str, Any]:
    return {
        "source": delivery.source.name,
        "received_at": delivery.received_at,
        "outcome": delivery.outcome,
        "status_code": delivery.status_code,
        "raw_body": bytes(delivery.raw_body).decode("utf-8", errors="replace")
        if delivery.raw_body is not None
        else None,
    }


def _submission(event: Event, person: Person) -> dict[str, Any]:
    # A repeat refused under this key that someone else sent is theirs, not the person's.
    deliveries = person_deliveries((event.pk,), person.refused_ids).filter(event=event)
    return {
        "event_id": str(event.pk),
        "source": event.source.name,
        "key": event.key,
        "form": event.form,
        "received_at": event.received_at,
        "submitted_at": event.submitted_at,
        "payload": event.payload,
        "payload_purged_at": event.payload_purged_at,
        "deliveries": [
            {k: v for k, v in _delivery(d).items() if k != "source"}
            for d in deliveries.select_related("source").order_by("received_at", "pk")
        ],
        "operations": [_operation(o) for o in event.operations.order_by("position", "pk")],
        "cases": list(
            ReviewCase.objects.filter(Q(event=event) | Q(operation__event=event))
            .order_by("created_at")
            .values(*_CASE_FIELDS)
        ),
    }


def _operation(operation: Operation) -> dict[str, Any]:
    return {
        "step": operation.step,
        "status": operation.status,
        "destination": operation.destination.name,
        "destination_ref": operation.destination_ref,
        "key": operation.key,
        "content": operation.content,
        "arguments": operation.arguments,
        "last_error": operation.last_error,
        "attempts": [
            {
                "number": a.number,
                "started_at": a.started_at,
                "finished_at": a.finished_at,
                "outcome": a.outcome,
                "reply": a.reply,
                "error_message": a.error_message,
            }
            for a in operation.attempts.order_by("number")
        ],
    }


def _entry(entry: AuditEntry) -> dict[str, Any]:
    return {
        "at": entry.at,
        "actor": entry.actor_label,
        "action": entry.action,
        "reason": entry.reason,
        "details": entry.details,
        "event_id": str(entry.event_id) if entry.event_id else None,
        "case_id": entry.case_id,
    }
