"""Finding a customer's submission, and everything that happened to it, on one page.

Read-only selectors, like `selectors.py`. How each kind of search is answered,
and why no contact detail is indexed in clear:

- **email**: exact, case-insensitive, through `Event.contact_digest` (an HMAC of
  the normalised address, indexed): the address typed is digested the same way
  and matched by equality. The address itself is never indexed, and what looks
  like an address is not tried as a key either, so it never reaches a query.
- **name**: the name is stored only inside the payload (no index, no digest, and
  a digest could not match part of a name). It is searched as a substring of the
  payload's contact name among the newest NAME_SEARCH_SCOPE submissions (a bounded
  scan: no index of names in clear), under a statement timeout, over what the
  viewer may read: all of them for viewers who may see contact details; for a
  masked viewer any part among the submissions revealed to them (review/contact.py:
  a reveal with a reason, audited, for a few hours), and whole words elsewhere, the
  results masked: a substring over the rest would spell out the full names the
  console hides ("A. L." would answer "Ada Lovelace?" one letter at a time).
- **key or reference**: exact event key (the (source, key) unique index, one
  probe per source), operation key (unique index), CRM or email reference
  (the partial index on `destination_ref`), the event's id, or `#<case number>`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Count, OuterRef, Prefetch, Q, QuerySet, Subquery

from idempotency_core.keys import contact_digest
from idempotency_core.models import (
    Attempt,
    AuditEntry,
    Delivery,
    Destination,
    Event,
    Operation,
    ReviewCase,
    Source,
)
from review_console import glossary

RESULTS_LIMIT = 50
# A name search reads payloads (no index): stop it rather than hold a web worker.
NAME_SEARCH_TIMEOUT_MS = 2000
# How far back a name is looked for (newest submissions first): see _name_search.
NAME_SEARCH_SCOPE = 100_000
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_CASE_NUMBER = re.compile(r"^#\s*(\d{1,18})$")


@dataclass
class SearchResult:
    query: str
    # How the query was matched, in words ("email address", "event key", ...).
    matched_by: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    case_id: int | None = None
    notice: str = ""
    # Said next to the results when a name search looked at recent submissions only.
    scope_note: str = ""


def _events(condition: Q) -> QuerySet[Event]:
    open_cases = Count("review_cases", filter=Q(review_cases__status__in=ReviewCase.OPEN_STATUSES))
    return (
        Event.objects.filter(condition)
        .select_related("source")
        .annotate(open_cases=open_cases, cases=Count("review_cases"))
        .order_by("-received_at")
    )


def submission_search(
    query: str, *, may_see_contact: bool, revealed: list[Any] | None = None
) -> SearchResult:
    """Submissions matching `query`, newest first, at most RESULTS_LIMIT. A name is
    searched among all submissions when `may_see_contact`, else among `revealed` only
    (the ids of the submissions revealed to the viewer)."""
    query = query.strip()
    result = SearchResult(query=query)
    if not query or len(query) > 500 or "\x00" in query:
        return result
    number = _CASE_NUMBER.match(query)
    if number:
        found = ReviewCase.objects.filter(pk=int(number.group(1))).values_list("pk", flat=True)
        result.case_id = found.first()
        result.matched_by.append("case number")
        return result
    condition = _exact_condition(query, result)
    if condition is not None:
        result.events = list(_events(condition)[:RESULTS_LIMIT])
    if not result.events and _looks_like_name(query):
        if may_see_contact:
            _name_search(query, result)
        else:
            _name_search_revealed(query, result, revealed or [])
    return result


def _exact_condition(query: str, result: SearchResult) -> Q | None:
    """Each exact match resolved through its own index into event ids."""
    ids: set[Any] = set()
    if _EMAIL.match(query):
        by_email = Event.objects.filter(contact_digest=contact_digest(query))
        found = _ids(by_email, "pk")
        if found:
            result.matched_by.append("email address")
        # An address is only ever digested: it is not also tried as a key or a
        # reference, so it never reaches a query (nor a slow-query log) in clear.
        return Q(pk__in=list(found)) if found else None
    sources = list(Source.objects.values_list("pk", flat=True))
    probes = (
        ("submission id", _uuid_event_ids(query)),
        ("event key", _ids(Event.objects.filter(source_id__in=sources, key=query[:255]), "pk")),
        ("operation key", _ids(Operation.objects.filter(key=query[:64]), "event_id")),
        (
            "CRM or email reference",
            _ids(Operation.objects.filter(destination_ref=query[:200]), "event_id"),
        ),
    )
    for label, found in probes:
        if found:
            result.matched_by.append(label)
        ids |= found
    return Q(pk__in=list(ids)) if ids else None


def _ids(queryset: QuerySet, column: str) -> set[Any]:
    return set(queryset.values_list(column, flat=True)[:RESULTS_LIMIT])


def _uuid_event_ids(query: str) -> set[Any]:
    try:
        value = uuid.UUID(query)
    except ValueError:
        return set()
    return _ids(Event.objects.filter(pk=value), "pk")


def _looks_like_name(query: str) -> bool:
    return len(query) >= 2 and any(ch.isalpha() for ch in query) and "@" not in query


def _name_search_revealed(query: str, result: SearchResult, revealed: list[Any]) -> None:
    """A masked viewer's name search: any part of the name among the submissions
    revealed to them; elsewhere whole words only ("Lovelace", not "Lov"), shown masked,
    so a search confirms a name the viewer already knows and never spells one out
    letter by letter."""
    if revealed:
        condition = Q(pk__in=revealed, payload__contact__name__icontains=query)
        result.events = list(_events(condition)[:RESULTS_LIMIT])
    if not result.events:
        _name_search(query, result, whole_words=True)
    if result.events:
        return
    result.notice = (
        result.notice
        or "No submission has that name. Without the permission to see contact details, "
        "a name is matched by whole words (a surname, not its first letters)."
    )


def _whole_words(query: str) -> Q | None:
    """Each word of `query` (two letters at least) as a whole word of the name."""
    words = [word for word in re.findall(r"\w+", query) if len(word) >= 2]
    if not words:
        return None
    condition = Q()
    for word in words:
        condition &= Q(payload__contact__name__iregex=rf"\m{re.escape(word)}\M")
    return condition


def _name_search(query: str, result: SearchResult, *, whole_words: bool = False) -> None:
    condition: Q | None = Q(payload__contact__name__icontains=query)
    if whole_words:
        condition = _whole_words(query)
    if condition is None:
        return
    # The scan is bounded by the newest NAME_SEARCH_SCOPE submissions (their start
    # found on the received_at index), so its cost does not grow with the table.
    cutoff = (
        Event.objects.order_by("-received_at")
        .values_list("received_at", flat=True)[NAME_SEARCH_SCOPE - 1 : NAME_SEARCH_SCOPE]
        .first()
    )
    if cutoff is not None:
        condition &= Q(received_at__gte=cutoff)
        result.scope_note = (
            f"Names are searched among the {NAME_SEARCH_SCOPE:,} most recent submissions; "
            "an email address, key or reference finds any submission."
        )
    matches = _events(condition)[:RESULTS_LIMIT]
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL statement_timeout = {NAME_SEARCH_TIMEOUT_MS}")
            result.events = list(matches)
    except DatabaseError:
        result.notice = (
            "The name search took too long and was stopped. Search by email address, key "
            "or reference: those are instant."
        )
        return
    if result.events:
        result.matched_by.append("name")


# -- the submission page ------------------------------------------------------------


@dataclass
class TimelineEntry:
    at: datetime
    kind: str  # delivery, attempt, case, audit
    title: str
    detail: str = ""
    case_id: int | None = None
    operation_id: int | None = None
    technical: str = ""


def submission_cases(event: Event, operations: list[Operation]) -> list[ReviewCase]:
    """Every case of the submission: its own, and those of its operations (a merge's
    case may belong to another event). Both columns are indexed foreign keys, so
    this is a bitmap OR of two index scans, not a join over every case."""
    condition = Q(event_id=event.pk) | Q(operation_id__in=[o.pk for o in operations])
    return list(
        ReviewCase.objects.filter(condition)
        .select_related("operation", "owner")
        .order_by("created_at", "pk")
    )


def submission_audit(
    event: Event, cases: list[ReviewCase], operations: list[Operation]
) -> list[AuditEntry]:
    condition = (
        Q(event=event)
        | Q(case_id__in=[c.pk for c in cases])
        | Q(operation_id__in=[o.pk for o in operations])
    )
    return list(AuditEntry.objects.filter(condition).order_by("at", "pk")[:500])


def submission_timeline(
    *,
    deliveries: list[Any],
    operations: list[Operation],
    cases: list[ReviewCase],
    audit: list[AuditEntry],
) -> list[TimelineEntry]:
    """One chronological story: receipts, tries, cases and people's decisions."""
    entries = [
        TimelineEntry(
            at=d.received_at,
            kind="delivery",
            title=glossary.delivery_outcome_label(d.outcome),
            technical=f"HTTP {d.status_code}",
        )
        for d in deliveries
    ]
    for operation in operations:
        for attempt in operation.attempts.all():
            entries.append(_attempt_entry(operation, attempt))
    for case in cases:
        entries.append(
            TimelineEntry(
                at=case.created_at,
                kind="case",
                title=f"Case #{case.pk} opened: {glossary.kind_label(case.kind)}",
                case_id=case.pk,
                technical=f"{case.kind} · {case.subject}",
            )
        )
    for entry in audit:
        if entry.action == "case_opened":
            continue  # the case's own line says it
        entries.append(
            TimelineEntry(
                at=entry.at,
                kind="audit",
                title=f"{glossary.action_label(entry.action)} ({_actor(entry.actor_label)})",
                detail=entry.reason,
                case_id=entry.case_id,
                operation_id=entry.operation_id,
                technical=entry.action,
            )
        )
    return sorted(entries, key=lambda e: e.at)


