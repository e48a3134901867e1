"""Read-only queries of the console. Views render what these return; nothing here writes.

The queue pages by keyset (the last row's sort key, not an OFFSET), so page 2000
costs what page 1 costs; default sorts follow the partial index
`reviewcase_open_queue_idx` on `(created_at, id)` of open cases.
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.core.exceptions import BadRequest
from django.db import connection
from django.db.models import (
    CharField,
    Count,
    DateTimeField,
    IntegerField,
    Model,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import TruncDay, TruncHour
from django.http import QueryDict
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from idempotency_core.execution.budget import pauses_in_force
from idempotency_core.execution.destinations import capabilities_of
from idempotency_core.models import (
    Attempt,
    AuditEntry,
    Delivery,
    Destination,
    DestinationBudget,
    Event,
    Operation,
    ReconciliationFinding,
    ReconciliationRun,
    ReviewCase,
)
from idempotency_core.review.comparison import FetchedRecord
from idempotency_core.review.contact import REVEAL_ACTION, REVEAL_WINDOW
from idempotency_core.review.replay import (
    replay_facts,
    replay_plan_for,
    replay_proven_safe,
    replay_refusal,
)
from review_console.causes import holds_in_force, without_held
from review_console.filters import AuditFilter, CaseFilter
from review_console.glossary import kind_label
from review_console.masking import contact_for, record_for
from review_console.routing import failures_summary, routed_first

PAGE_SIZE = 50
COUNT_CAP = 10_000

# name -> (label, ordering fields). Each sort ends in a unique column so the
# keyset is total; all fields of one sort share a direction.
SORTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "oldest": ("Oldest first", ("created_at", "id")),
    "newest": ("Newest first", ("-created_at", "-id")),
    "kind": ("Kind, then oldest", ("kind", "created_at", "id")),
}
DEFAULT_SORT = "oldest"


def case_queryset() -> QuerySet[ReviewCase]:
    return ReviewCase.objects.select_related(
        "event__source", "operation__destination", "owner"
    ).defer("event__payload", "evidence")


def queue_customers(cases: list[ReviewCase], *, unmasked: bool) -> None:
    """Sets `case.customer` (name, email) on each queue row, masked unless `unmasked`:
    two JSON keys of the page's events, read by primary key in one query (the queue
    query itself never touches the payloads)."""
    contact = KeyTransform("contact", "payload")
    found = {
        pk: {"name": name or "", "email": email or ""}
        for pk, name, email in Event.objects.filter(
            pk__in={c.event_id for c in cases if c.event_id}
        ).values_list("pk", KeyTextTransform("name", contact), KeyTextTransform("email", contact))
    }
    for case in cases:
        details = {"contact": found.get(case.event_id, {})}
        case.customer = contact_for(details, unmasked=unmasked)  # type: ignore[attr-defined]


# A chip's count stops here ("1000+"): each count then reads at most this many rows
# of the open-case indexes, whatever the other filters, at 100k open cases as at 100.
CHIP_COUNT_CAP = 1000


def queue_chips(params: QueryDict, *, request: Any) -> dict[str, list[dict[str, Any]]]:
    """The queue's filter chips: links that set one filter, each with how many cases it
    would show given the other filters, counted up to CHIP_COUNT_CAP (`_capped_counts`).
    Status chips carry no count: counting every settled case ever costs more than it
    tells."""
    user = getattr(request, "user", None)
    by_kind = _without(params, "kind", request)
    kind_counts = _capped_counts(
        [(value, by_kind.filter(kind=value)) for value in ReviewCase.Kind.values]
    )
    by_owner = _without(params, "owner", request)
    owner_counts = _capped_counts(
        [
            ("mine", by_owner.filter(owner=user) if user else by_owner.none()),
            ("nobody", by_owner.filter(owner__isnull=True)),
        ]
    )
    owners = {k: owner_counts.get(k, 0) for k in ("mine", "nobody")}
    kinds, current_kinds = [], params.getlist("kind")
    for value in ReviewCase.Kind.values:
        if kind_counts.get(value) or value in current_kinds:
            kinds.append(_chip(params, "kind", value, kind_label(value), kind_counts.get(value, 0)))
    statuses = [
        _chip(params, "status", "", "Open and in progress", None),
        *(
            _chip(params, "status", value, label, None)
            for value, label in ReviewCase.Status.choices
            if value not in ReviewCase.OPEN_STATUSES
        ),
    ]
    return {
        "kind": [_all_kinds(params, kind_counts), *kinds],
        "owner": [
            _chip(params, "owner", "", "Anyone", None),
            _chip(params, "owner", "me", "Mine", owners["mine"]),
            _chip(params, "owner", "nobody", "No owner", owners["nobody"]),
        ],
        "status": statuses,
    }


def _all_kinds(params: QueryDict, kind_counts: dict[str, int]) -> dict[str, Any]:
    """The "All kinds" chip: the sum of the kinds' counts, "N+" when one was capped."""
    chip = _chip(params, "kind", "", "All kinds", None)
    chip["count"] = sum(min(n, CHIP_COUNT_CAP) for n in kind_counts.values())
    chip["capped"] = any(n > CHIP_COUNT_CAP for n in kind_counts.values())
    return chip


