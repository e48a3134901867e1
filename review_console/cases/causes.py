"""Open cases grouped by cause, settled together, and causes held for a while.

A **cause** is what makes twenty cases one problem: the same kind of case, the same
step (a merge's or a send-again's suffix aside), the same destination, and the same
reason it failed: the error class and the answer's status ("HTTP 400"), which is
also the rule that refused where Onefold's own rule did (a held confirmation). The
components are read from each case's operation and evidence in SQL (`with_cause`),
so grouping needs no column of its own and works on every case opened so far.

One decision settles a group: **close all** (with a category) or **try all again**
(a bulk replay of the group's cases). Each case goes through its own one-case
service (`case_close`, `operation_replay`), so every guard applies to each and each
gets its own audit entry; a case that moved meanwhile is reported, not forced. A
group decision covers the cases the reviewer saw: those opened up to the moment the
page was drawn (`seen_until`), never one that arrived after.

**Holding a cause.** Closing a group may also hold its cause for a few hours (a
`CauseHold`): while the hold lasts, a new case with that cause is not listed one by
one in the queue and "Next case" does not give it; it is attached to the cause's
group, which says how many arrived since and offers the same decision for them. It is
not closed by itself: a hold only saves reviewers from opening the same case twenty
times, and a new case may be a real customer whom the cause's fix now serves, so a
person still decides (no silent loss). When the hold ends (or is stopped), its cases
are listed one by one again. Cases are still open and counted everywhere else (the
dashboard's figures, the filters).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Count, F, Func, Max, Min, Q, QuerySet, Value
from django.db.models.fields import CharField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, Concat, NullIf
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from idempotency_core.audit.entries import audit_record
from idempotency_core.models import ReviewCase
from idempotency_core.review.cases import RESOLUTION_CODES, cases_settle_many
from idempotency_core.review.refusals import CaseActionRefusedError
from review_console.cases.story import why_words
from review_console.glossary import kind_label, step_label
from review_console.models import CauseHold

COMPONENTS = ("kind", "c_step", "c_destination", "c_error", "c_status")
# How long a cause may be held, in hours, as the queue offers it.
HOLD_CHOICES = (0, 4, 24)
GROUPS_SHOWN = 10


def with_cause(cases: QuerySet[ReviewCase]) -> QuerySet[ReviewCase]:
    """`cases` with their cause's components annotated (cases without a step get none)."""
    evidence = "evidence"
    text = CharField()
    return cases.annotate(
        c_step=Func(
            F("operation__step"), Value(":"), Value(1), function="split_part", output_field=text
        ),
        c_destination=F("operation__destination_id"),
        c_error=Coalesce(KeyTextTransform("error_class", evidence), Value(""), output_field=text),
        c_status=Coalesce(
            NullIf(KeyTextTransform("reply", evidence), Value("")),
            Concat(Value("HTTP "), Cast(KeyTextTransform("http_status", evidence), text)),
            Concat(Value("SMTP "), Cast(KeyTextTransform("smtp_code", evidence), text)),
            Value(""),
            output_field=text,
        ),
    )


@dataclass(frozen=True)
class Cause:
    kind: str
    step: str
    destination_id: int
    error_class: str
    status: str

    def token(self) -> str:
        """The cause as the queue's forms post it back."""
        return json.dumps(
            [self.kind, self.step, self.destination_id, self.error_class, self.status]
        )

    @classmethod
    def from_token(cls, token: str) -> Cause:
        refused = CaseActionRefusedError("That group is not valid; open the queue again.")
        try:
            kind, step, destination, error, status = json.loads(token)
            cause = cls(str(kind), str(step), int(destination), str(error), str(status))
        except (ValueError, TypeError, RecursionError):
            raise refused from None
        # PostgreSQL's text holds no NUL: refused here rather than failing in the query.
        if any(
            "\x00" in part for part in (cause.kind, cause.step, cause.error_class, cause.status)
        ):
            raise refused
        return cause

    def condition(self) -> Q:
        """The cases of this cause, over `with_cause`'s annotations."""
        return Q(
            kind=self.kind,
            c_step=self.step,
            c_destination=self.destination_id,
            c_error=self.error_class,
            c_status=self.status,
        )

    @classmethod
    def of_hold(cls, hold: CauseHold) -> Cause:
        return cls(hold.kind, hold.step, hold.destination_id, hold.error_class, hold.status)


