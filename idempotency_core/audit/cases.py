"""Opening and settling review cases: at most one open case per subject and kind
(invariant 5), and every settlement audited in the same transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import F, Q, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from idempotency_core.audit.entries import case_audit, event_of
from idempotency_core.audit.notice_queue import case_notify_enqueue
from idempotency_core.models import Event, Operation, ReviewCase


def review_case_open(
    *,
    kind: str,
    subject: str,
    summary: str,
    event: Event | None = None,
    operation: Operation | None = None,
    evidence: dict[str, Any] | None = None,
    system: str,
) -> tuple[ReviewCase, bool]:
    """Opens a case, or returns the open one for this subject and kind.

    A partial unique constraint decides between concurrent openers; the INSERT skips a
    conflict, so no failed statement logs the case's evidence.
    """
    case = ReviewCase(
        kind=kind,
        subject=subject,
        summary=summary,
        event=event_of(event, operation),
        operation=operation,
        evidence=evidence or {},
    )
    if not _insert_unless_conflicting(case):
        case = ReviewCase.objects.get(
            subject=subject, kind=kind, status__in=ReviewCase.OPEN_STATUSES
        )
        return case, False
    case_audit(
        case,
        action="case_opened",
        system=system,
        reason=summary,
        details={"kind": kind, "subject": subject},
    )
    case_notify_enqueue(case.pk)
    return case, True


def _insert_unless_conflicting(case: ReviewCase) -> bool:
    """`INSERT ... ON CONFLICT DO NOTHING RETURNING id`:
    True, with `case.pk` set, when this row went in; False when an open case of the
    same subject and kind was there first."""
    meta = ReviewCase._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    values = [f.get_db_prep_save(f.pre_save(case, True), connection) for f in fields]
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(str(f.column)) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) "
        f"ON CONFLICT DO NOTHING RETURNING {quote(str(meta.pk.column))}"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, values)
        row = cursor.fetchone()
    if row is None:
        return False
    case.pk = row[0]
    case._state.adding = False
    return True


def review_case_requeue(
    case: ReviewCase, *, summary: str, evidence: dict[str, Any], system: str, now: datetime
) -> bool:
    """The step of an open case went back to review after someone asked for another try
    (a replay, an email sent again, "create anyway") and it failed again: the case goes
    back to the queue, open and nobody's, with what happened this time as its summary
    and evidence, and says so in the audit trail. Call inside the transaction that
    records the failure. Returns whether the case was still open."""
    previous = case.owner.get_username() if case.owner_id and case.owner else ""
    moved = ReviewCase.objects.filter(pk=case.pk, status__in=ReviewCase.OPEN_STATUSES).update(
        status=ReviewCase.Status.OPEN,
        owner=None,
        summary=summary,
        evidence=evidence,
        updated_at=now,
    )
    if moved:
        case_audit(
            case,
            action="replay_failed",
            system=system,
            reason="Tried again and it failed again: back in the queue, for anyone to take.",
            details={"previous_owner": previous, "attempt": evidence.get("attempt")},
        )
    return bool(moved)


def review_cases_supersede(case: ReviewCase, *, system: str, now: datetime) -> list[int]:
    """Another try of `case`'s step failed in another way (a replay of a refusal that
    ended unclear): the step's other open cases asked about the earlier failure, and
    `case` now asks about this one. They are closed as superseded, each audited and
    naming `case`, so one step has one case in the queue. Call inside the transaction
    that opened `case`."""
    older = list(
        ReviewCase.objects.select_for_update(of=("self",))
        .filter(operation=case.operation, status__in=ReviewCase.OPEN_STATUSES)
        .exclude(pk=case.pk)
        .order_by("pk")
    )
    for other in older:
        review_case_settle(
            other,
            status=ReviewCase.Status.CLOSED,
            code="superseded",
            note=f"The step was tried again and failed another way: see case {case.pk}.",
            action="case_superseded",
            system=system,
            reason=f"Replaced by case {case.pk}",
            details={"superseded_by": case.pk},
            now=now,
        )
    return [other.pk for other in older]


def review_case_locked(case_id: int, *related: str) -> ReviewCase:
    """The case, its row locked until the transaction ends, read with `related`."""
    # `of=self`: PostgreSQL cannot lock the nullable side of the outer join.
    return (
        ReviewCase.objects.select_for_update(of=("self",)).select_related(*related).get(pk=case_id)
    )


def review_cases_in_progress(case_ids: list[int], *, actor: User, now: datetime) -> int:
    """Cases that wait on a try a person asked for (a replay, a send again): in
    progress, kept by whoever holds them, else the actor's."""
    return ReviewCase.objects.filter(pk__in=case_ids).update(
        status=ReviewCase.Status.IN_PROGRESS,
        owner_id=Coalesce(F("owner_id"), Value(actor.pk)),
        updated_at=now,
    )