def _capped_counts(parts: list[tuple[str, QuerySet[ReviewCase]]]) -> dict[str, int]:
    """How many rows each queryset has, up to CHIP_COUNT_CAP + 1 (shown "1000+"): one
    UNION ALL of LIMITed selects counted by one GROUP BY: one round trip, at most that
    many index rows read per part."""
    selects = [
        qs.order_by()
        .annotate(chip=Value(name))
        .values_list("chip", flat=True)[: CHIP_COUNT_CAP + 1]
        for name, qs in parts
    ]
    if not selects:
        return {}
    union = selects[0].union(*selects[1:], all=True)
    if union.query.is_empty():
        return {}
    sql, params = union.query.sql_with_params()
    with connection.cursor() as cursor:
        # Counted in PostgreSQL: only one row per chip comes back, not 1,001.
        cursor.execute(f"SELECT chip, count(*) FROM ({sql}) AS capped GROUP BY chip", params)
        return dict(cursor.fetchall())


def _without(params: QueryDict, name: str, request: Any) -> QuerySet[ReviewCase]:
    """The queue's filtered cases with filter `name` left out, for counting."""
    rest = params.copy()
    rest.pop(name, None)
    filterset = case_filterset(rest, request=request)
    if not filterset.is_valid():
        return ReviewCase.objects.none()
    return filterset.qs.order_by()


def _chip(
    params: QueryDict, name: str, value: str, label: str, count: int | None
) -> dict[str, Any]:
    chosen = params.getlist(name)
    target = params.copy()
    for key in ("after", "before", name):
        target.pop(key, None)
    if value:
        target.setlist(name, [value])
    capped = count is not None and count > CHIP_COUNT_CAP
    return {
        "label": label,
        "count": CHIP_COUNT_CAP if capped else count,
        "capped": capped,
        "query": target.urlencode(),
        "active": chosen == [value] if value else not chosen,
    }


def next_case_candidates(user: Any = None) -> QuerySet[ReviewCase]:
    """The cases "Next case" may take (review/cases.py `case_take_next` keeps only the
    open ones nobody owns): not those a held cause keeps in its group (causes.py); with
    `user`, those routed to them first (routing.py)."""
    cases = without_held(ReviewCase.objects.all(), holds_in_force())
    return cases if user is None else routed_first(cases, user)


def next_case_waiting() -> QuerySet[ReviewCase]:
    """What "Next case" would give someone: the dashboard's "N cases wait" counts these."""
    Status = ReviewCase.Status
    return next_case_candidates().filter(status=Status.OPEN, owner__isnull=True)


def case_filterset(params: QueryDict, *, request: Any = None) -> CaseFilter:
    """The queue's FilterSet; with no status chosen it shows open work only."""
    params = params.copy()
    if not params.getlist("status"):
        params.setlist("status", list(ReviewCase.OPEN_STATUSES))
    return CaseFilter(params, queryset=case_queryset(), request=request)


@dataclass
class KeysetPage:
    items: list[Any]
    next_cursor: str = ""
    prev_cursor: str = ""
    total: int = 0
    total_capped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _encode(values: list[Any]) -> str:
    raw = json.dumps([v.isoformat() if isinstance(v, datetime) else v for v in values])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


class InvalidCursorError(BadRequest):
    """A page link that no page printed (edited, truncated or forged): answered 400
    by Django's handler, never a guess at which page was meant."""


# A cursor this module writes is under 200 characters; anything far longer was not.
_CURSOR_MAX_LENGTH = 1000
_BIGINT = 2**63


def _decode(cursor: str, fields: tuple[str, ...], model: type[Model]) -> list[Any]:
    """The sort key a cursor carries, each value checked against its model field's type
    before it reaches a query: a value PostgreSQL or Python's dates cannot hold would
    otherwise fail inside the query (500) instead of being refused (400)."""
    refused = InvalidCursorError("This page link is not valid; start again from the first page.")
    if len(cursor) > _CURSOR_MAX_LENGTH:
        raise refused
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(
            base64.urlsafe_b64decode(padded.encode()), parse_constant=_refuse_constant
        )
    except (ValueError, TypeError, RecursionError):
        raise refused from None
    if not isinstance(values, list) or len(values) != len(fields):
        raise refused
    try:
        return [
            _cursor_value(model._meta.get_field(name.lstrip("-")), value)
            for name, value in zip(fields, values, strict=True)
        ]
    except (ValueError, TypeError):
        raise refused from None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a sort key")  # NaN, Infinity: json.loads accepts them


