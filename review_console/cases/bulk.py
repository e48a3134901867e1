"""Bulk replay: every case matching a queue filter, replayed in the background.

Each item goes through `operation_replay` one by one, with the job creator as the
actor, so every guard of a single replay applies (permission, reason, state,
earlier steps, destination check). Items that need the destination looked up by a
person are refused, never confirmed in bulk: a bulk action cannot have checked.

The stored filter names only the queue's filter fields, and never a customer's address
in clear: an address in it (the queue's exact search, where a sender's submission id
is an address) is stored masked ("g***@example.com") in the job, its description and
the audit entry, which Reviewers without contact rights read. Such a filter's cases
are listed when the job starts, while the address is at hand; the masked filter the
runner reads later then matches nothing more. A NUL in a key or a value (which
PostgreSQL's jsonb cannot hold) is refused before anything is written.

The runner works in short chunks and re-enqueues itself, so a long job never
outlives the django-q2 task timeout. Each item is locked, replayed and marked in
one transaction, so two runners never replay the same item and a runner that
dies leaves no item half done.
"""

from __future__ import annotations

import logging
import re
import time
import traceback
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.models import User
from django.core.exceptions import BadRequest, PermissionDenied
from django.db import transaction
from django.db.models import Count
from django.http import QueryDict
from django.utils import timezone
from django_q.tasks import async_task

from idempotency_core.audit.entries import audit_record
from idempotency_core.review.refusals import ActionRefusedError, ReplayRefusedError
from idempotency_core.review.replay import REPLAY_PERMISSION, operation_replay
from review_console.cases.filters import CaseFilter
from review_console.cases.selectors import case_filterset
from review_console.masking import mask_email
from review_console.models import BulkReplayItem, BulkReplayJob

logger = logging.getLogger(__name__)

TASK = "review_console.tasks.bulk_replay_run"
CHUNK_SECONDS = 2.0
SNAPSHOT_BATCH = 2000


class BulkReplayRefusedError(ActionRefusedError):
    """The job cannot start; the message says why."""


# What a bulk replay's filter may name: the queue's own filter fields, nothing else.
FILTER_FIELDS = frozenset(CaseFilter.Meta.fields)
_ADDRESS = re.compile(r"[^\s@&=?]+@[^\s@&=?]+\.[^\s@&=?]+")


def filter_refusal(params: QueryDict) -> str | None:
    """Why `params` cannot be a stored filter (a NUL in a key or a value), or None."""
    for key in params:
        if "\x00" in key or any("\x00" in value for value in params.getlist(key)):
            return "A filter key or value holds a NUL character; nothing was stored."
    return None


def masked(values: dict[str, list[str]]) -> dict[str, list[str]]:
    """The filter with every address in its values masked as the console masks them."""
    return {
        key: [_ADDRESS.sub(lambda m: mask_email(m.group(0)), value) for value in items]
        for key, items in values.items()
    }


def bulk_replay_start(
    *, actor: User, params: QueryDict, reason: str, description: str = ""
) -> BulkReplayJob:
    """Records the job and queues its runner in the same transaction (ORM broker)."""
    if not actor.has_perm(REPLAY_PERMISSION):
        raise PermissionDenied("Bulk replay needs the replay permission (Replay admins).")
    refusal = filter_refusal(params)
    if refusal is not None:
        raise BadRequest(refusal)
    reason = reason.strip()
    if not reason:
        raise BulkReplayRefusedError("A bulk replay needs a reason.")
    stored = {key: params.getlist(key) for key in params if key in FILTER_FIELDS}
    shown = masked(stored)
    with transaction.atomic():
        job = BulkReplayJob.objects.create(
            created_by=actor,
            reason=reason,
            filter_params=shown,
            filter_description=urlencode(shown, doseq=True)[:500] if description else "",
        )
        if shown != stored:
            _snapshot(job, stored)  # the address is at hand only now
        audit_record(
            action="bulk_replay_requested",
            actor=actor,
            reason=reason,
            details={"job": job.pk, "filter": shown},
        )
        async_task(TASK, job.pk, task_name=f"bulk-replay-{job.pk}")
    return job


