"""Onefold's own figures, read from the database when they are asked for."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Min, OuterRef, QuerySet, Subquery, Sum
from django.utils import timezone
from django_q.models import OrmQ

from idempotency_core.models import (
    Attempt,
    AttemptOutcome,
    CaseKind,
    Delivery,
    Destination,
    DestinationBudget,
    FindingKind,
    Notification,
    Operation,
    OperationStatus,
    ReconciliationRun,
    ReviewCase,
    Source,
)

# Operations not finished: few at any time, counted through operation_status_idx.
ACTIVE_STATUSES = (
    OperationStatus.PENDING,
    OperationStatus.RUNNING,
    OperationStatus.RETRY_SCHEDULED,
    OperationStatus.NEEDS_REVIEW,
)


@dataclass
class Figure:
    """One Prometheus gauge: its samples are (label values in `labels` order, value)."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def add(self, value: float, *label_values: object) -> None:
        self.samples.append((tuple(str(v) for v in label_values), float(value)))


def figures_read(*, now: datetime | None = None) -> list[Figure]:
    """Every figure, as of `now`. Raises DatabaseError when the database does not answer."""
    now = now or timezone.now()
    window = settings.ONEFOLD_METRICS_WINDOW_SECONDS
    since = now - timedelta(seconds=window)
    span = Figure(
        "onefold_metrics_window_seconds",
        "The span of the *_recent figures: the last this many seconds.",
    )
    span.add(window)
    return [
        span,
        submissions_recent(since=since),
        attempts_recent(since=since),
        operations_active(),
        oldest_due_operation_age(now=now),
        task_queue_depth(),
        *open_cases(now=now),
        *reconciliation_findings(),
        destinations_paused(now=now),
        destinations_rate_limited(),
        *notifications_unsent(now=now),
    ]


def submissions_recent(*, since: datetime) -> Figure:
    """Deliveries by source and answer. Every answer to a known source is counted
    (accepted, replayed and each refusal; a hook's failed verifications share one row
    a minute, whose `receipts` counts them); an unknown key or source has no row."""
    figure = Figure(
        "onefold_submissions_recent",
        "Submissions answered in the window, by source, outcome and HTTP status "
        "(accepted, replayed, key_reused, invalid, unauthorized, disabled, ...).",
        ("source", "outcome", "code"),
    )
    sources = dict(Source.objects.values_list("pk", "name"))
    # source_id IN (...) AND received_at >= since: a range scan per source on
    # delivery_source_recent_idx (source, received_at).
    rows = (
        Delivery.objects.filter(source_id__in=list(sources), received_at__gte=since)
        .values_list("source_id", "outcome", "status_code")
        # Receipts, not rows: a minute's failed verifications share one row.
        .annotate(count=Sum("receipts"))
        .order_by("source_id", "outcome", "status_code")
    )
    for source_id, outcome, code, count in rows:
        figure.add(count, sources[source_id], outcome, code)
    return figure


def attempts_recent(*, since: datetime) -> Figure:
    """Finished attempts by destination and outcome class, every pair present (0 too),
    so that an alert on a class sees a series before the first failure."""
    figure = Figure(
        "onefold_attempts_recent",
        "Attempts started in the window and finished, by destination and outcome "
        "(succeeded, retryable, permanent, ambiguous, interrupted, skipped).",
        ("destination", "outcome"),
    )
    counts = {
        (name, outcome): 0
        for name in Destination.objects.order_by("name").values_list("name", flat=True)
        for outcome in AttemptOutcome.values
    }
    # started_at >= since: attempt_started_idx.
    rows = (
        Attempt.objects.filter(started_at__gte=since, outcome__isnull=False)
        .values_list("operation__destination__name", "outcome")
        .annotate(count=Count("id"))
        .order_by()
    )
    for name, outcome, count in rows:
        counts[(name, outcome)] = count
    for (name, outcome), count in counts.items():
        figure.add(count, name, outcome)
    return figure


