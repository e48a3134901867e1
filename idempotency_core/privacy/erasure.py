"""`person erase`: a person's data removed from every table that holds it (GDPR
article 17), in one transaction, recorded by one `person_erased` audit entry.

- Removed: the events' payloads, their raw deliveries, the content rendered for each
  operation, the contact digest that indexes them, the digest the confirmation limits
  counted, and every quote of what the person sent in free text: case summaries,
  evidence and notes, attempts' errors, audit reasons and details, bulk replays, holds,
  the admin's log.
- Kept: keys and fingerprints (a repeat is still recognised and creates nothing),
  statuses, destination references, attempts, cases and the audit trail's decisions.
  Unfinished operations are cancelled and open cases closed, each with its own
  `case_closed` entry naming the erasure's: nothing can be sent from data that is gone.
  The CRM's deletion of the person is never cancelled.
- The audit trail stays append-only: the entries that quote the person are rewritten
  under the database guard's one exception (migrations/sql/0.2.0/audit_trail.sql), in
  this transaction, naming the `person_erased` entry, which lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.apps import apps
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import F, Model, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from idempotency_core.audit.cases import review_cases_settle
from idempotency_core.audit.entries import audit_record, case_audit
from idempotency_core.execution.steps import ERASE_STEP
from idempotency_core.models import (
    AuditEntry,
    ConfirmationAllowance,
    Delivery,
    Event,
    Operation,
    ReviewCase,
)
from idempotency_core.privacy.crm import crm_erasures_create
from idempotency_core.privacy.person import ERASED_ACTION, Person, person_find
from idempotency_core.privacy.scrub import Scrubber

# Free-text columns that may quote what a person sent, their own rows or anyone's.
QUOTING_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("idempotency_core.ReviewCase", ("summary", "evidence", "resolution_note")),
    ("idempotency_core.Operation", ("last_error", "arguments")),
    ("idempotency_core.Attempt", ("error_message",)),
    ("idempotency_core.DestinationBudget", ("pause_reason",)),
    ("review_console.BulkReplayJob", ("reason", "filter_params", "filter_description")),
    ("review_console.BulkReplayItem", ("message",)),
    ("review_console.CauseHold", ("reason",)),
    ("admin.LogEntry", ("object_repr", "change_message")),
)
AUDIT_COLUMNS = ("reason", "details")
CLOSED_NOTE = "The person's personal data was erased on request; nothing more will be sent."
MARK = "personal_data_erased_by"

Rewrites = dict[Any, dict[str, Any]]


class PersonNotFoundError(Exception):
    """Onefold holds nothing about the address."""


class PersonBusyError(Exception):
    """One of the person's operations is being attempted right now."""


@dataclass(frozen=True)
class ErasureReport:
    entry_id: int
    digest: str
    events: int
    removed: dict[str, int] = field(default_factory=dict)
    crm_operations: tuple[int, ...] = ()


def person_erase(
    *,
    address: str,
    reason: str,
    actor: User | None = None,
    system: str = "",
    crm: bool = False,
    now: datetime | None = None,
) -> ErasureReport:
    """Erases the person's data; with `crm`, also asks for their deletion at the CRM
    (operations the caller runs or queues after the commit)."""
    person = person_find(address, with_erased=crm)
    if not person.found:
        raise PersonNotFoundError("no data")
    now = now or timezone.now()
    with transaction.atomic():
        list(Event.objects.select_for_update().filter(pk__in=person.event_ids))
        # Locked too: a worker's claim waits for this commit, then finds its step cancelled;
        # one that claimed before is running, and the erasure waits for it (refused).
        ops = Operation.objects.filter(event_id__in=person.event_ids)
        statuses = list(ops.select_for_update().values_list("status", flat=True))
        if Operation.Status.RUNNING in statuses:
            raise PersonBusyError(
                "an operation of this person is being attempted now; try again in a minute"
            )
        removed, closed = _settle(person, actor=actor, now=now)
        removed |= _event_data_remove(person, now=now)
        removed |= _quotes_remove(person)
        audit = _audit_rewrites(person)
        crm_ids = (
            crm_erasures_create(event_ids=person.event_ids, actor=actor, system=system, now=now)
            if crm
            else []
        )
        removed["audit entries rewritten"] = len(audit)
        entry = audit_record(
            action=ERASED_ACTION,
            actor=actor,
            system=system,
            reason=person.scrubber.text(reason),
            details={
                "digest": person.digest,
                "events": [str(pk) for pk in person.event_ids],
                "refused_deliveries": list(person.refused_ids),
                "removed": removed,
                "audit_entries": sorted(audit),
                "crm_operations": crm_ids,
            },
        )
        _audit_apply(entry.pk, audit)
        _closed_audit(closed, erasure=entry, actor=actor, system=system)
    return ErasureReport(
        entry_id=entry.pk,
        digest=person.digest,
        events=len(person.event_ids),
        removed=removed,
        crm_operations=tuple(crm_ids),
    )


