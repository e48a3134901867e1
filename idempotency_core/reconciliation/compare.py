"""Reconciliation: compare a period's events with what a CRM destination really holds."""

from __future__ import annotations

import logging
import queue
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.entries import audit_record
from idempotency_core.audit.subjects import (
    event_pair_naming_sql,
    external_ref_subject_sql,
    operation_subject_sql,
    record_subject_prefix,
)
from idempotency_core.execution.destinations import crm_adapter_for, destination_for, is_crm
from idempotency_core.execution.steps import MERGE_STEP
from idempotency_core.models import (
    Destination,
    Event,
    Operation,
    ReconciliationFinding,
    ReconciliationRecord,
    ReconciliationRun,
    ReviewCase,
    Source,
)
from idempotency_core.reconciliation.cases import (
    case_in_review,
    finding_evidence_add,
    reconciliation_cases_settle,
)

logger = logging.getLogger(__name__)

SYSTEM = "reconciliation"
ENQUIRY_STEP = "create_enquiry"
# Clocks of Onefold and the CRM may disagree by this much.
LISTING_MARGIN = timedelta(minutes=5)
# How many merges in a row a record is followed through (a record is merged away once,
# so only a survivor merged in turn adds one): a bound, not an expected depth.
MERGES_FOLLOWED = 20
# Listing a page is a read: it may take longer than a create is allowed to.
LISTING_TIMEOUT_SECONDS = 60.0
FINDING_KINDS = tuple(ReconciliationFinding.Kind.values)
CASE_KIND: dict[str, str] = {
    ReconciliationFinding.Kind.MISSING: ReviewCase.Kind.RECON_MISSING,
    ReconciliationFinding.Kind.DUPLICATE: ReviewCase.Kind.RECON_DUPLICATE,
    ReconciliationFinding.Kind.ORPHAN: ReviewCase.Kind.RECON_ORPHAN,
    ReconciliationFinding.Kind.REMOVED: ReviewCase.Kind.RECON_REMOVED,
    ReconciliationFinding.Kind.CHANGED: ReviewCase.Kind.RECON_CHANGED,
    ReconciliationFinding.Kind.STUCK: ReviewCase.Kind.RECON_STUCK,
}


class ReconciliationError(Exception):
    """The run cannot start or continue (busy elsewhere, finished, lease lost)."""


@dataclass(frozen=True)
class Progress:
    run: ReconciliationRun
    phase: str
    pages: int
    records: int
    # Share of the listing window covered so far (by created_at), 0..1.
    fraction: float


ProgressCallback = Callable[[Progress], None]


# -- starting and resuming -----------------------------------------------------


def reconciliation_start(
    *,
    since: datetime,
    until: datetime,
    source: Source | None = None,
    destination: Destination | None = None,
    dry_run: bool = False,
    trigger: str = "command",
) -> ReconciliationRun:
    """Returns a run this process holds: the unfinished one of the same scope, else a new one.

    An unfinished run whose lease is still held by another process is refused,
    so two processes never stage into one run.
    """
    if since >= until:
        raise ReconciliationError("--since must be before --until")
    if destination is None:
        destination = destination_for(source, "crm") if source else _default_crm()
    if not is_crm(destination):
        raise ReconciliationError(f"destination {destination.name} is not a CRM")
    unfinished = (
        ReconciliationRun.objects.filter(
            destination=destination, source=source, since=since, until=until, dry_run=dry_run
        )
        .exclude(status=ReconciliationRun.Status.COMPLETED)
        .order_by("-started_at")
        .first()
    )
    if unfinished is not None:
        return reconciliation_claim(run_id=unfinished.pk)
    now = timezone.now()
    return ReconciliationRun.objects.create(
        destination=destination,
        source=source,
        since=since,
        until=until,
        as_of=now,
        listing_since=since - LISTING_MARGIN,
        listing_until=max(until, now) + LISTING_MARGIN,
        dry_run=dry_run,
        trigger=trigger,
        lease_token=uuid.uuid4(),
        lease_expires_at=now + _lease(),
    )