def cause_words(cause: Cause) -> str:
    """A cause as the queue names it: "Refused: it did not accept the
    details that were sent (Create the enquiry in the CRM)"; its codes stay technical."""
    why = why_words({"reply": cause.status, "error_class": cause.error_class})
    words = kind_label(cause.kind) + (f": {why}" if why else "")
    return f"{words} ({step_label(cause.step)})"


# The category a group's decision starts on: a group of duplicates was sent twice;
# any other cause shared by many cases is most often one that will not be fixed.
SENT_TWICE_KINDS = ("suspected_duplicate", "duplicate_held", "duplicate_rule", "recon_duplicate")


def group_decision_defaults(group: dict[str, Any]) -> None:
    """Fills in `group`'s label and the decision its page starts on: a category and a
    reason naming the cause, so that one key press decides (the reviewer may change
    either first)."""
    cause = group["cause"]
    group["label"] = cause_words(cause)
    group["preset"] = "duplicate_submission" if cause.kind in SENT_TWICE_KINDS else "not_fixable"
    group["note"] = f"the same cause for all {group['count']}: {group['label']}"


def case_cause(case: ReviewCase) -> tuple[Cause, int] | None:
    """`case`'s cause and how many open cases share it (itself included); None for a
    case without a step, which no group holds."""
    row = (
        with_cause(ReviewCase.objects.filter(pk=case.pk, operation__isnull=False))
        .values(*COMPONENTS)
        .first()
    )
    if row is None or row["c_destination"] is None:
        return None
    cause = Cause(row["kind"], row["c_step"], row["c_destination"], row["c_error"], row["c_status"])
    open_cases = with_cause(ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES))
    return cause, open_cases.filter(cause.condition()).count()


def holds_in_force(*, now: datetime | None = None) -> list[CauseHold]:
    return list(CauseHold.objects.filter(until__gt=now or timezone.now()).order_by("created_at"))


def without_held(cases: QuerySet[ReviewCase], holds: list[CauseHold]) -> QuerySet[ReviewCase]:
    """`cases` without those a hold in force attaches to its group (opened after it)."""
    if not holds:
        return cases
    held = Q()
    for hold in holds:
        held |= Cause.of_hold(hold).condition() & Q(created_at__gt=hold.created_at)
    return with_cause(cases).exclude(held)


# Groups are looked for among this many of the oldest open cases matching the queue's
# filter: one GROUP BY over at most that many rows, at 100,000 open cases as at 100.
GROUP_SCAN = 5000


def cause_groups(cases: QuerySet[ReviewCase], *, holds: list[CauseHold]) -> list[dict[str, Any]]:
    """The causes shared by two or more of `cases` (open ones with a step), largest
    first: their count, first and last seen, and the hold in force on each with how
    many cases it holds back (a held cause is listed even when only those remain)."""
    scanned = cases.filter(operation__isnull=False).order_by("created_at", "id")
    rows = (
        with_cause(ReviewCase.objects.filter(pk__in=scanned.values("pk")[:GROUP_SCAN]))
        .order_by()
        .values(*COMPONENTS)
        .annotate(count=Count("id"), first=Min("created_at"), last=Max("created_at"))
        .filter(count__gte=2)
        .order_by("-count", "first")[:GROUPS_SHOWN]
    )
    groups: dict[Cause, dict[str, Any]] = {}
    for row in rows:
        cause = Cause(
            row["kind"], row["c_step"], row["c_destination"], row["c_error"], row["c_status"]
        )
        groups[cause] = {"cause": cause, "token": cause.token(), "hold": None, **row}
    for hold in holds:
        cause = Cause.of_hold(hold)
        waiting = with_cause(cases).filter(cause.condition(), created_at__gt=hold.created_at)
        held = waiting.count()
        if cause not in groups and not held:
            continue
        group = groups.setdefault(
            cause,
            {"cause": cause, "token": cause.token(), "count": held, "first": None, "last": None},
        )
        group.update(hold=hold, held_count=held)
    return list(groups.values())