def _cursor_value(model_field: Any, value: Any) -> Any:
    """`value` as `model_field` stores it, or ValueError."""
    if isinstance(model_field, DateTimeField):
        parsed = parse_datetime(value) if isinstance(value, str) else None  # may raise
        if parsed is None or parsed.tzinfo is None:
            raise ValueError("not an aware timestamp")
        return parsed
    if isinstance(model_field, IntegerField):  # AutoField and BigAutoField included
        # bool is an int to Python, not to a cursor; bigint is PostgreSQL's widest.
        if type(value) is not int or not -_BIGINT <= value < _BIGINT:
            raise ValueError("not an integer the column holds")
        return value
    if isinstance(model_field, CharField):
        if not isinstance(value, str) or len(value) > (model_field.max_length or 0):
            raise ValueError("not a text the column holds")
        value.encode()  # a lone surrogate raises UnicodeEncodeError, a ValueError
        if "\x00" in value:
            raise ValueError("PostgreSQL text cannot hold NUL")
        return value
    raise ValueError(f"{model_field.name} cannot be a sort key")


def _beyond(fields: tuple[str, ...], values: list[Any], *, forward: bool) -> Q:
    """Rows strictly after (or before) `values` in the order of `fields`.

    Expanded as (a > x) OR (a = x AND b > y) ..., and AND-ed with `a >= x` so
    that PostgreSQL seeks the index to the cursor instead of filtering from the
    first row.
    """
    descending = fields[0].startswith("-")
    greater = forward != descending
    op = "gt" if greater else "lt"
    names = [f.lstrip("-") for f in fields]
    condition = Q()
    for i, name in enumerate(names):
        term = Q(**{f"{name}__{op}": values[i]})
        for j in range(i):
            term &= Q(**{names[j]: values[j]})
        condition |= term
    seek = Q(**{f"{names[0]}__{op}e": values[0]})
    return seek & condition


def keyset_page(
    queryset: QuerySet,
    *,
    fields: tuple[str, ...],
    after: str = "",
    before: str = "",
    size: int = PAGE_SIZE,
    count_cap: int = COUNT_CAP,
) -> KeysetPage:
    names = [f.lstrip("-") for f in fields]
    cursor = before or after
    cursor_values = _decode(cursor, fields, queryset.model) if cursor else None
    backwards = bool(before)
    qs = queryset
    if cursor_values is not None:
        qs = qs.filter(_beyond(fields, cursor_values, forward=not backwards))
    if backwards:
        reverse = [f[1:] if f.startswith("-") else f"-{f}" for f in fields]
        rows = list(qs.order_by(*reverse)[: size + 1])
        more_before = len(rows) > size
        rows = list(reversed(rows[:size]))
        has_prev, has_next = more_before, True
    else:
        rows = list(qs.order_by(*fields)[: size + 1])
        has_next = len(rows) > size
        rows = rows[:size]
        has_prev = cursor_values is not None
    # A capped count: "10,000+" tells a reviewer as much as an exact figure and
    # stops counting a six-figure queue on every page view.
    total = queryset.order_by().values("pk")[: count_cap + 1].count()
    page = KeysetPage(items=rows, total=min(total, count_cap), total_capped=total > count_cap)
    if rows and has_next:
        page.next_cursor = _encode([getattr(rows[-1], n) for n in names])
    if rows and has_prev:
        page.prev_cursor = _encode([getattr(rows[0], n) for n in names])
    return page


# -- dashboard ----------------------------------------------------------------

AGE_BUCKETS: tuple[tuple[str, timedelta | None], ...] = (
    ("under 1 h", timedelta(hours=1)),
    ("1 to 24 h", timedelta(hours=24)),
    ("1 to 7 days", timedelta(days=7)),
    ("over 7 days", None),
)