def review_cases_settle(
    cases: QuerySet[ReviewCase],
    *,
    status: str,
    code: str,
    note: str,
    now: datetime,
    actor: User | None = None,
) -> int:
    """Resolves or closes the open ones among `cases`; an unowned case becomes the
    actor's. Audit entries are the caller's: each decision names its own action."""
    changes: dict[str, Any] = {
        "status": status,
        "resolution_code": code,
        "resolution_note": note,
        "resolved_at": now,
        "updated_at": now,
    }
    if actor is not None:
        changes["owner_id"] = Coalesce(F("owner_id"), Value(actor.pk))
    return cases.filter(status__in=ReviewCase.OPEN_STATUSES).update(**changes)


def review_case_settle(
    case: ReviewCase,
    *,
    code: str,
    action: str,
    status: str = ReviewCase.Status.RESOLVED,
    note: str | None = None,
    actor: User | None = None,
    system: str = "",
    operation: Operation | None = None,
    reason: str = "",
    details: dict[str, Any] | None = None,
    now: datetime | None = None,
) -> bool:
    """Settles one case if it is still open (resolved unless `status` says otherwise,
    its note the reason unless `note` is given), and audits the decision as `action`.

    The decision is audited even when the case was settled meanwhile (the
    entry then says so): what was done still happened. Returns whether this
    call settled the case. Call inside the transaction of the change it records.
    """
    settled = review_cases_settle(
        ReviewCase.objects.filter(pk=case.pk),
        status=status,
        code=code,
        note=reason if note is None else note,
        now=now or timezone.now(),
        actor=actor,
    )
    if not settled:
        details = {**(details or {}), "case_already_settled": True}
    case_audit(
        case,
        action=action,
        actor=actor,
        system=system,
        operation=operation,
        reason=reason,
        details=details,
    )
    return bool(settled)


def review_cases_settle_on_success(operation: Operation, *, now: datetime) -> list[int]:
    """Settles what a success of `operation` answers: its own open cases (a replay
    that worked; the case waited in progress until now) and the case it was
    created for (`arguments["settles_case_ids"]`: an email sent again). Call inside
    the transaction that records the success. Returns the settled case ids."""
    arguments = operation.arguments or {}
    condition = Q(operation_id=operation.pk)
    if arguments.get("settles_case_ids"):
        condition |= Q(pk__in=arguments["settles_case_ids"])
    cases = list(
        ReviewCase.objects.select_for_update(of=("self",))
        .filter(condition, status__in=ReviewCase.OPEN_STATUSES)
        .order_by("pk")
    )
    for case in cases:
        code = "sent_again" if case.operation_id != operation.pk else "replayed"
        review_case_settle(
            case,
            code=code,
            note=f"{operation.step} succeeded (operation {operation.pk}).",
            action="case_settled_by_success",
            system="worker",
            operation=operation,
            details={"operation_key": operation.key, "settled_by_operation": operation.pk},
            now=now,
        )
    return [case.pk for case in cases]
