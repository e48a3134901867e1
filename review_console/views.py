"""Staff views of the review console."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from idempotency_core.models import ReviewCase


@staff_member_required
def case_list(request: HttpRequest) -> HttpResponse:
    cases = ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES).order_by("created_at")
    return render(request, "review_console/case_list.html", {"cases": cases[:100]})