def reconciliation_claim(*, run_id: int) -> ReconciliationRun:
    """Takes over an unfinished run whose lease has expired (conditional UPDATE)."""
    now = timezone.now()
    token = uuid.uuid4()
    claimed = (
        ReconciliationRun.objects.filter(pk=run_id)
        .exclude(status=ReconciliationRun.Status.COMPLETED)
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now))
        .update(lease_token=token, lease_expires_at=now + _lease())
    )
    if not claimed:
        run = ReconciliationRun.objects.filter(pk=run_id).first()
        if run is None:
            raise ReconciliationError(f"no reconciliation run {run_id}")
        if run.status == ReconciliationRun.Status.COMPLETED:
            raise ReconciliationError(f"reconciliation run {run_id} is already completed")
        raise ReconciliationError(
            f"reconciliation run {run_id} is being worked on by another process "
            f"(lease until {run.lease_expires_at:%Y-%m-%d %H:%M:%S})"
        )
    run = ReconciliationRun.objects.select_related("destination", "source").get(pk=run_id)
    staged = ReconciliationRecord.objects.filter(run=run).count()
    if run.status == ReconciliationRun.Status.LISTING and staged != run.records_staged:
        # The staging rows do not match the committed cursor (cleaned up by
        # hand, or lost): list again from the start rather than compare a gap.
        logger.warning(
            "run %s: %s rows staged, %s expected; relisting", run.pk, staged, run.records_staged
        )
        with transaction.atomic():
            ReconciliationRecord.objects.filter(run=run).delete()
            _renew(run, cursor="", pages_fetched=0, records_staged=0)
    return run


def reconciliation_execute(
    *, run: ReconciliationRun, progress: ProgressCallback | None = None
) -> ReconciliationRun:
    """Runs (or continues) a run this process holds to completion.

    On an exception the lease is released, so the run can be resumed at once.
    """
    try:
        if run.status == ReconciliationRun.Status.LISTING:
            _list_and_stage(run, progress)
        if run.status == ReconciliationRun.Status.COMPARING:
            _compare(run)
            _notify(progress, run, "comparing", 1.0)
        if run.status == ReconciliationRun.Status.OPENING:
            _open_cases(run)
        _complete(run)
    except BaseException:
        ReconciliationRun.objects.filter(pk=run.pk, lease_token=run.lease_token).update(
            lease_expires_at=timezone.now()
        )
        raise
    return run


def reconcile(
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    source: Source | None = None,
    destination: Destination | None = None,
    dry_run: bool = False,
    resume_run_id: int | None = None,
    trigger: str = "command",
    progress: ProgressCallback | None = None,
) -> ReconciliationRun:
    """Starts, or resumes, and completes one reconciliation run."""
    if resume_run_id is not None:
        run = reconciliation_claim(run_id=resume_run_id)
    else:
        if since is None or until is None:
            raise ReconciliationError("a period (since, until) or a run to resume is required")
        run = reconciliation_start(
            since=since,
            until=until,
            source=source,
            destination=destination,
            dry_run=dry_run,
            trigger=trigger,
        )
    return reconciliation_execute(run=run, progress=progress)


def reconcile_daily() -> list[dict[str, Any]]:
    """django-q2 schedule: yesterday (UTC), once per CRM destination.

    Idempotent: a repeat resumes or re-runs the same period, and open cases
    are never opened twice.
    """
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    results, failures = [], []
    for destination in Destination.objects.filter(kind__in=Destination.CRM_KINDS).order_by("name"):
        try:
            run = reconcile(
                since=today - timedelta(days=1),
                until=today,
                destination=destination,
                trigger="schedule",
            )
        except Exception as exc:  # one unreachable CRM must not hide the others
            # Class only: a CRM's error text may quote its records.
            logger.error(
                "daily reconciliation of %s failed: %s\n%s",
                destination.name,
                type(exc).__name__,
                "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
            )
            failures.append(
                f"{destination.name}: {type(exc).__name__} (see the run in the console)"
            )
            continue
        results.append(run_summary(run))
    if failures:
        raise ReconciliationError("; ".join(failures))
    return results