def dashboard_summary(*, now: datetime | None = None) -> dict[str, Any]:
    """The dashboard's figures; the viewer's own cases come from `my_cases`."""
    now = now or timezone.now()
    open_cases = ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES)
    buckets: dict[str, Any] = {}
    lower: timedelta | None = None
    for index, (_label, upper) in enumerate(AGE_BUCKETS):
        condition = Q()
        if upper is not None:
            condition &= Q(created_at__gt=now - upper)
        if lower is not None:
            condition &= Q(created_at__lte=now - lower)
        buckets[f"age_{index}"] = Count("id", filter=condition)
        lower = upper
    by_kind: list[dict[str, Any]] = [
        dict(row)
        for row in open_cases.values("kind")
        .annotate(total=Count("id"), unowned=Count("id", filter=Q(owner__isnull=True)), **buckets)
        .order_by("-total")
    ]
    labels = dict(ReviewCase.Kind.choices)
    for row in by_kind:
        row["label"] = labels.get(row["kind"], row["kind"])
        row["ages"] = [row[f"age_{i}"] for i in range(len(AGE_BUCKETS))]
    oldest = open_cases.select_related("event", "operation").order_by("created_at", "id").first()
    history = dashboard_history(now=now)
    operations = history["operations"]
    return {
        "open_total": sum(r["total"] for r in by_kind),
        "unowned_total": sum(r["unowned"] for r in by_kind),
        "by_kind": by_kind,
        "age_labels": [label for label, _ in AGE_BUCKETS],
        "oldest": oldest,
        "operations": [
            (value, label, operations.get(value, 0)) for value, label in Operation.Status.choices
        ],
        "succeeded_estimated": operations.get("estimated", False),
        "held_total": Operation.objects.filter(held_by__isnull=False).count(),
        "throughput": history["throughput"],
        "trend": history["trend"],
        "settle": history["settle"],
        "history_as_of": history["as_of"],
        "ages_chart": age_chart(by_kind),
        "reconciliation": last_reconciliation(),
        "pauses": destination_pauses(now=now),
        "waiting_total": next_case_waiting().count(),
        "oldest_waiting": next_case_waiting().order_by("created_at", "id").first(),
        **failures_summary(now=now),
    }


# What a pause means to someone who did not configure the destination.
PAUSE_WORDS: dict[str, str] = {
    DestinationBudget.Pause.WINDOW: "it asked Onefold to slow down (its rate limit)",
    DestinationBudget.Pause.DAILY: "its requests for the day are used up (its daily limit)",
    DestinationBudget.Pause.REFUSED: (
        "its settings no longer allow Onefold to avoid duplicates there, so nothing is sent "
        "until they are corrected (an administrator should run check_destinations)"
    ),
}


def destination_pauses(*, now: datetime) -> list[dict[str, Any]]:
    """The destinations whose work waits now, why, until when, and how many steps wait:
    one line each on the dashboard, however many submissions are behind it."""
    pauses = []
    for budget in pauses_in_force():
        waiting = Operation.objects.filter(
            destination_id=budget.destination_id, status__in=Operation.CLAIMABLE
        ).exclude(next_attempt_at__isnull=True)
        pauses.append(
            {
                "destination": budget.destination.name,
                "until": budget.paused_until,
                "since": budget.paused_at,
                "why": PAUSE_WORDS.get(budget.pause_kind, budget.pause_kind),
                "detail": budget.pause_reason,
                "waiting": waiting.count(),
            }
        )
    return pauses


# How long the dashboard's counted history (operations by status, attempts per hour,
# cases per day, time to settle) is reused: these scan a day's attempts and a
# month's cases: about 0.5 s together at 1M events.
DASHBOARD_HISTORY_SECONDS = 60


def dashboard_history(*, now: datetime) -> dict[str, Any]:
    """The dashboard's counted figures, computed at most once a minute per process and
    again at once when a case was opened or a decision audited (a settle, a lookup):
    the cache key carries the minute and the newest id of each (two index probes).
    Not attempts: at a busy hour one starts every second and the cache would never
    serve; the attempts chart and operation counts may be a minute old."""
    newest = [
        model.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        for model in (ReviewCase, AuditEntry)
    ]
    key = f"console:dashboard:{now:%Y%m%d%H%M}:{':'.join(map(str, newest))}"
    history = cache.get(key)
    if history is None:
        history = {
            "operations": operation_counts(),
            "throughput": throughput_24h(now=now),
            **dict(zip(("trend", "settle"), case_trend(now=now), strict=True)),
            "as_of": now,
        }
        cache.set(key, history, DASHBOARD_HISTORY_SECONDS)
    return history


# Above this many operations (the planner's estimate), "succeeded" is that estimate
# less the exact others: counting a million succeeded rows takes about a third of a second.
EXACT_SUCCEEDED_UP_TO = 100_000


def operation_counts() -> dict[str, Any]:
    """Operations per status: every status but "succeeded" counted exactly through the
    status index (they are the few that need work); "succeeded" exactly on a small
    table, else from PostgreSQL's row estimate (`estimated` says so)."""
    Status = Operation.Status
    others = [value for value in Status.values if value != Status.SUCCEEDED]
    counts: dict[str, Any] = dict(
        Operation.objects.filter(status__in=others)
        .values_list("status")
        .annotate(n=Count("id"))
        .order_by()
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
            [Operation._meta.db_table],
        )
        estimate = int(cursor.fetchone()[0])
    if estimate <= EXACT_SUCCEEDED_UP_TO:
        counts[Status.SUCCEEDED] = Operation.objects.filter(status=Status.SUCCEEDED).count()
    else:
        counts[Status.SUCCEEDED] = max(estimate - sum(counts.values()), 0)
        counts["estimated"] = True
    return counts


