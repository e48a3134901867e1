"""What the console's home counts: open cases by kind and age, paused destinations,
the trend of cases settled, the reviewer's own cases and recent reveals. Reads only."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db import connection
from django.db.models import (
    Count,
    Q,
)
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from idempotency_core.execution.budget import pauses_in_force
from idempotency_core.models import (
    Attempt,
    AuditEntry,
    Destination,
    DestinationBudget,
    Operation,
    ReconciliationFinding,
    ReconciliationRun,
    ReviewCase,
)
from idempotency_core.review.contact import REVEAL_ACTION
from review_console.cases.selectors import next_case_waiting
from review_console.cases.story import destination_words
from review_console.paging import COUNT_CAP
from review_console.settings.routing import failures_summary

AGE_BUCKETS: tuple[tuple[str, timedelta | None], ...] = (
    ("under 1 h", timedelta(hours=1)),
    ("1 to 24 h", timedelta(hours=24)),
    ("1 to 7 days", timedelta(days=7)),
    ("over 7 days", None),
)


def dashboard_summary(*, now: datetime | None = None, user: Any = None) -> dict[str, Any]:
    """The dashboard's figures; the viewer's own cases come from `my_cases`, and what
    waits is what *Next case* would give `user`."""
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
        "waiting_total": next_case_waiting(user).count(),
        "oldest_waiting": next_case_waiting(user).order_by("created_at", "id").first(),
        **failures_summary(now=now),
    }


# What a pause means to someone who did not configure the destination.
PAUSE_WORDS: dict[str, str] = {
    DestinationBudget.Pause.WINDOW: "it asked Onefold to slow down (its rate limit)",
    DestinationBudget.Pause.DAILY: "its requests for the day are used up (its daily limit)",
    DestinationBudget.Pause.REFUSED: (
        "its settings no longer allow Onefold to avoid duplicates there, so nothing is sent "
        "until they are corrected (an administrator should check them)"
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
                "service": destination_words(budget.destination),
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


def recent_reveals(*, limit: int = 10) -> list[AuditEntry]:
    """The last reveals, for the administrators' card on the dashboard."""
    return list(
        AuditEntry.objects.filter(action=REVEAL_ACTION)
        .select_related("actor", "case")
        .order_by("-at", "-pk")[:limit]
    )