def operations_active() -> Figure:
    figure = Figure(
        "onefold_operations_active",
        "Operations not finished, by status (pending includes later steps waiting for "
        "an earlier one; needs_review includes the steps a case holds).",
        ("status",),
    )
    active = Operation.objects.filter(status__in=ACTIVE_STATUSES)
    _count_by(figure, active, "status", ACTIVE_STATUSES)
    return figure


def oldest_due_operation_age(*, now: datetime) -> Figure:
    """How long the longest-waiting due operation has waited: grows when no worker
    takes work (workers down, queue lost, clusters saturated). 0 when none is due."""
    figure = Figure(
        "onefold_oldest_due_operation_age_seconds",
        "Age of the oldest due operation (pending or retry_scheduled, next attempt time "
        "passed), in seconds; 0 when none is due.",
    )
    # The sweeper's query: operation_due_idx (next_attempt_at, partial on the statuses).
    due = Operation.objects.filter(status__in=Operation.CLAIMABLE, next_attempt_at__lte=now)
    figure.add(_oldest_age(due, "next_attempt_at", now=now))
    return figure


def destinations_paused(*, now: datetime) -> Figure:
    """Destinations whose work waits for a rate limit, a daily limit or a refused
    verification (execution/budget.py), with the seconds left; absent when none is."""
    figure = Figure(
        "onefold_destination_paused_seconds",
        "Seconds until a paused destination's work resumes, by destination and reason "
        "(window: its rate limit; daily: its daily limit; refused: its verification).",
        ("destination", "reason"),
    )
    rows = (
        DestinationBudget.objects.filter(paused_until__gt=now)
        .values_list("destination__name", "pause_kind", "paused_until")
        .order_by("destination__name")
    )
    for name, kind, until in rows:
        if until is not None:
            figure.add(max(0.0, (until - now).total_seconds()), name, kind)
    return figure


def destinations_rate_limited() -> Figure:
    """429s each destination answered, since its budget's row was made: after its
    budget was learned from its headers or configured (each one a defect: the budget
    should have held), and before."""
    figure = Figure(
        "onefold_destination_rate_limited_total",
        "429s a destination answered, by destination and whether its budget was known "
        "(learned from its rate-limit headers, or configured) when the request was sent.",
        ("destination", "after_learning"),
    )
    rows = DestinationBudget.objects.values_list(
        "destination__name", "rate_limited_known", "rate_limited_unknown"
    ).order_by("destination__name")
    for name, known, unknown in rows:
        figure.add(known, name, "true")
        figure.add(unknown, name, "false")
    return figure


def task_queue_depth() -> Figure:
    """Task messages not yet acknowledged, by queue (django-q2 cluster name)."""
    figure = Figure(
        "onefold_task_queue_depth",
        "Tasks in the django-q2 queue, waiting or being run, by queue (cluster name).",
        ("queue",),
    )
    counts = {settings.Q_CLUSTER["name"]: 0}
    alias = settings.Q_CLUSTER.get("orm")
    if alias:
        rows = OrmQ.objects.using(alias).values_list("key").annotate(count=Count("id")).order_by()
        counts.update(rows)
    else:  # a Redis broker: the length of the cluster's list
        from django_q.brokers import get_broker

        broker = get_broker()
        counts[broker.list_key] = int(broker.queue_size() or 0)
    for queue, count in sorted(counts.items()):
        figure.add(count, queue)
    return figure


def open_cases(*, now: datetime) -> Iterable[Figure]:
    """Open review cases (open or in progress) by kind, and the oldest one's age:
    one query on reviewcase_open_kind_idx (kind, created_at; partial on the statuses)."""
    count_figure = Figure(
        "onefold_open_cases", "Review cases open or in progress, by kind.", ("kind",)
    )
    age_figure = Figure(
        "onefold_oldest_open_case_age_seconds",
        "Age of the oldest case open or in progress, by kind, in seconds; 0 when none.",
        ("kind",),
    )
    found = {
        kind: (count, oldest)
        for kind, count, oldest in ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES)
        .values_list("kind")
        .annotate(count=Count("id"), oldest=Min("created_at"))
        .order_by()
    }
    for kind in CaseKind.values:
        count, oldest = found.get(kind, (0, None))
        count_figure.add(count, kind)
        age_figure.add(_age(now, oldest), kind)
    return [count_figure, age_figure]


