"""Console actions on an enquiry the CRM's duplicate rule matched to existing records:
"Link to record X" (Reviewers) and "Create anyway" (Replay admins, only where the rule
alerts), each behind the usual confirmation page with a reason. The decisions are the
services of idempotency_core/review/duplicate_rule.py.
"""

from __future__ import annotations

from django import forms
from django.http import HttpRequest, HttpResponse

from idempotency_core.review.duplicate_rule import (
    duplicate_rule_create_anyway,
    duplicate_rule_link,
)
from review_console.cases.decisions import (
    case_act,
    case_decision,
    decision_data,
    open_case,
    reason_decision,
)
from review_console.cases.presets import CREATE_ANYWAY, LINK_RECORD
from review_console.forms import ReasonForm
from review_console.http import require_POST
from review_console.permissions import CHANGE_CASES, REPLAY, console_permission


class LinkRecordForm(ReasonForm):
    record = forms.CharField(widget=forms.HiddenInput, strip=True)


@require_POST
@console_permission(CHANGE_CASES)
def case_duplicate_rule_link(request: HttpRequest, case_id: int) -> HttpResponse:
    case = open_case(case_id)
    record = request.POST.get("record", "").strip()
    data, initial = decision_data(request, LINK_RECORD, record=record)
    return case_decision(
        request,
        case,
        LinkRecordForm(data, initial={"record": record, **initial}),
        act=case_act(request, case, duplicate_rule_link, fields={"record_id": "record"}),
        success=f"Case {case.pk} resolved: the enquiry is linked to the record the CRM matched.",
        url_name="console:case-duplicate-rule-link",
        title=f"Case {case.pk}: link to record {record}",
        submit=f"Link to record {record}",
        explanation=(
            f"The enquiry is taken to be CRM record {record}, which the CRM matched: no new "
            "record is created, and the task and the confirmation email follow on that record."
        ),
    )


@require_POST
@console_permission(REPLAY)
def case_duplicate_rule_create(request: HttpRequest, case_id: int) -> HttpResponse:
    case = open_case(case_id)
    return reason_decision(
        request,
        case,
        CREATE_ANYWAY,
        service=duplicate_rule_create_anyway,
        irreversible=True,
        success=f"Case {case.pk}: the enquiry is being created anyway, as a second record.",
        url_name="console:case-duplicate-rule-create",
        title=f"Case {case.pk}: create anyway",
        submit="Create a second record anyway",
        explanation=(
            "The enquiry is sent to the CRM again with its original reference, telling it "
            "to allow the duplicate: a second record next to the one it matched, then the "
            "task and the confirmation email."
        ),
    )