class _Preview(Exception):
    def __init__(self, report: ErasureReport) -> None:
        self.report = report


def person_erase_preview(*, address: str, reason: str, crm: bool = False) -> ErasureReport:
    """What `person_erase` would remove, counted by doing it and rolling it back (its
    audit entry included): the one path, so the preview cannot drift from the erasure."""
    try:
        with transaction.atomic():
            raise _Preview(person_erase(address=address, reason=reason, system="preview", crm=crm))
    except _Preview as rolled_back:
        return rolled_back.report


def _settle(
    person: Person, *, actor: User | None, now: datetime
) -> tuple[dict[str, int], list[ReviewCase]]:
    """Open cases closed and unfinished operations cancelled: what waited for a person
    or a retry would otherwise fail on data that is gone, or send blanks. Also the
    cases it closed, for their own audit entries."""
    ids = person.event_ids
    cases = list(
        ReviewCase.objects.select_for_update(of=("self",))
        .filter(
            Q(event_id__in=ids) | Q(operation__event_id__in=ids),
            status__in=ReviewCase.OPEN_STATUSES,
        )
        # A case about the CRM's deletion stays: that step still runs (below).
        .exclude(operation__step=ERASE_STEP)
        .select_related("event", "operation")
        .order_by("pk")
    )
    closed = review_cases_settle(
        ReviewCase.objects.filter(pk__in=[case.pk for case in cases]),
        status=ReviewCase.Status.CLOSED,
        code=ERASED_ACTION,
        note=CLOSED_NOTE,
        now=now,
        actor=actor,
    )
    cancelled = Operation.objects.filter(
        # Never the CRM's deletion of the person: an erasure asks for it, never cancels it.
        ~Q(step=ERASE_STEP),
        event_id__in=ids,
        status__in=[*Operation.CLAIMABLE, Operation.Status.NEEDS_REVIEW],
    ).update(
        status=Operation.Status.CANCELLED,
        held_by=None,
        next_attempt_at=None,
        recovery="",
        updated_at=now,
        completed_at=now,
    )
    return {"cases closed": int(closed or 0), "operations cancelled": cancelled}, cases


def _closed_audit(
    cases: list[ReviewCase], *, erasure: AuditEntry, actor: User | None, system: str
) -> None:
    """Each closed case's own trail says who closed it and why, as a reviewer's close
    would; the erasure's entry (its reason already free of the person's data) holds
    the rest."""
    for case in cases:
        case_audit(
            case,
            action="case_closed",
            actor=actor,
            system=system,
            reason=erasure.reason,
            details={"resolution_code": ERASED_ACTION, "erasure_entry": erasure.pk},
        )