def run_summary(run: ReconciliationRun) -> dict[str, Any]:
    """The JSON object of `reconcile --json` (docs/operations.md, "Reconciliation")."""
    return {
        "run_id": run.pk,
        "events": run.events_count or 0,
        "destination_records": run.records_staged,
        "findings": {kind: int(run.findings_new.get(kind, 0)) for kind in FINDING_KINDS},
    }


# -- phase 1: listing -----------------------------------------------------------


def _list_and_stage(run: ReconciliationRun, progress: ProgressCallback | None) -> None:
    client = crm_adapter_for(
        run.destination,
        timeout=max(settings.ONEFOLD_HTTP_TIMEOUT_SECONDS, LISTING_TIMEOUT_SECONDS),
    )
    window = (run.listing_until - run.listing_since).total_seconds() or 1.0
    for page, next_cursor in _prefetched(
        client.iter_records(
            since=_iso(run.listing_since),
            until=_iso(run.listing_until),
            cursor=run.cursor or None,
            limit=settings.ONEFOLD_RECONCILE_PAGE_SIZE,
        )
    ):
        with transaction.atomic():
            _stage(run, page)
            changes: dict[str, Any] = {
                "cursor": next_cursor or "",
                "pages_fetched": run.pages_fetched + 1,
                "records_staged": run.records_staged + len(page),
            }
            if not next_cursor:
                changes["status"] = ReconciliationRun.Status.COMPARING
            _renew(run, **changes)
        fraction = 1.0
        if page and next_cursor:
            last = parse_datetime(page[-1]["created_at"])
            if last is not None:
                fraction = min(1.0, (last - run.listing_since).total_seconds() / window)
        _notify(progress, run, "listing", fraction)
    if run.status == ReconciliationRun.Status.LISTING:  # an empty first page ends too
        _renew(run, status=ReconciliationRun.Status.COMPARING)


def _stage(run: ReconciliationRun, page: list[dict[str, Any]]) -> None:
    if not page:
        return
    table = ReconciliationRecord._meta.db_table
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(
            f"COPY {table} (run_id, record_id, external_ref, created_at, updated_at) FROM STDIN"
        ) as copy,
    ):
        for record in page:
            copy.write_row(
                (
                    run.pk,
                    str(record["id"]),
                    record.get("external_ref"),
                    record["created_at"],
                    record.get("updated_at"),
                )
            )


_DONE = object()