def _actor(label: str) -> str:
    kind, _, name = label.partition(":")
    return name if kind == "user" else "automatic"


def _attempt_entry(operation: Operation, attempt: Any) -> TimelineEntry:
    words = glossary.reply_label(smtp_code=attempt.smtp_code, http_status=attempt.http_status)
    detail = words.capitalize() if words else ""
    if attempt.adopted:
        detail = (detail + ". " if detail else "") + "It already existed and was adopted."
    if attempt.outcome == Attempt.Outcome.SKIPPED:
        detail = attempt.error_message  # why nothing was called: "not sent: no address"
    return TimelineEntry(
        at=attempt.started_at,
        kind="attempt",
        title=(
            f"{glossary.step_label(operation.step)}: try {attempt.number}, "
            f"{glossary.outcome_label(attempt.outcome).lower()} "
            f"({glossary.trigger_label(attempt.trigger)})"
        ),
        detail=detail,
        operation_id=operation.pk,
        technical=" · ".join(
            part
            for part in (
                operation.step,
                attempt.outcome or "running",
                attempt.reply,
                attempt.error_class,
            )
            if part
        ),
    )


def step_note(operation: Operation) -> str:
    """Why a step ended without its effect when Onefold decided it (a confirmation with
    no address: "not sent: no address"), else "". Read from the attempts the page has
    prefetched: a skipped last attempt carries the reason on its operation."""
    attempts = list(operation.attempts.all())
    if operation.status != Operation.Status.CANCELLED or not attempts:
        return ""
    return operation.last_error if attempts[-1].outcome == Attempt.Outcome.SKIPPED else ""


