"""Bulk replay: the cases a filter matches tried again in the background, with its
confirmation, its list of jobs and each job's progress."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import BadRequest
from django.http import (
    HttpRequest,
    HttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from review_console.cases.bulk import bulk_replay_counts, bulk_replay_start, filter_refusal
from review_console.cases.selectors import case_filterset
from review_console.confirm import confirmed, confirmed_action
from review_console.forms import (
    ReasonForm,
)
from review_console.http import HtmxHttpRequest, require_GET, require_POST
from review_console.models import BulkReplayItem, BulkReplayJob
from review_console.paging import COUNT_CAP
from review_console.permissions import (
    REPLAY,
    VIEW_CASES,
    acting_user,
    console_permission,
)


@require_GET
@console_permission(VIEW_CASES)
def bulk_replay_list(request: HttpRequest) -> HttpResponse:
    """The last bulk replays, newest first (a new one starts from the queue's filter)."""
    jobs = BulkReplayJob.objects.select_related("created_by").order_by("-created_at", "-pk")[:100]
    return render(request, "review_console/cases/bulk_replay_list.html", {"jobs": jobs})


@require_GET
@console_permission(VIEW_CASES)
def bulk_replay_detail(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job = get_object_or_404(BulkReplayJob.objects.select_related("created_by"), pk=job_id)
    counts = bulk_replay_counts(job)
    done = sum(counts[s] for s in BulkReplayItem.DONE)
    problems = (
        job.items.select_related("operation")
        .exclude(status__in=[BulkReplayItem.Status.REPLAYED, BulkReplayItem.Status.PENDING])
        .order_by("pk")[:200]
    )
    template = "_bulk_replay_progress.html" if request.htmx else "bulk_replay_detail.html"
    return render(
        request,
        f"review_console/cases/{template}",
        {
            "job": job,
            "counts": counts,
            "done": done,
            "percent": round(done / job.total * 100) if job.total else 0,
            "problems": problems,
            "running": job.status != BulkReplayJob.Status.FINISHED,
        },
    )


@require_POST
@console_permission(REPLAY)
def bulk_replay_new(request: HttpRequest) -> HttpResponse:
    """Confirmation (count, explanation) then the background job, for the queue's filter."""
    refusal = filter_refusal(request.POST)
    if refusal is not None:
        raise BadRequest(refusal)  # 400: PostgreSQL cannot store it, and nothing is tried
    params = request.POST.copy()
    for key in ("csrfmiddlewaretoken", "confirm", "reason", "next", "selected"):
        params.pop(key, None)
    if request.POST.get("selected") and not params.getlist("case"):
        # "Replay selected" with nothing ticked must not become "replay everything".
        messages.error(request, "Select at least one case to replay.")
        return redirect(reverse("console:case-list"))
    filterset = case_filterset(params, request=request)
    if not filterset.is_valid():
        messages.error(request, "The filter is not valid; fix it on the queue first.")
        return redirect(reverse("console:case-list"))
    form = ReasonForm(request.POST if confirmed(request) else None)

    def page() -> HttpResponse:
        matching = filterset.qs.filter(operation__isnull=False)
        count = matching.order_by()[: COUNT_CAP + 1].count()
        return render(
            request,
            "review_console/cases/bulk_replay_confirm.html",
            {
                "form": form,
                "params": [(k, v) for k in params for v in params.getlist(k)],
                "count": min(count, COUNT_CAP),
                "capped": count > COUNT_CAP,
                "querystring": params.urlencode(),
            },
        )

    return confirmed_action(
        request,
        form,
        act=lambda data: bulk_replay_start(
            actor=acting_user(request),
            params=params,
            reason=data["reason"],
            description=params.urlencode(),
        ),
        success=lambda _, job: f"Bulk replay #{job.pk} started.",
        done_url=lambda _, job: reverse("console:bulk-replay-detail", args=[job.pk]),
        page=page,
    )
