"""Decisions on one case (POST only, behind the confirmation page): take, look up in
the CRM, try again, resolve, resolve with the record found, close, and send the email
again. Handing on to the group that can decide it (review/hand_on.py) takes a reason
alone (views_reason.py)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
)
from django.shortcuts import redirect, render

from idempotency_core.models import Operation, ReviewCase
from idempotency_core.review.cases import (
    case_close,
    case_mark_resolved,
    case_take_ownership,
)
from idempotency_core.review.email_cases import (
    email_may_have_gone,
    email_receipt_confirm,
    email_send_again,
)
from idempotency_core.review.lookup import (
    latest_lookup,
    lookup_found_reference,
    operation_destination_lookup,
)
from idempotency_core.review.refusals import ActionRefusedError
from idempotency_core.review.replay import UNPROVEN, operation_replay
from review_console.cases.decisions import (
    back_to_queue,
    case_act,
    case_decision,
    case_url,
    decision_data,
    found_ref,
    open_case,
)
from review_console.cases.presets import (
    CLOSE,
    EMAIL_RECEIVED,
    EMAIL_SEND_AGAIN,
    RESOLVE_FOUND,
)
from review_console.cases.presets import REPLAY as REPLAY_PRESETS
from review_console.cases.selectors import case_audit, replay_preview, replay_steps
from review_console.confirm import confirmed
from review_console.forms import (
    CloseForm,
    EmailSettleForm,
    ReplayForm,
    ResolveForm,
    ResolveFoundForm,
    TakeOwnershipForm,
)
from review_console.glossary import counted, step_label
from review_console.http import HtmxHttpRequest, require_POST
from review_console.permissions import (
    CHANGE_CASES,
    REPLAY,
    acting_user,
    console_permission,
    may_try_again,
)


def _operation_of(case: ReviewCase, to: str) -> Operation:
    """The case's operation, or 404 ("This case has no operation to `to`.")."""
    if case.operation is None:
        raise Http404(f"This case has no operation to {to}.")
    return case.operation


@require_POST
@console_permission(CHANGE_CASES)
def case_take(request: HttpRequest) -> HttpResponse:
    form = TakeOwnershipForm(request.POST)
    target = back_to_queue(request)
    if not form.is_valid() or not form.cleaned_data["case"]:
        messages.error(request, "Select at least one case to take.")
        return HttpResponseRedirect(target)
    result = case_take_ownership(
        case_ids=form.cleaned_data["case"],
        actor=acting_user(request),
        take_over=form.cleaned_data["take_over"],
    )
    if result.taken:
        messages.success(request, f"You now own {counted(len(result.taken), 'case')}.")
    if result.skipped:
        messages.warning(
            request,
            f"{counted(len(result.skipped), 'case')} left as they were: already yours, owned by "
            "someone else, or no longer open.",
        )
    return HttpResponseRedirect(target)


@require_POST
@console_permission(CHANGE_CASES)
def case_lookup(request: HtmxHttpRequest, case_id: int) -> HttpResponse:
    case = open_case(case_id)
    operation = _operation_of(case, "look up")
    result = operation_destination_lookup(
        operation_id=operation.pk, actor=acting_user(request), case=case
    )
    if request.htmx:
        # The result in place, and the case's audit trail (now with this lookup) with it.
        return render(
            request,
            "review_console/cases/case_lookup_response.html",
            {
                "lookup": latest_lookup(operation),
                "audit": case_audit(case),
                "oob": True,
                "case": case,
                "offer_resolve": case.status in ReviewCase.OPEN_STATUSES,
                "found_ref": found_ref(operation),
            },
        )
    level = {True: messages.SUCCESS, False: messages.INFO, None: messages.WARNING}[result.found]
    words = {
        True: "it is there.",
        False: "it is not there.",
        None: "the CRM could not say; check it by hand.",
    }
    messages.add_message(request, level, f"Looked up in the CRM: {words[result.found]}")
    return redirect(f"{case_url(case)}#operation-{case.operation_id}")


@require_POST
@console_permission(CHANGE_CASES)
def case_replay(request: HttpRequest, case_id: int) -> HttpResponse:
    case = open_case(case_id)
    operation = _operation_of(case, "replay")
    data, initial = decision_data(request, REPLAY_PRESETS, irreversible=True)
    form = ReplayForm(data, initial=initial)
    preview = replay_preview(operation)
    if not may_try_again(request.user, preview):
        raise PermissionDenied(UNPROVEN)
    if not preview["needs_check"] or not request.user.has_perm(REPLAY):
        # The destination recognises a repeat: there is nothing to confirm.
        del form.fields["destination_checked"]
    return case_decision(
        request,
        case,
        form,
        act=lambda data: operation_replay(
            operation_id=operation.pk,
            actor=acting_user(request),
            reason=data["reason"],
            destination_checked=data.get("destination_checked", False),
        ),
        success=f"“{step_label(operation.step)}” will be tried again shortly, with the same "
        "protections as before. The case stays in progress and is resolved when it works.",
        url_name="console:case-replay",
        title=f"Try again: {step_label(operation.step)}",
        submit="Try again",
        explanation="",
        template="review_console/cases/replay_confirm.html",
        more=lambda: {
            "operation": operation,
            "replay": preview,
            "replay_steps": replay_steps(operation),
            "lookup": latest_lookup(operation),
        },
    )


