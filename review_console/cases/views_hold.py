"""Console actions on a suspected duplicate held before the write (the `hold` policy):
"Same enquiry" and "Separate enquiry", each behind the usual confirmation page with
a reason. The decisions are the services of idempotency_core/review/held_duplicates.py.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from idempotency_core.review.held_duplicates import held_duplicate_link, held_duplicate_separate
from review_console.cases.decisions import open_case, reason_decision
from review_console.cases.presets import HOLD_SAME, HOLD_SEPARATE
from review_console.http import require_POST
from review_console.permissions import CHANGE_CASES, console_permission


@require_POST
@console_permission(CHANGE_CASES)
def case_hold_same(request: HttpRequest, case_id: int) -> HttpResponse:
    case = open_case(case_id)
    return reason_decision(
        request,
        case,
        HOLD_SAME,
        service=held_duplicate_link,
        success=f"Case {case.pk} resolved: the same enquiry; nothing more was written.",
        url_name="console:case-hold-same",
        title=f"Case {case.pk}: same enquiry",
        submit="Link to the first submission",
        explanation=(
            "The held submission is linked to the first one and never written: no second "
            "CRM record, no second task, no second confirmation email. This cannot be "
            "undone from the console."
        ),
    )


@require_POST
@console_permission(CHANGE_CASES)
def case_hold_separate(request: HttpRequest, case_id: int) -> HttpResponse:
    case = open_case(case_id)
    return reason_decision(
        request,
        case,
        HOLD_SEPARATE,
        service=held_duplicate_separate,
        success=f"Case {case.pk} resolved: a separate enquiry; it is being written now.",
        url_name="console:case-hold-separate",
        title=f"Case {case.pk}: separate enquiry",
        submit="Let it through as a separate enquiry",
        explanation=(
            "The held submission goes ahead as usual: its own CRM record, task and "
            "confirmation email, within seconds."
        ),
    )