def crm_record_url(destination: Destination, ref: str) -> str:
    """A link to the record in the CRM where Onefold knows its address without
    account details: the sandbox CRM's record resource. Other vendors' web
    addresses need an account or portal id the adapters do not hold: none."""
    if not ref or destination.kind != "crm_http":
        return ""
    base = (destination.base_url or settings.DESTINATION_URL).rstrip("/")
    return f"{base}/crm/records/{ref}" if ref.startswith("rec_") else ""


def event_operations(event: Event) -> list[Operation]:
    """The event's operations in pipeline order, each with its attempts (the timeline)."""
    attempts = Attempt.objects.select_related("triggered_by").order_by("number")
    return list(
        event.operations.select_related("destination", "held_by")
        .prefetch_related(Prefetch("attempts", queryset=attempts))
        .order_by("position")
    )


def event_deliveries(event: Event) -> list[Delivery]:
    return list(event.deliveries.order_by("received_at", "id"))


def related_events(event: Event, *, limit: int = 20) -> list[Event]:
    """Other events of the same contact (HMAC of the email; the address is never indexed)."""
    if not event.contact_digest:
        return []
    latest_case = ReviewCase.objects.filter(event=OuterRef("pk")).order_by("-created_at")
    return list(
        Event.objects.filter(contact_digest=event.contact_digest)
        .exclude(pk=event.pk)
        .select_related("source")
        .defer("payload")
        .annotate(case_id=Subquery(latest_case.values("pk")[:1]))
        .order_by("-received_at")[:limit]
    )