def _event_data_remove(person: Person, *, now: datetime) -> dict[str, int]:
    ids = person.event_ids
    payloads = Event.objects.filter(pk__in=ids).exclude(payload=None).count()
    Event.objects.filter(pk__in=ids).update(
        payload=None,
        contact_digest="",
        payload_purged_at=Coalesce(F("payload_purged_at"), Value(now)),
    )
    # With the events' own, the person's refused repeats kept on someone else's event.
    raw = (
        Delivery.objects.filter(Q(event_id__in=ids) | Q(pk__in=person.refused_ids))
        .filter(raw_body__isnull=False)
        .update(raw_body=None)
    )
    content = Operation.objects.filter(event_id__in=ids, content__isnull=False).update(content=None)
    counted = (
        ConfirmationAllowance.objects.filter(operation__event_id__in=ids)
        .exclude(recipient_digest="")
        .update(recipient_digest="")
    )
    return {
        "payloads": payloads,
        "raw deliveries": raw,
        "rendered contents": content,
        "confirmation counts": counted,
    }


def _own_rows(label: str, ids: tuple[Any, ...]) -> Q | None:
    return {
        "idempotency_core.ReviewCase": Q(event_id__in=ids) | Q(operation__event_id__in=ids),
        "idempotency_core.Operation": Q(event_id__in=ids),
        "idempotency_core.Attempt": Q(operation__event_id__in=ids),
        "idempotency_core.AuditEntry": Q(event_id__in=ids)
        | Q(case__event_id__in=ids)
        | Q(operation__event_id__in=ids),
    }.get(label)


def quoting_rows(
    model: type[Model], fields: tuple[str, ...], person: Person
) -> tuple[QuerySet[Any] | None, QuerySet[Any]]:
    """The person's own rows of `model` (None: it has none), and everyone else's rows
    whose `fields` quote them: what the erasure rewrites and the export shows."""
    own = _own_rows(model._meta.label, person.event_ids)
    anyone: QuerySet[Any] = model._default_manager.filter(person.anywhere.mentions(fields))
    if own is None:
        return None, anyone
    return model._default_manager.filter(own), anyone.exclude(own)


def _rows_rewritten(model: type[Model], fields: tuple[str, ...], person: Person) -> Rewrites:
    """The new values of each row that quotes the person: their own rows by every value
    and word, anyone's by the values long enough to be theirs."""
    own, anyone = quoting_rows(model, fields, person)
    rewrites: Rewrites = {}
    if own is not None:
        rewrites |= _rewritten(own, fields, person.scrubber)
    rewrites |= _rewritten(anyone, fields, person.anywhere)
    return rewrites


def _rewritten(rows: QuerySet[Any], fields: tuple[str, ...], scrubber: Scrubber) -> Rewrites:
    rewrites: Rewrites = {}
    for row in rows.values("pk", *fields).iterator():
        changed = {f: scrubber.value(row[f]) for f in fields}
        changed = {f: v for f, v in changed.items() if v != row[f]}
        if changed:
            rewrites[row["pk"]] = changed
    return rewrites


def _quotes_remove(person: Person) -> dict[str, int]:
    removed = {}
    for label, fields in QUOTING_COLUMNS:
        model = apps.get_model(label)
        rewrites = _rows_rewritten(model, fields, person)
        for pk, changed in rewrites.items():
            model._default_manager.filter(pk=pk).update(**changed)
        if rewrites:
            removed[f"{model._meta.verbose_name_plural} quoting them"] = len(rewrites)
    return removed


def _audit_rewrites(person: Person) -> Rewrites:
    return _rows_rewritten(AuditEntry, AUDIT_COLUMNS, person)


def _audit_apply(entry_id: int, rewrites: Rewrites) -> None:
    """Under the guard's one exception: this transaction names its own `person_erased`
    entry, and each rewritten row names it too (the guard checks both)."""
    if not rewrites:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('onefold.erasure', %s, true)", [str(entry_id)])
    for pk, changed in rewrites.items():
        details = changed.get("details")
        if details is None:
            details = AuditEntry.objects.values_list("details", flat=True).get(pk=pk)
        changed["details"] = {**(details or {}), MARK: entry_id}
        AuditEntry.objects.filter(pk=pk).update(**changed)
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('onefold.erasure', '', true)")
