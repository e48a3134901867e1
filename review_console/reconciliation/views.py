"""Console pages for reconciliation: the runs with their counts, and one run's findings.

Read-only: findings are acted on through the review cases they opened.
"""

from __future__ import annotations

import django_filters
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from idempotency_core.models import ReconciliationFinding, ReconciliationRun
from idempotency_core.reconciliation.compare import FINDING_KINDS
from review_console.http import require_GET
from review_console.permissions import VIEW_CASES, console_permission


def reconciliation_run_list_select() -> QuerySet[ReconciliationRun]:
    return ReconciliationRun.objects.select_related("destination", "source").order_by(
        "-started_at", "-id"
    )


def reconciliation_finding_list_select(*, run: ReconciliationRun) -> QuerySet:
    return (
        ReconciliationFinding.objects.filter(run=run)
        .select_related("case", "operation")
        .order_by("kind", "id")
    )


# The kinds of finding in words: the model's label of a duplicate names a technical term.
FINDING_LABELS = {
    **dict(ReconciliationFinding.Kind.choices),
    ReconciliationFinding.Kind.DUPLICATE: "Two CRM records for one submission",
}


class FindingFilter(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=list(FINDING_LABELS.items()))
    is_new = django_filters.BooleanFilter(label="New in this run")

    class Meta:
        model = ReconciliationFinding
        fields = ["kind", "is_new"]


@require_GET
@console_permission(VIEW_CASES)
def reconciliation_runs(request: HttpRequest) -> HttpResponse:
    page = Paginator(reconciliation_run_list_select(), 50).get_page(request.GET.get("page"))
    rows = [
        {
            "run": run,
            "cells": [
                (run.findings_total.get(kind, 0), run.findings_new.get(kind, 0))
                for kind in FINDING_KINDS
            ],
        }
        for run in page
    ]
    return render(
        request,
        "review_console/reconciliation/run_list.html",
        {"page": page, "rows": rows, "kinds": FINDING_KINDS},
    )


@require_GET
@console_permission(VIEW_CASES)
def reconciliation_run(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(reconciliation_run_list_select(), pk=run_id)
    findings = FindingFilter(request.GET, queryset=reconciliation_finding_list_select(run=run))
    page = Paginator(findings.qs, 100).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    counts = [
        (kind, run.findings_total.get(kind, 0), run.findings_new.get(kind, 0))
        for kind in FINDING_KINDS
    ]
    return render(
        request,
        "review_console/reconciliation/run_detail.html",
        {
            "run": run,
            "filter": findings,
            "page": page,
            "counts": counts,
            "finding_labels": FINDING_LABELS,
            "querystring": query.urlencode(),
        },
    )