@require_POST
@console_permission(CHANGE_CASES)
def case_resolve(request: HttpRequest, case_id: int) -> HttpResponse:
    case = open_case(case_id)
    if confirmed(request):
        form = ResolveForm(request.POST)
    else:
        lookup = latest_lookup(case.operation) if case.operation else None
        found = (lookup.details.get("refs") or [""])[0] if lookup else ""
        form = ResolveForm(initial={"destination_ref": request.POST.get("destination_ref", found)})
    step = f"“{step_label(case.operation.step)}”" if case.operation else "the effect"
    return case_decision(
        request,
        case,
        form,
        act=case_act(
            request, case, case_mark_resolved, fields={"destination_ref": "destination_ref"}
        ),
        success=lambda data, _: (
            f"Case {case.pk} resolved with reference {data['destination_ref']}."
        ),
        url_name="console:case-resolve",
        title=f"Mark case {case.pk} resolved",
        submit="Mark resolved",
        explanation=(
            f"You found {step} in the CRM. Its record number becomes the step's reference, "
            "the step counts as done, and the next step runs. The number is checked against "
            "the CRM first."
        ),
    )


@require_POST
@console_permission(CHANGE_CASES)
def case_resolve_found(request: HttpRequest, case_id: int) -> HttpResponse:
    """Resolve with the record the last lookup found: the case page's one button, then
    the reason. The reference is the one the lookup stored, read here again, never
    taken from the request; the posted `lookup` only guards against a newer lookup
    having replaced the one the reviewer saw."""
    case = open_case(case_id)
    operation = _operation_of(case, "resolve with a record")
    try:
        ref, lookup = lookup_found_reference(operation)
    except ActionRefusedError as exc:
        messages.error(request, str(exc))
        return redirect(case_url(case))
    data, initial = decision_data(request, RESOLVE_FOUND)
    form = ResolveFoundForm(data, initial={"lookup": lookup.pk, **initial})
    if form.is_valid() and form.cleaned_data["lookup"] != lookup.pk:
        form.add_error(None, "A newer lookup came in since this page opened: check it below.")
    step = step_label(operation.step)
    return case_decision(
        request,
        case,
        form,
        act=case_act(request, case, case_mark_resolved, destination_ref=ref, from_lookup=lookup.pk),
        success=f"Case {case.pk} resolved: it is in the CRM (the record the lookup found).",
        url_name="console:case-resolve-found",
        title=f"Resolve with record {ref}",
        submit=f"Resolve with {ref}",
        explanation=(
            f"The lookup {lookup.at:%Y-%m-%d %H:%M} UTC found “{step}” in the CRM as record "
            f"{ref}. It becomes the step's reference (checked against the CRM once more), "
            "the step counts as done, the next steps run, and nothing is sent twice."
        ),
    )


@require_POST
@console_permission(CHANGE_CASES)
def case_close_view(request: HttpRequest, case_id: int) -> HttpResponse:
    case = open_case(case_id)
    code = request.POST.get("preset", "")
    data, initial = decision_data(request, CLOSE, resolution_code=code)
    form = CloseForm(data, initial=initial)
    explanation = "Closing ends the case without the effect being proven."
    if case.operation is not None and case.operation.status == "needs_review":
        explanation += (
            f" “{step_label(case.operation.step)}” and the later steps of this submission that "
            "have not run are cancelled and will never run. Nothing already done is undone."
        )
    return case_decision(
        request,
        case,
        form,
        act=case_act(request, case, case_close, fields={"resolution_code": "resolution_code"}),
        success=f"Case {case.pk} closed. It can be reopened if that was wrong.",
        url_name="console:case-close",
        title=f"Close case {case.pk}",
        submit="Close the case",
        explanation=explanation,
    )


@require_POST
@console_permission(CHANGE_CASES)
def case_email(request: HttpRequest, case_id: int) -> HttpResponse:
    """An email case settled by what the customer says (review/email_cases.py)."""
    case = open_case(case_id)
    if not email_may_have_gone(case):
        raise Http404("This case is not about an email that may have gone out.")
    # The preset says which answer the customer gave (one button each on the case page).
    preset = request.POST.get("preset", "")
    outcome = request.POST.get("outcome", "") or (
        "received"
        if preset in EMAIL_RECEIVED
        else "send_again"
        if preset in EMAIL_SEND_AGAIN
        else ""
    )
    presets = EMAIL_RECEIVED if outcome == "received" else EMAIL_SEND_AGAIN
    data, initial = decision_data(
        request, presets, irreversible=outcome != "received", outcome=outcome
    )
    form = EmailSettleForm(data, initial=initial)

    def act(data: dict[str, Any]) -> object:
        settle = email_receipt_confirm if data["outcome"] == "received" else email_send_again
        return settle(case_id=case.pk, actor=acting_user(request), reason=data["reason"])

    return case_decision(
        request,
        case,
        form,
        act=act,
        success=lambda data, _: (
            f"Case {case.pk} resolved: the customer received the email."
            if data["outcome"] == "received"
            else "The email will be sent again within seconds, as a new email with its own "
            "key; the case is resolved when the mail server accepts it."
        ),
        url_name="console:case-email",
        title="Did the customer get the email?",
        submit="Confirm",
        explanation=(
            "The connection to the mail service was cut off, so nobody can tell whether the "
            "email went out, and an email cannot be looked up. Ask the customer. If they "
            "have it, the case is resolved and nothing is sent. If not, a new email is sent, "
            "once, linked to the first."
        ),
    )