# -- dashboard: trends, time to settle, reconciliation, my cases ------------------

TREND_DAYS = 30
MY_CASES_SHOWN = 10


def case_trend(*, now: datetime, days: int = TREND_DAYS) -> tuple[list[dict[str, Any]], dict]:
    """Cases opened and settled (resolved or closed) per UTC day, the last `days` days
    with today, oldest first; and the time to settle of those settled in them. Two
    bounded range scans: one by created_at, one by resolved_at that also gives the
    median (`_settled_by_day`)."""
    first = (now - timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    opened = dict(
        ReviewCase.objects.order_by()
        .filter(created_at__gte=first)
        .annotate(day=TruncDay("created_at"))
        .values_list("day")
        .annotate(n=Count("id"))
    )
    settled, settle = _settled_by_day(first, days)
    rows = []
    for i in range(days):
        day = first + timedelta(days=i)
        rows.append({"day": day, "opened": opened.get(day, 0), "settled": settled.get(day, 0)})
    peak = max((max(r["opened"], r["settled"]) for r in rows), default=0) or 1
    for i, row in enumerate(rows):
        # Two bars per day in a 360 x 60 box: opened (left), settled (right).
        row["x"] = i * 12
        row["opened_h"] = row["opened"] / peak * 60
        row["settled_h"] = row["settled"] / peak * 60
        row["opened_y"] = 60 - row["opened_h"]
        row["settled_y"] = 60 - row["settled_h"]
    return rows, settle


def _settled_by_day(first: datetime, days: int) -> tuple[dict[datetime, int], dict[str, Any]]:
    """Cases settled per UTC day since `first`, and over all those days (ROLLUP's total
    row, day NULL) their count and median time from opening to settling."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT date_trunc('day', resolved_at, 'UTC') AS day, count(*), "
            "percentile_cont(0.5) WITHIN GROUP "
            "(ORDER BY extract(epoch FROM resolved_at - created_at)) "
            f"FROM {ReviewCase._meta.db_table} WHERE resolved_at >= %s GROUP BY ROLLUP (1)",
            [first],
        )
        rows = cursor.fetchall()
    per_day = {day: count for day, count, _ in rows if day is not None}
    count, median = next(((c, m) for day, c, m in rows if day is None), (0, None))
    seconds = float(median) if median is not None else None
    settle = {
        "median": timedelta(seconds=seconds) if seconds is not None else None,
        "median_words": _duration_words(seconds) if seconds is not None else "",
        "count": count,
        "days": days,
    }
    return per_day, settle


def _duration_words(seconds: float) -> str:
    """A duration as a reviewer says it: "40 min", "5.5 h", "3.2 days"."""
    if seconds < 3600:
        return f"{max(round(seconds / 60), 1)} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def last_reconciliation() -> dict[str, Any] | None:
    """The newest reconciliation run with its findings by kind (in words), or None."""
    run = (
        ReconciliationRun.objects.select_related("destination", "source")
        .order_by("-started_at", "-pk")
        .first()
    )
    if run is None:
        return None
    labels = dict(ReconciliationFinding.Kind.choices)
    findings = [
        {"label": labels.get(kind, kind), "total": total, "new": run.findings_new.get(kind, 0)}
        for kind, total in sorted((run.findings_total or {}).items())
        if total
    ]
    return {"run": run, "findings": findings, "total": sum(f["total"] for f in findings)}


def my_cases(user: Any) -> dict[str, Any]:
    """The viewer's open cases, oldest first (the first few), and how many (capped)."""
    if user is None or not user.is_authenticated:
        return {"items": [], "count": 0, "capped": False}
    mine = ReviewCase.objects.filter(owner=user, status__in=ReviewCase.OPEN_STATUSES)
    count = mine.order_by().values("pk")[: COUNT_CAP + 1].count()
    items = list(
        mine.select_related("operation")
        .defer("evidence")
        .order_by("created_at", "id")[:MY_CASES_SHOWN]
    )
    return {"items": items, "count": min(count, COUNT_CAP), "capped": count > COUNT_CAP}


def age_chart(by_kind: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Open cases per age band (summed over kinds), as horizontal bars of a 300-wide box."""
    totals = [sum(row["ages"][i] for row in by_kind) for i in range(len(AGE_BUCKETS))]
    peak = max(totals, default=0) or 1
    return [
        {"label": label, "count": n, "y": i * 22, "width": n / peak * 200}
        for i, ((label, _), n) in enumerate(zip(AGE_BUCKETS, totals, strict=True))
    ]


def throughput_24h(*, now: datetime) -> list[dict[str, Any]]:
    """Attempts per hour over the last 24 h, per destination: (succeeded, failed)."""
    start = (now - timedelta(hours=23)).replace(minute=0, second=0, microsecond=0)
    rows = (
        Attempt.objects.filter(started_at__gte=start, outcome__isnull=False)
        .annotate(hour=TruncHour("started_at"))
        .values("operation__destination__name", "operation__destination__kind", "hour")
        .annotate(
            ok=Count("id", filter=Q(outcome=Attempt.Outcome.SUCCEEDED)),
            # A skipped step called nobody: neither a success nor a failure.
            failed=Count(
                "id", filter=~Q(outcome__in=[Attempt.Outcome.SUCCEEDED, Attempt.Outcome.SKIPPED])
            ),
        )
    )
    hours = [start + timedelta(hours=i) for i in range(24)]
    series: dict[str, dict[datetime, tuple[int, int]]] = defaultdict(dict)
    kinds: dict[str, str] = {}
    for row in rows:
        series[row["operation__destination__name"]][row["hour"]] = (row["ok"], row["failed"])
        kinds[row["operation__destination__name"]] = row["operation__destination__kind"]
    result = []
    for name in sorted(series):
        points = [series[name].get(h, (0, 0)) for h in hours]
        ok = sum(p[0] for p in points)
        failed = sum(p[1] for p in points)
        peak = max((a + b for a, b in points), default=0) or 1
        bars = []
        for i, (h, (a, b)) in enumerate(zip(hours, points, strict=True)):
            total_h = (a + b) / peak * 60
            failed_h = b / peak * 60
            bars.append(
                {
                    "x": i * 12,
                    "hour": h,
                    "ok": a,
                    "failed": b,
                    "ok_y": 60 - total_h,
                    "ok_h": total_h - failed_h,
                    "failed_y": 60 - failed_h,
                    "failed_h": failed_h,
                }
            )
        result.append(
            {
                "name": name,
                # What a person calls it; its configured name is a technical detail.
                "label": "The mail service"
                if kinds[name] in Destination.EMAIL_KINDS
                else "The CRM",
                "attempts": ok + failed,
                "succeeded": ok,
                "failed": failed,
                "failure_rate": (failed / (ok + failed) * 100) if ok + failed else 0.0,
                "bars": bars,
                "peak": peak,
            }
        )
    return result


# -- case page ----------------------------------------------------------------


def case_get(case_id: int) -> ReviewCase:
    return ReviewCase.objects.select_related(
        "event__source", "operation__destination", "owner"
    ).get(pk=case_id)


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


def related_cases(case: ReviewCase, audit: list[AuditEntry]) -> list[tuple[ReviewCase, str]]:
    """Cases linked to this one, each with how, both ways: the same submission; a
    merge this case asked for and the case its operation opened (and back); an email
    sent again and the case of the new send (and back)."""
    links: dict[int, str] = {}
    if case.event_id is not None:
        for pk in ReviewCase.objects.filter(event_id=case.event_id).values_list("pk", flat=True):
            links[pk] = "Same submission"
    # Operations this case's decisions created (a merge, a send again): their cases.
    spawned = {
        e.operation_id
        for e in audit
        if e.case_id == case.pk
        and e.operation_id is not None
        and e.operation_id != case.operation_id
    }
    for pk in ReviewCase.objects.filter(operation_id__in=spawned).values_list("pk", flat=True):
        links[pk] = "Opened by an action taken on this case (a merge, an email sent again)"
    # The case whose decision created this case's operation.
    arguments = (case.operation.arguments or {}) if case.operation is not None else {}
    parents = [arguments.get("case_id"), *(arguments.get("settles_case_ids") or [])]
    for pk in ReviewCase.objects.filter(pk__in=[p for p in parents if p]).values_list(
        "pk", flat=True
    ):
        links[pk] = "This case's step was asked for on that case"
    links.pop(case.pk, None)
    related = ReviewCase.objects.filter(pk__in=list(links)).order_by("created_at", "pk")
    return [(other, links[other.pk]) for other in related]


def case_audit(case: ReviewCase) -> list[AuditEntry]:
    condition = Q(case=case)
    if case.operation_id is not None:
        condition |= Q(operation_id=case.operation_id)
    return list(AuditEntry.objects.filter(condition).select_related("actor").order_by("at", "pk"))


# -- contact details revealed (review/contact.py) -------------------------------------


def contact_revealed_to(user: Any, event: Event | None) -> AuditEntry | None:
    """The reveal of `event`'s contact details to `user` still in force, if any: one
    probe of the audit trail's event index."""
    if event is None or not getattr(user, "is_authenticated", False):
        return None
    return (
        AuditEntry.objects.filter(
            event=event,
            action=REVEAL_ACTION,
            actor=user,
            at__gte=timezone.now() - REVEAL_WINDOW,
        )
        .order_by("-at")
        .first()
    )


def revealed_event_ids(user: Any, *, limit: int = 1000) -> list[Any]:
    """The submissions whose contact details are revealed to `user` now (newest first)."""
    if not getattr(user, "is_authenticated", False):
        return []
    return list(
        AuditEntry.objects.filter(
            action=REVEAL_ACTION, actor=user, at__gte=timezone.now() - REVEAL_WINDOW
        )
        .exclude(event__isnull=True)
        .order_by("-at")
        .values_list("event_id", flat=True)[:limit]
    )


def recent_reveals(*, limit: int = 10) -> list[AuditEntry]:
    """The last reveals, for the administrators' card on the dashboard."""
    return list(
        AuditEntry.objects.filter(action=REVEAL_ACTION)
        .select_related("actor", "case")
        .order_by("-at", "-pk")[:limit]
    )


# The decisions that settle a case, as audited: who "decided" it, for the case page.
_SETTLING = frozenset(
    {
        "case_resolved",
        "case_closed",
        "not_duplicate",
        "duplicate_released",
        "duplicate_linked",
        "duplicate_rule_linked",
        "email_receipt_confirmed",
        "remapped",
        "case_settled_by_success",
        "merged",
    }
)


def settled_by(case: ReviewCase, audit: list[AuditEntry]) -> str:
    """Who settled the case: a person's name, "Onefold", or "" while it is open."""
    if case.status in ReviewCase.OPEN_STATUSES:
        return ""
    for index in range(len(audit) - 1, -1, -1):
        entry = audit[index]
        if entry.case_id == case.pk and entry.action in _SETTLING:
            # Onefold settles a case when what a person asked for works (a replay, a
            # merge, a send again): the decision was that person's.
            asker = entry.actor or _asked_by(case, audit[:index])
            if asker is None:
                return "Onefold"
            return asker.get_full_name().strip() or asker.get_username()
    return ""


def settled_note(case: ReviewCase, audit: list[AuditEntry]) -> str:
    """The settling person's note, shown beside who decided; "" when Onefold wrote it
    (its note is technical: under Technical details)."""
    for entry in reversed(audit):
        if entry.case_id == case.pk and entry.action in _SETTLING:
            return case.resolution_note if entry.actor is not None else ""
    return ""


_ASKED = frozenset(
    {"replay", "merge_requested", "email_send_again", "duplicate_rule_create_anyway"}
)


def _asked_by(case: ReviewCase, earlier: list[AuditEntry]) -> Any:
    """The person whose request (of `_ASKED`) last preceded Onefold's settling."""
    for entry in reversed(earlier):
        ours = entry.case_id == case.pk or (
            case.operation_id is not None and entry.operation_id == case.operation_id
        )
        if ours and entry.action in _ASKED and entry.actor is not None:
            return entry.actor
    return None


def audit_filterset(params: QueryDict) -> AuditFilter:
    return AuditFilter(
        params, queryset=AuditEntry.objects.select_related("case", "actor").order_by("-at")
    )


# -- duplicates -----------------------------------------------------------------

COMPARED_FIELDS = ("name", "email", "phone", "message")
COMPARED_LABELS = {
    "name": "Name",
    "email": "Email",
    "phone": "Phone",
    "message": "Message",
    "created_at": "Made in the CRM",
}
# What the record holds that is not the customer's (Onefold's reference, the CRM's own
# bookkeeping): under Technical details only.
_TECHNICAL_RECORD_KEYS = frozenset({"external_ref", "created_at", "updated_at", "merged_into"})
SAME, NEARLY, DIFFERENT = "same", "nearly", "differs"


def comparable(value: str) -> str:
    """A value as two people would compare it: spacing and capitals aside."""
    return " ".join(value.split()).casefold()


def compare_values(values: list[str]) -> str:
    """SAME, NEARLY ("the same apart from spacing or capitals") or DIFFERENT."""
    if len(set(values)) <= 1:
        return SAME
    return NEARLY if len({comparable(v) for v in values}) == 1 else DIFFERENT


def duplicate_comparison(
    case: ReviewCase, records: list[FetchedRecord], *, unmasked: bool
) -> dict[str, Any]:
    """The records (fetched by the review service `duplicate_records_fetch`) side by
    side, oldest first, masked for the viewer, each with the submission it came from.
    Each row says whether the values are the same, the same apart from spacing or
    capitals, or different, decided on the real values (masked, "Lena Tan" and "Lars
    Tell" both read "L. T."); a row empty on every side is left out. No network."""
    real = sorted(
        (r for r in records if r.record is not None),
        key=lambda r: str((r.record or {}).get("created_at") or ""),
    )
    present = [replace(r, record=record_for(r.record or {}, unmasked=unmasked)) for r in real]
    extra_keys = sorted(
        {k for r in real for k in ((r.record or {}).get("extra") or {})}
        - _TECHNICAL_RECORD_KEYS
        - set(COMPARED_FIELDS)
    )
    rows = []
    for name in (*COMPARED_FIELDS, *(f"extra.{k}" for k in extra_keys)):
        actual = [_field_text(r.record or {}, name) for r in real]
        if not any(actual):
            continue  # nothing on any side: no row (no "FIELDS {}")
        shown = [_field_text(c.record or {}, name) for c in present]
        times = [_as_moment(v) for v in shown]
        label = name.removeprefix("extra.").replace("_", " ").capitalize()
        rows.append(
            {
                "field": COMPARED_LABELS.get(name, label),
                "values": shown,
                # Timestamps (a form's "submitted_at") are shown as local, relative times.
                "times": times if all(t is not None for t in times) else None,
                "compared": compare_values(actual),
                "differs": compare_values(actual) == DIFFERENT,
            }
        )
    return {
        "records": records,
        "present": present,
        "made": [_made_at(r.record or {}) for r in present],
        "rows": rows,
        "problems": [r for r in records if r.record is None],
        "evidence_external_ref": (case.evidence or {}).get("external_ref", ""),
    }


def _made_at(record: dict[str, Any]) -> datetime | None:
    return _as_moment(record.get("created_at"))


def _as_moment(value: Any) -> datetime | None:
    """An aware ISO timestamp as a datetime, else None."""
    try:
        parsed = parse_datetime(value) if isinstance(value, str) and "T" in value else None
    except ValueError:
        return None
    return parsed if parsed is not None and parsed.tzinfo is not None else None


def _field_text(record: dict[str, Any], name: str) -> str:
    if name.startswith("extra."):
        value = (record.get("extra") or {}).get(name[6:], "")
    elif name == "phone":
        value = record.get("phone") or (record.get("extra") or {}).get("phone", "")
    else:
        value = record.get(name, "")
    if value in (None, {}, []):
        return ""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {v}" for k, v in value.items() if v not in (None, "", {}, []))
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


# -- replay ---------------------------------------------------------------------


def replay_preview(operation: Operation, *, destination_checked: bool = True) -> dict[str, Any]:
    """What the replay button would meet, in words, before anyone presses it.

    The same rule as the replay (`replay_refusal` over `replay_facts`), read
    without the row lock and from stored state only: the destination's
    capabilities come from its adapter's configuration, nothing is called.
    `operation_replay` checks again under the lock. `refusal` assumes the
    reviewer ticks "I checked the destination" where that is asked (`needs_check`).
    """
    destination = operation.destination
    # Read once for the page: for the sandbox each read is a request.
    capabilities = capabilities_of(destination)
    facts = replay_facts(operation, capabilities=capabilities)
    window = ""
    presented = operation.first_presented_at
    if capabilities.idempotency_keys and presented and capabilities.key_retention is not None:
        window = (
            f"{destination.name} remembers idempotency keys for {capabilities.key_retention}; "
            f"this key was first presented {presented:%Y-%m-%d %H:%M} UTC."
        )
    refusal = replay_refusal(facts, destination_checked=destination_checked)
    # What no step of the reviewer's on the case page (a lookup, the tick) can lift:
    # the case page disables its button only for this; the confirm page says `refusal`.
    blocked = replay_refusal(replace(facts, needs_check=False), destination_checked=True)
    return {
        "possible": refusal is None,
        "refusal": refusal or "",
        "blocked": blocked or "",
        "blocked_words": _blocked_words(facts) if blocked else "",
        "needs_check": facts.needs_check,
        "proven_safe": replay_proven_safe(facts),
        "can_lookup": facts.lookup_can_answer,
        "native_lookup": capabilities.lookup,
        "window": window,
    }


def _blocked_words(facts: Any) -> str:
    """Why trying again is not possible now, as the case page says it (the rule's own
    words, with the step's code and reference, are under Technical details)."""
    Status = Operation.Status
    by_status = {
        Status.SUCCEEDED: "it already worked.",
        Status.RUNNING: "it is running right now; wait a moment.",
        Status.PENDING: "it is already waiting to run.",
        Status.RETRY_SCHEDULED: "it is already waiting to run.",
        Status.CANCELLED: "it was cancelled.",
    }
    if facts.status in by_status:
        return by_status[facts.status]
    if facts.earlier_unfinished is not None:
        return "an earlier step has not worked yet; settle that one first."
    return "the details below say why."


def replay_steps(operation: Operation) -> list[dict[str, Any]]:
    """The replay page's preview: every step of the submission, in pipeline order, with
    what a replay of `operation` does to it (`replay_plan`, the engine's own rule) and
    the key it presents: each step's original operation key, never a new one."""
    return [
        {
            "step": planned.state.step,
            "key": planned.state.key,
            "effect": planned.effect,
            "replayed": planned.state.pk == operation.pk,
            "status": planned.state.status,
            "destination_ref": planned.state.destination_ref,
        }
        for planned in replay_plan_for(operation)
    ]
