"""Suspected duplicates: the comparison page and the merge ("not a duplicate" takes a
reason alone: views_reason.py)."""

from __future__ import annotations

from typing import Any

from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
)
from django.shortcuts import render

from idempotency_core.models import ReviewCase
from idempotency_core.review.comparison import duplicate_records_fetch
from idempotency_core.review.merge import (
    DUPLICATE_KINDS,
    duplicate_merge_request,
    duplicate_record_refs,
)
from review_console.cases.comparison import duplicate_comparison
from review_console.cases.decisions import (
    case_url,
    open_case,
)
from review_console.cases.presets import (
    MERGE,
    preset_reason,
)
from review_console.confirm import confirmed_action
from review_console.forms import (
    MergeForm,
)
from review_console.http import require_GET, require_POST
from review_console.permissions import (
    CHANGE_CASES,
    VIEW_CONTACT,
    acting_user,
    console_permission,
)


@require_GET
@console_permission(CHANGE_CASES)
def case_compare(request: HttpRequest, case_id: int) -> HttpResponse:
    """The merge page: records side by side, differences marked, survivor choice."""
    return _compare_page(request, open_case(case_id), form=None)


def _compare_page(
    request: HttpRequest, case: ReviewCase, *, form: MergeForm | None
) -> HttpResponse:
    """The comparison, with `form` as posted (its errors and the typed note kept) or,
    when None, a fresh form with the older record chosen to stay."""
    if case.kind not in DUPLICATE_KINDS:
        raise Http404("Only suspected duplicates have a comparison.")
    records = duplicate_records_fetch(case)  # the reviewer asked: reads the CRM
    comparison = duplicate_comparison(case, records, unmasked=request.user.has_perm(VIEW_CONTACT))
    refs = [c.ref for c in comparison["present"]]
    if form is None:
        form = MergeForm(initial={"survivor": refs[0] if refs else ""})
    return render(
        request,
        "review_console/cases/merge_compare.html",
        {
            "case": case,
            "comparison": comparison,
            "form": form,
            "chosen_survivor": form["survivor"].value() or "",
            "note": request.POST.get("note", "") if form.is_bound else "",
            "is_open": case.status in ReviewCase.OPEN_STATUSES,
        },
    )


def _merge_data(request: HttpRequest, case: ReviewCase) -> Any:
    """The merge as posted: one choice (the record that stays) makes the pair, the
    other record of the two being the one merged into it; a preset gives the reason."""
    data = request.POST.copy()
    survivor = data.get("survivor", "")
    refs = duplicate_record_refs(case)
    if survivor and not data.get("duplicate") and len(refs) == 2 and survivor in refs:
        data["duplicate"] = next(ref for ref in refs if ref != survivor)
    reason = preset_reason(MERGE, data.get("preset", ""), data.get("note", ""))
    if reason is not None and not data.get("reason"):
        data["reason"] = reason
    return data


@require_POST
@console_permission(CHANGE_CASES)
def case_merge(request: HttpRequest, case_id: int) -> HttpResponse:
    case = open_case(case_id)
    form = MergeForm(_merge_data(request, case))
    return confirmed_action(
        request,
        form,
        act=lambda data: duplicate_merge_request(
            case_id=case.pk,
            survivor_ref=data["survivor"],
            duplicate_ref=data["duplicate"],
            actor=acting_user(request),
            reason=data["reason"],
        ),
        success=(
            "The two records will be merged within seconds; the case is resolved when the "
            "CRM confirms."
        ),
        done_url=case_url(case),
        # Refused or invalid: the same page again, with the message and the typed reason.
        page=lambda: _compare_page(request, case, form=form),
    )