def _prefetched(pages: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """Fetches the next page in a thread while the caller stages this one.

    The thread does HTTP and the destination budget's reservations (its own
    connection); every other database write stays in the caller. A caller inside a
    transaction (a test's) lists inline: its uncommitted budget row would hold the
    thread's reservations until it ends.
    """
    if connection.in_atomic_block:
        yield from pages
        return
    buffer: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in pages:
                while not stop.is_set():
                    try:
                        buffer.put(item, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            buffer.put(_DONE)
        except BaseException as exc:  # handed to the consumer, raised there
            buffer.put(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=produce, name="reconcile-listing", daemon=True)
    thread.start()
    try:
        while True:
            item = buffer.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


# -- phase 2: comparing -----------------------------------------------------------


def _compare(run: ReconciliationRun) -> None:
    """Computes every finding of the run in one transaction, set-based."""
    statements, count_events, params = comparison_sql(run)
    t = {"finding": ReconciliationFinding._meta.db_table, "case": ReviewCase._meta.db_table}
    with transaction.atomic():
        _renew(run)  # holds the lease, or raises before any work
        ReconciliationFinding.objects.filter(run=run).delete()
        with connection.cursor() as cursor:
            # The staging table went from empty to a million rows since autovacuum
            # last looked: without fresh statistics the planner picks nested loops
            # over it. Hash joins and aggregates over a million rows want more than
            # the default 4 MB of work_mem.
            cursor.execute(f"ANALYZE {ReconciliationRecord._meta.db_table}")
            cursor.execute("SET LOCAL work_mem = '64MB'")
            for statement in statements:
                cursor.execute(statement, params)
            cursor.execute(count_events, params)
            events_count = cursor.fetchone()[0]
            if run.dry_run:
                # What a real run would open: no open case of this subject and kind,
                # nor any open case about its operation or event, or a pair it is
                # either of (`case_in_review`).
                cursor.execute(
                    f"""
                    UPDATE {t["finding"]} SET is_new = NOT EXISTS (
                        SELECT 1 FROM {t["case"]} c
                        WHERE c.status IN ('open', 'in_progress')
                          AND ((c.subject = {t["finding"]}.subject
                                AND c.kind = 'recon_' || {t["finding"]}.kind)
                               OR c.operation_id = {t["finding"]}.operation_id
                               OR c.event_id = {t["finding"]}.event_id
                               OR {event_pair_naming_sql("c.subject", f"{t['finding']}.event_id")}))
                    WHERE run_id = %(run)s
                    """,
                    {"run": run.pk},
                )
        _renew(
            run,
            events_count=events_count,
            status=ReconciliationRun.Status.COMPLETED
            if run.dry_run
            else ReconciliationRun.Status.OPENING,
        )


def comparison_sql(run: ReconciliationRun) -> tuple[list[str], str, dict[str, Any]]:
    """The INSERT ... SELECT statements that write a run's findings, and the event count."""
    tables = {
        "event": Event._meta.db_table,
        "operation": Operation._meta.db_table,
        "staging": ReconciliationRecord._meta.db_table,
        "finding": ReconciliationFinding._meta.db_table,
        "case": ReviewCase._meta.db_table,
    }
    # A group's record ids as one comma list, in a stated order.
    agg = "string_agg({col}, ',' ORDER BY {order})"
    params = {
        "run": run.pk,
        "destination": run.destination_id,
        "step": ENQUIRY_STEP,
        "since": run.since,
        "until": run.until,
        "until_events": min(run.until, run.as_of),
        "as_of": run.as_of,
        "stuck_before": run.as_of - timedelta(seconds=settings.ONEFOLD_STUCK_AFTER_SECONDS),
        "orphan_prefix": record_subject_prefix(run.destination.name),
        "merge_step": f"{MERGE_STEP}:",
    }
    source_clause = ""
    if run.source_id is not None:
        source_clause = "AND e.source_id = %(source)s"
        params["source"] = run.source_id
    t = tables
    # The in-scope create_enquiry operations and their events.
    scope = f"""
        SELECT o.id, o.event_id, o.key, o.status, o.destination_ref, o.completed_at
        FROM {t["operation"]} o JOIN {t["event"]} e ON e.id = o.event_id
        WHERE o.step = %(step)s AND o.destination_id = %(destination)s
          AND e.received_at >= %(since)s AND e.received_at < %(until_events)s {source_clause}
    """
    insert = (
        f"INSERT INTO {t['finding']} "
        "(run_id, kind, subject, event_id, operation_id, external_ref, record_ids) "
    )
    statements = [
        # missing, removed, changed. Most operations are fine (their record is
        # listed with their key): one anti-join keeps only the others, and only
        # those few are joined back to the staging rows for evidence. A record that
        # Onefold's own merge took away is looked for where the merge put it.
        insert
        + f"""
        WITH RECURSIVE c AS (
            SELECT s.* FROM ({scope}) s
            WHERE s.status = 'needs_review'
               OR (s.status = 'succeeded' AND s.completed_at < %(as_of)s
                   AND (s.destination_ref = '' OR NOT EXISTS (
                        SELECT 1 FROM {t["staging"]} ok
                        WHERE ok.run_id = %(run)s AND ok.record_id = s.destination_ref
                          AND ok.external_ref = s.key)))
        ), {_moved_sql(t)}, now_in AS (
            SELECT DISTINCT ON (id) id, ref, depth FROM moved ORDER BY id, depth DESC
        )
        SELECT %(run)s,
               CASE WHEN c.status = 'succeeded' AND c.destination_ref <> ''
                    THEN CASE WHEN MAX(own.record_id) IS NULL AND COUNT(br.record_id) = 0
                              THEN 'removed' ELSE 'changed' END
                    ELSE 'missing' END,
               {operation_subject_sql("c.id")}, c.event_id, c.id, c.key,
               CASE WHEN MAX(own.record_id) IS NULL
                    THEN COALESCE({agg.format(col="br.record_id", order="br.record_id")}, '')
                    WHEN COUNT(br.record_id) = 0 THEN MAX(own.record_id)
                    ELSE MAX(own.record_id) || ','
                         || {agg.format(col="br.record_id", order="br.record_id")} END
        FROM c
        LEFT JOIN now_in n ON n.id = c.id
        LEFT JOIN {t["staging"]} own
          ON own.run_id = %(run)s AND own.record_id = COALESCE(n.ref, c.destination_ref)
        LEFT JOIN {t["staging"]} br ON br.run_id = %(run)s AND br.external_ref = c.key
        GROUP BY c.id, c.event_id, c.key, c.status, c.destination_ref
        HAVING CASE WHEN c.status = 'succeeded' AND c.destination_ref <> ''
                    -- A record Onefold merged into one that is listed: nothing to report.
                    THEN NOT (MAX(n.depth) > 0 AND MAX(own.record_id) IS NOT NULL)
                    ELSE COUNT(br.record_id) = 0 END
        """,
        # stuck: few rows, found through the status index; every step counts.
        insert
        + f"""
        SELECT %(run)s, 'stuck', {operation_subject_sql("o.id")}, o.event_id, o.id, o.key,
               COALESCE({agg.format(col="r.record_id", order="r.created_at, r.record_id")}, '')
        FROM {t["operation"]} o
        JOIN {t["event"]} e ON e.id = o.event_id
        JOIN {t["operation"]} ce ON ce.event_id = o.event_id AND ce.step = %(step)s
        LEFT JOIN {t["staging"]} r ON r.run_id = %(run)s AND r.external_ref = o.key
        WHERE ce.destination_id = %(destination)s
          AND o.status IN ('pending', 'running', 'retry_scheduled')
          AND (o.status = 'running' OR o.next_attempt_at IS NOT NULL)
          AND e.received_at >= %(since)s AND e.received_at < %(until_events)s
          AND e.received_at < %(stuck_before)s {source_clause}
        GROUP BY o.id, o.event_id, o.key
        """,
        # duplicate: references held by more than one staged record.
        insert
        + f"""
        SELECT %(run)s, 'duplicate', {external_ref_subject_sql("d.external_ref")}, o.event_id, o.id,
               d.external_ref, d.ids
        FROM (
            SELECT r.external_ref, MIN(r.created_at) AS first_at,
                   {agg.format(col="r.record_id", order="r.created_at, r.record_id")} AS ids
            FROM {t["staging"]} r
            JOIN (SELECT external_ref FROM {t["staging"]}
                  WHERE run_id = %(run)s AND external_ref IS NOT NULL
                  GROUP BY external_ref HAVING COUNT(*) > 1) dup
              ON dup.external_ref = r.external_ref
            WHERE r.run_id = %(run)s
            GROUP BY r.external_ref
        ) d
        LEFT JOIN {t["operation"]} o ON o.key = d.external_ref AND o.step = %(step)s
        LEFT JOIN {t["event"]} e ON e.id = o.event_id
        WHERE (o.id IS NULL AND d.first_at >= %(since)s AND d.first_at < %(until)s)
           OR (o.destination_id = %(destination)s AND e.received_at >= %(since)s
               AND e.received_at < %(until_events)s {source_clause})
        """,
        # orphan: records of the period that no operation accounts for.
        insert
        + f"""
        SELECT %(run)s, 'orphan', %(orphan_prefix)s || r.record_id, NULL, NULL,
               COALESCE(r.external_ref, ''), r.record_id
        FROM {t["staging"]} r
        WHERE r.run_id = %(run)s AND r.created_at >= %(since)s AND r.created_at < %(until)s
          AND (r.external_ref IS NULL OR NOT EXISTS (
                SELECT 1 FROM {t["operation"]} o
                WHERE o.key = r.external_ref AND o.step = %(step)s))
          AND NOT EXISTS (
                SELECT 1 FROM {t["operation"]} o2
                WHERE o2.destination_ref = r.record_id AND o2.step = %(step)s
                  AND o2.destination_id = %(destination)s)
        """,
    ]
    return statements, f"SELECT COUNT(*) FROM ({scope}) s", params


def _moved_sql(t: dict[str, str]) -> str:
    """`moved`: where the record each operation of `c` made is now, one row per merge
    followed (depth 0: the record itself). A merge Onefold made (its operation
    succeeded) took the record into the survivor the CRM answered with, and that
    survivor may have been merged in turn; a record merged away by hand in the CRM is
    not followed, so it is still reported. A record's merge is an operation on the
    event whose record went away (the one whose create_enquiry made it, else the event
    of the case it was decided on: this operation's), its step naming the record, so
    (event, step) finds it."""
    return f"""
        moved (id, event_id, ref, depth) AS (
            SELECT c.id, c.event_id, c.destination_ref, 0 FROM c
            WHERE c.status = 'succeeded' AND c.destination_ref <> ''
            UNION ALL
            SELECT mv.id, mv.event_id, m.destination_ref, mv.depth + 1
            FROM moved mv
            CROSS JOIN LATERAL (
                SELECT m.destination_ref FROM {t["operation"]} m
                WHERE m.event_id = ANY (ARRAY[mv.event_id] || ARRAY(
                        SELECT made.event_id FROM {t["operation"]} made
                        WHERE made.destination_ref = mv.ref AND made.step = %(step)s
                          -- what lets the partial index on references answer
                          AND made.destination_ref <> ''))
                  AND m.step = %(merge_step)s || mv.ref AND m.status = 'succeeded'
                  AND m.destination_id = %(destination)s AND m.destination_ref <> ''
                ORDER BY m.id LIMIT 1
            ) m
            WHERE mv.depth < {MERGES_FOLLOWED}
        )
    """


# -- phase 3: opening cases --------------------------------------------------------


def _open_cases(run: ReconciliationRun) -> None:
    pending = (
        ReconciliationFinding.objects.filter(run=run, case__isnull=True)
        .select_related("event", "operation")
        .order_by("id")
    )
    for number, finding in enumerate(pending.iterator(chunk_size=500)):
        evidence = {
            "reconciliation_run": run.pk,
            "destination": run.destination.name,
            "external_ref": finding.external_ref,
            "record_ids": finding.record_id_list,
            "operation_status": finding.operation.status if finding.operation else None,
            "destination_ref": finding.operation.destination_ref if finding.operation else None,
        }
        with transaction.atomic():
            case = case_in_review(finding)
            created = False
            if case is not None:
                finding_evidence_add(case, finding, evidence | {"summary": _summary(run, finding)})
            else:
                case, created = review_case_open(
                    kind=CASE_KIND[finding.kind],
                    subject=finding.subject,
                    summary=_summary(run, finding),
                    event=finding.event,
                    operation=finding.operation,
                    evidence=evidence,
                    system=SYSTEM,
                )
            ReconciliationFinding.objects.filter(pk=finding.pk).update(case=case, is_new=created)
        if number % 200 == 199:
            _renew(run)
    reconciliation_cases_settle(run)
    _renew(run, status=ReconciliationRun.Status.COMPLETED)


def _summary(run: ReconciliationRun, finding: ReconciliationFinding) -> str:
    dest = run.destination.name
    ids = ", ".join(finding.record_id_list) or "none"
    op = finding.operation
    kind = ReconciliationFinding.Kind
    prefix = f"Reconciliation run {run.pk}: "
    if finding.kind == kind.MISSING:
        return prefix + (
            f"{dest} holds no record with this event's reference {finding.external_ref} and "
            f"Onefold never recorded one (operation {op.step if op else ''} is "
            f"{op.status if op else 'unknown'}). The enquiry is not in the CRM: replay or close."
        )
    if finding.kind == kind.REMOVED:
        return prefix + (
            f"Onefold created record {op.destination_ref if op else '?'} in {dest} for this "
            "event, and no record with that id or this reference is there any more (deleted or "
            "merged away in the CRM). Check with the CRM's users before recreating it."
        )
    if finding.kind == kind.CHANGED:
        return prefix + (
            f"Onefold created record {op.destination_ref if op else '?'} in {dest} with "
            f"reference {finding.external_ref}; the CRM now shows records {ids} instead "
            "(the reference was edited, or the record replaced). Decide which record is the "
            "enquiry."
        )
    if finding.kind == kind.DUPLICATE:
        return prefix + (
            f"{len(finding.record_id_list)} records in {dest} carry reference "
            f"{finding.external_ref}: {ids}. Investigate before merging; nothing was merged "
            "automatically."
        )
    if finding.kind == kind.ORPHAN:
        return prefix + (
            f"Record {ids} in {dest} (reference {finding.external_ref or 'none'}) matches no "
            "Onefold operation: created outside Onefold, or its reference was edited."
        )
    return prefix + (
        f"Operation {op.step if op else ''} is still {op.status if op else 'unfinished'} more "
        f"than {settings.ONEFOLD_STUCK_AFTER_SECONDS} s after its event arrived"
        + (f"; {dest} holds records {ids} with its reference." if finding.record_ids else ".")
    )


def _complete(run: ReconciliationRun) -> None:
    counts = dict(
        ReconciliationFinding.objects.filter(run=run)
        .values_list("kind")
        .annotate(n=Count("id"))
        .values_list("kind", "n")
    )
    new = dict(
        ReconciliationFinding.objects.filter(run=run, is_new=True)
        .values_list("kind")
        .annotate(n=Count("id"))
        .values_list("kind", "n")
    )
    with transaction.atomic():
        _renew(
            run,
            findings_total={k: counts.get(k, 0) for k in FINDING_KINDS},
            findings_new={k: new.get(k, 0) for k in FINDING_KINDS},
            finished_at=timezone.now(),
            lease_token=None,
            lease_expires_at=None,
            renew_lease=False,
        )
        # Staging only served the comparison; findings keep the record ids.
        ReconciliationRecord.objects.filter(run=run).delete()
        if not run.dry_run:
            audit_record(
                action="reconciliation_completed",
                system=SYSTEM,
                details=run_summary(run) | {"findings_total": run.findings_total},
            )


# -- helpers -------------------------------------------------------------------------


def _renew(run: ReconciliationRun, *, renew_lease: bool = True, **changes: Any) -> None:
    """Writes `changes` only while this process holds the run's lease, and extends it."""
    if renew_lease:
        changes["lease_expires_at"] = timezone.now() + _lease()
    updated = ReconciliationRun.objects.filter(pk=run.pk, lease_token=run.lease_token).update(
        **changes
    )
    if not updated:
        raise ReconciliationError(f"lost the lease on reconciliation run {run.pk}")
    for name, value in changes.items():
        setattr(run, name, value)


def _notify(
    progress: ProgressCallback | None, run: ReconciliationRun, phase: str, fraction: float
) -> None:
    if progress is not None:
        progress(
            Progress(
                run=run,
                phase=phase,
                pages=run.pages_fetched,
                records=run.records_staged,
                fraction=fraction,
            )
        )


def _lease() -> timedelta:
    return timedelta(seconds=settings.ONEFOLD_RECONCILE_LEASE_SECONDS)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _default_crm() -> Destination:
    try:
        return Destination.objects.get(name="crm")
    except Destination.DoesNotExist:
        raise ReconciliationError("no destination named crm; pass a source") from None


__all__ = [
    "Progress",
    "ReconciliationError",
    "reconcile",
    "reconcile_daily",
    "reconciliation_claim",
    "reconciliation_execute",
    "reconciliation_start",
    "run_summary",
]
