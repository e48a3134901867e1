"""Console action on an enquiry the CRM's duplicate rule matched to existing records:
"Link to record X" (Reviewers), behind the usual confirmation page with a reason; its
"Create anyway" (Replay admins, only where the rule alerts) takes a reason alone
(views_reason.py). The decisions are the services of
idempotency_core/review/duplicate_rule.py.
"""

from __future__ import annotations

from django import forms
from django.http import HttpRequest, HttpResponse

from idempotency_core.review.duplicate_rule import (
    duplicate_rule_link,
)
from review_console.cases.decisions import (
    case_act,
    case_decision,
    decision_data,
    open_case,
)
from review_console.cases.presets import LINK_RECORD
from review_console.forms import ReasonForm
from review_console.http import require_POST
from review_console.permissions import CHANGE_CASES, console_permission


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