def _snapshot(job: BulkReplayJob, stored: dict[str, Any] | None = None) -> None:
    """The job's items: every case the filter matches now (`stored`, else the job's)."""
    params = QueryDict(mutable=True)
    for key, values in (stored if stored is not None else job.filter_params).items():
        params.setlist(key, values)
    cases = (
        case_filterset(params)
        .qs.filter(operation__isnull=False)
        .order_by("created_at", "id")
        .values_list("pk", "operation_id")
    )
    batch: list[BulkReplayItem] = []
    for case_id, operation_id in cases.iterator(chunk_size=SNAPSHOT_BATCH):
        batch.append(BulkReplayItem(job=job, case_id=case_id, operation_id=operation_id))
        if len(batch) >= SNAPSHOT_BATCH:
            BulkReplayItem.objects.bulk_create(batch, ignore_conflicts=True)
            batch = []
    BulkReplayItem.objects.bulk_create(batch, ignore_conflicts=True)
    BulkReplayJob.objects.filter(pk=job.pk).update(total=job.items.count())


def bulk_replay_run(*, job_id: int, chunk_seconds: float = CHUNK_SECONDS) -> str:
    """Processes pending items for up to `chunk_seconds`, then re-enqueues itself."""
    now = timezone.now()
    with transaction.atomic():
        started = BulkReplayJob.objects.filter(pk=job_id, status=BulkReplayJob.Status.QUEUED)
        if started.update(status=BulkReplayJob.Status.RUNNING, started_at=now):
            _snapshot(BulkReplayJob.objects.get(pk=job_id))
    job = BulkReplayJob.objects.select_related("created_by").get(pk=job_id)
    if job.status == BulkReplayJob.Status.FINISHED:
        return "finished"
    deadline = time.monotonic() + chunk_seconds
    while time.monotonic() < deadline:
        # The item, its replay and its outcome commit together: a runner that
        # dies mid-item leaves it pending for the next runner (the broker hands
        # the task out again), never half done. SKIP LOCKED keeps two runners
        # of one job off the same item.
        with transaction.atomic():
            item = (
                job.items.select_for_update(skip_locked=True)
                .filter(status=BulkReplayItem.Status.PENDING)
                .order_by("pk")
                .first()
            )
            if item is None:
                break
            _replay_item(job, item)
    remaining = job.items.filter(status=BulkReplayItem.Status.PENDING).exists()
    if remaining:
        async_task(TASK, job.pk, task_name=f"bulk-replay-{job.pk}")
        return "continuing"
    if BulkReplayJob.objects.filter(pk=job.pk, status=BulkReplayJob.Status.RUNNING).update(
        status=BulkReplayJob.Status.FINISHED, finished_at=timezone.now()
    ):
        audit_record(
            action="bulk_replay_finished",
            actor=job.created_by,
            reason=job.reason,
            details={"job": job.pk, **bulk_replay_counts(job)},
        )
    return "finished"


def _replay_item(job: BulkReplayJob, item: BulkReplayItem) -> None:
    try:
        operation_replay(
            operation_id=item.operation_id,
            actor=job.created_by,
            reason=f"Bulk replay #{job.pk}: {job.reason}",
        )
    except (ReplayRefusedError, PermissionDenied) as exc:
        status, message = BulkReplayItem.Status.REFUSED, str(exc)
    except Exception as exc:  # one bad item must not stop the other 9,999
        # Ids and class only: the exception's text may quote the payload (the item keeps it).
        logger.error(
            "bulk replay %s: item %s (operation %s) failed: %s\n%s",
            job.pk,
            item.pk,
            item.operation_id,
            type(exc).__name__,
            "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
        )
        status, message = BulkReplayItem.Status.ERROR, f"{type(exc).__name__}: {exc}"
    else:
        status, message = BulkReplayItem.Status.REPLAYED, ""
    BulkReplayItem.objects.filter(pk=item.pk).update(
        status=status, message=message, processed_at=timezone.now()
    )


def bulk_replay_counts(job: BulkReplayJob) -> dict[str, int]:
    counts = dict(job.items.values_list("status").annotate(n=Count("id")).order_by())
    return {status: counts.get(status, 0) for status in BulkReplayItem.Status.values}