def cause_case_ids(
    cause: Cause, *, seen_until: datetime, since: datetime | None = None
) -> list[int]:
    """The open cases of `cause` opened up to `seen_until` (and after `since`), oldest first."""
    cases = with_cause(ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES))
    cases = cases.filter(cause.condition(), created_at__lte=seen_until)
    if since is not None:
        cases = cases.filter(created_at__gt=since)
    return list(cases.order_by("created_at", "id").values_list("pk", flat=True)[:1000])


# Moments a group's page can have been drawn at: anything else was not typed by the page.
EARLIEST_MOMENT = datetime(2000, 1, 1, tzinfo=UTC)


class MomentInvalidError(CaseActionRefusedError):
    """A moment sent with a group's decision that is not a real one (a 400: the page
    never sends it)."""


def seen_moment(value: str) -> datetime:
    """The aware moment `value` names (never later than now), or MomentInvalidError:
    checked here, not by the database, which would refuse it with an error (and the
    statement in its log) only after the query was sent."""
    try:
        moment = parse_datetime(value or "")
        if moment is not None and moment.tzinfo is not None:
            moment.astimezone(UTC)  # a displacement past the calendar's ends overflows
    except (ValueError, OverflowError):
        moment = None
    if moment is None or moment.tzinfo is None or moment < EARLIEST_MOMENT:
        raise MomentInvalidError(
            f"{str(value)[:40]!r} is not a valid moment (an ISO 8601 date and time with "
            "its offset, after 2000); open the queue again."
        )
    return min(moment, timezone.now())


@dataclass(frozen=True)
class GroupClosed:
    closed: list[int]
    refused: list[tuple[int, str]]
    hold: CauseHold | None


def cause_close(
    *,
    cause: Cause,
    seen_until: datetime,
    actor: User,
    resolution_code: str,
    reason: str,
    hold_hours: int = 0,
    since: datetime | None = None,
) -> GroupClosed:
    """Closes every open case of `cause` the reviewer saw, each by `case_close` (its
    guards, its own audit entry), and holds the cause for `hold_hours` (audited as
    `cause_held`, naming the cases closed)."""
    if resolution_code not in RESOLUTION_CODES:
        raise CaseActionRefusedError(f"Unknown resolution code {resolution_code!r}.")
    if hold_hours not in HOLD_CHOICES:
        raise CaseActionRefusedError("Hold a cause for 4 or 24 hours, or not at all.")
    ids = cause_case_ids(cause, seen_until=seen_until, since=since)
    result = cases_settle_many(
        case_ids=ids, actor=actor, decision="close", reason=reason, resolution_code=resolution_code
    )
    hold = None
    if hold_hours:
        hold = cause_hold(
            cause=cause,
            actor=actor,
            hours=hold_hours,
            reason=reason,
            resolution_code=resolution_code,
            closed=result.settled,
        )
    return GroupClosed(closed=result.settled, refused=result.refused, hold=hold)


def cause_hold(
    *, cause: Cause, actor: User, hours: int, reason: str, resolution_code: str, closed: list[int]
) -> CauseHold:
    now = timezone.now()
    with transaction.atomic():
        hold = CauseHold.objects.create(
            kind=cause.kind,
            step=cause.step,
            destination_id=cause.destination_id,
            error_class=cause.error_class,
            status=cause.status,
            resolution_code=resolution_code,
            reason=reason,
            created_by=actor,
            until=now + timedelta(hours=hours),
        )
        audit_record(
            action="cause_held",
            actor=actor,
            reason=reason,
            details={"hold": hold.pk, "hours": hours, "cause": cause.token(), "closed": closed},
        )
    return hold


def cause_hold_stop(*, hold_id: int, actor: User, reason: str) -> CauseHold:
    """Ends a hold now: its cases are listed one by one again."""
    now = timezone.now()
    with transaction.atomic():
        hold = CauseHold.objects.select_for_update().get(pk=hold_id)
        if hold.until <= now:
            raise CaseActionRefusedError("That hold has ended already.")
        CauseHold.objects.filter(pk=hold.pk).update(until=now)
        audit_record(
            action="cause_hold_stopped",
            actor=actor,
            reason=reason,
            details={"hold": hold.pk, "cause": Cause.of_hold(hold).token()},
        )
    hold.refresh_from_db()
    return hold
