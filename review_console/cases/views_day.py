"""A reviewer's day: the next case, contact details when needed, several cases settled
from the queue at once, and a cause's group settled in one decision (reopening takes a
reason alone: views_reason.py).

Every view here is a POST-only action (GET answers 405), permission-checked like
the case actions of views.py, and decided by a service of idempotency_core/review,
which writes the audit entry.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseRedirect,
)
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import urlencode

from idempotency_core.review.cases import (
    case_take_next,
    cases_settle_many,
)
from idempotency_core.review.contact import REVEAL_HOURS, contact_reveal
from idempotency_core.review.refusals import ActionRefusedError
from review_console.cases.causes import (
    Cause,
    MomentInvalidError,
    case_cause,
    cause_close,
    cause_hold_stop,
    seen_moment,
)
from review_console.cases.decisions import (
    back_to_queue,
    case_decision,
    case_url,
    decision_data,
    open_case,
)
from review_console.cases.filters import CaseIdsField
from review_console.cases.presets import CLOSE, NOT_DUPLICATE, REVEAL, preset_reason
from review_console.cases.selectors import next_case_candidates
from review_console.forms import ReasonForm
from review_console.glossary import counted
from review_console.http import require_POST
from review_console.models import CauseHold
from review_console.permissions import CHANGE_CASES, VIEW_CONTACT, acting_user, console_permission


@require_POST
@console_permission(CHANGE_CASES)
def case_next(request: HttpRequest) -> HttpResponse:
    """Takes the oldest open case nobody owns (review/cases.py, a conditional UPDATE:
    two reviewers never get the same one) and opens it; or, when it shares its cause
    with other open cases, opens their group, whose one decision settles them all."""
    actor = acting_user(request)
    case = case_take_next(actor=actor, candidates=next_case_candidates(actor))
    if case is None:
        messages.info(request, "Nothing waits for a person: every open case has an owner.")
        return redirect(reverse("console:case-list") + "?owner=me")
    shared = case_cause(case)
    if shared is not None and shared[1] > 1:
        cause, count = shared
        messages.info(
            request,
            f"Case {case.pk} is yours. It has the same cause as {counted(count - 1, 'other case')}"
            ": decide all of them together here, or open one of them below.",
        )
        return redirect(reverse("console:case-list") + "?" + urlencode({"cause": cause.token()}))
    return redirect(case_url(case))


@require_POST
@console_permission(CHANGE_CASES)
def case_reveal(request: HttpRequest, case_id: int) -> HttpResponse:
    """Shows this one submission's contact details to a reviewer who may not see them
    otherwise, with a reason (review/contact.py: audited, shown to administrators)."""
    case = open_case(case_id)
    done = f"{case_url(case)}#customer-title"
    event = case.event
    if event is None or request.user.has_perm(VIEW_CONTACT):
        return redirect(done)
    data, initial = decision_data(request, REVEAL)
    return case_decision(
        request,
        case,
        ReasonForm(data, initial=initial),
        act=lambda data: contact_reveal(
            event=event, actor=acting_user(request), reason=data["reason"], case=case
        ),
        success=f"The customer's contact details are shown to you for {REVEAL_HOURS} hours. "
        "This is recorded, with your reason.",
        url_name="console:case-reveal",
        title="Show the customer's contact details",
        submit="Show them",
        explanation=(
            "You see this submission's name, email and phone for "
            f"{REVEAL_HOURS} hours. Your reason is recorded and shown to the administrators."
        ),
        done_url=done,
    )


@require_POST
@console_permission(CHANGE_CASES)
def cases_settle(request: HttpRequest) -> HttpResponse:
    """The queue's "settle selected": close with a category, or "not a duplicate", each
    ticked case through its one-case service (same guards, one audit entry each)."""
    target = back_to_queue(request)
    try:
        ids = CaseIdsField(required=False).clean(request.POST.getlist("case"))
    except Exception:
        ids = []
    preset = request.POST.get("preset", "")
    decision = "not_duplicate" if preset in NOT_DUPLICATE else "close"
    reason = preset_reason(
        NOT_DUPLICATE if decision == "not_duplicate" else CLOSE,
        preset,
        request.POST.get("note", ""),
    )
    if not ids or reason is None:
        messages.error(request, "Tick at least one case, then press the decision.")
        return HttpResponseRedirect(target)
    try:
        result = cases_settle_many(
            case_ids=ids,
            actor=acting_user(request),
            decision=decision,
            reason=reason,
            resolution_code=preset if decision == "close" else "",
        )
    except ActionRefusedError as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(target)
    if result.settled:
        verb = "Closed" if decision == "close" else "Resolved as not duplicates:"
        messages.success(request, f"{verb} {counted(len(result.settled), 'case')}.")
    for case_id, why in result.refused[:10]:
        messages.warning(request, f"Case {case_id} left as it was: {why}")
    return HttpResponseRedirect(target)


@require_POST
@console_permission(CHANGE_CASES)
def cause_settle(request: HttpRequest) -> HttpResponse:
    """A group's one decision: close every case of the cause the reviewer saw (or, with
    `since`, those a hold kept back), each by its own service and audit entry, and hold
    the cause for the hours chosen (causes.py)."""
    target = back_to_queue(request)
    preset = request.POST.get("preset", "")
    reason = preset_reason(CLOSE, preset, request.POST.get("note", ""))
    try:
        if reason is None:
            raise ActionRefusedError("Choose why they are closed.")
        since = request.POST.get("since", "")
        result = cause_close(
            cause=Cause.from_token(request.POST.get("cause", "")),
            seen_until=seen_moment(request.POST.get("seen_until", "")),
            actor=acting_user(request),
            resolution_code=preset,
            reason=reason,
            hold_hours=_hours(request.POST.get("hold_hours", "0")),
            since=seen_moment(since) if since else None,
        )
    except MomentInvalidError as exc:
        return HttpResponseBadRequest(str(exc), content_type="text/plain; charset=utf-8")
    except ActionRefusedError as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(target)
    done = f"Closed {counted(len(result.closed), 'case')} with the same cause."
    if result.hold is not None:
        done += (
            " New cases of this cause wait in its group, not one by one, for "
            f"{counted(result.hold.hours, 'hour')}."
        )
    messages.success(request, done)
    for case_id, why in result.refused[:10]:
        messages.warning(request, f"Case {case_id} left as it was: {why}")
    return HttpResponseRedirect(target)


def _hours(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return -1  # refused by the service: not one of the hours offered


@require_POST
@console_permission(CHANGE_CASES)
def cause_hold_stop_view(request: HttpRequest, hold_id: int) -> HttpResponse:
    """Stops holding a cause: its cases are listed one by one again."""
    target = back_to_queue(request)
    try:
        cause_hold_stop(
            hold_id=hold_id,
            actor=acting_user(request),
            reason="Stopped holding the cause: list its cases one by one again",
        )
    except CauseHold.DoesNotExist:
        raise Http404("No such hold.") from None
    except ActionRefusedError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Its cases are listed one by one again.")
    return HttpResponseRedirect(target)