def notifications_unsent(*, now: datetime) -> Iterable[Figure]:
    """Staff notifications of cases that could not be sent (each also on the console's
    dashboard), by channel, every channel present (0 too) so that an alert on an
    increase sees a series before the first failure; and how long the oldest one due
    has waited to be sent, which grows when no worker sends them."""
    failed = Figure(
        "onefold_notifications_failed",
        "Staff notifications of cases that could not be sent (nobody to receive them, "
        "refused, or out of tries), by channel (email, webhook); they only grow.",
        ("channel",),
    )
    # status = 'failed': notification_failed_idx (partial on it), few rows.
    unsent = Notification.objects.filter(status=Notification.Status.FAILED)
    _count_by(failed, unsent, "channel", Notification.Channel.values)
    waiting = Figure(
        "onefold_oldest_due_notification_age_seconds",
        "Age of the oldest staff notification due and not yet sent (waiting or being "
        "sent), in seconds; 0 when none is.",
    )
    # notification_outstanding_idx (due_at, partial on the two statuses).
    due = Notification.objects.filter(status__in=Notification.OUTSTANDING, due_at__lte=now)
    waiting.add(_oldest_age(due, "due_at", now=now))
    return [failed, waiting]


def reconciliation_findings() -> Iterable[Figure]:
    """What the last completed reconciliation run of each destination found, by kind,
    and when it finished (an alert can tell a run that stopped happening)."""
    findings = Figure(
        "onefold_reconciliation_findings",
        "Findings of the last completed reconciliation run of each destination, by kind "
        "(missing, duplicate, orphan, removed, changed, stuck).",
        ("destination", "kind"),
    )
    finished = Figure(
        "onefold_reconciliation_last_run_timestamp_seconds",
        "When the last completed reconciliation run of each destination finished (Unix time).",
        ("destination",),
    )
    last_run = (
        ReconciliationRun.objects.filter(
            destination=OuterRef("pk"), status=ReconciliationRun.Status.COMPLETED
        )
        .order_by("-finished_at", "-pk")
        .values("pk")[:1]
    )
    last_run_ids = (
        Destination.objects.annotate(last_run=Subquery(last_run))
        .filter(last_run__isnull=False)
        .values("last_run")
    )
    runs = ReconciliationRun.objects.filter(pk__in=last_run_ids).select_related("destination")
    for run in sorted(runs, key=lambda r: r.destination.name):
        for kind in FindingKind.values:
            findings.add(int(run.findings_total.get(kind, 0)), run.destination.name, kind)
        if run.finished_at is not None:
            finished.add(run.finished_at.timestamp(), run.destination.name)
    return [findings, finished]


def _age(now: datetime, since: datetime | None) -> float:
    return max(0.0, (now - since).total_seconds()) if since else 0.0


def _oldest_age(rows: QuerySet[Any], column: str, *, now: datetime) -> float:
    """How long ago the earliest `column` of `rows` was; 0 when there is none."""
    return _age(now, rows.aggregate(oldest=Min(column))["oldest"])


def _count_by(figure: Figure, rows: QuerySet[Any], column: str, values: Iterable[str]) -> None:
    """One sample per value of `column`, how many of `rows` have it; every value present,
    0 included, so that an alert on an increase has a series before the first one."""
    counts = dict.fromkeys(values, 0)
    for value, count in rows.values_list(column).annotate(count=Count("id")).order_by():
        counts[value] = count
    for value, count in counts.items():
        figure.add(count, value)
