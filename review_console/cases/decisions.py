"""What every decision on one case shares: the case opened, the form data (a preset
button or the confirmation's post), and the confirmation page in front of the service."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.http import (
    HttpRequest,
    HttpResponse,
)
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from idempotency_core.models import ReviewCase
from idempotency_core.review.lookup import (
    lookup_found_reference,
)
from idempotency_core.review.refusals import ActionRefusedError
from review_console.cases.presets import (
    Preset,
    with_preset,
)
from review_console.confirm import Done, confirmed, confirmed_action
from review_console.forms import ReasonForm
from review_console.http import require_POST
from review_console.permissions import CHANGE_CASES, acting_user, console_permission


def case_url(case: ReviewCase | int) -> str:
    return reverse("console:case-detail", args=[getattr(case, "pk", case)])


def back_to_queue(request: HttpRequest) -> str:
    """Where a decision taken from the queue returns: the posted `next`, when it is this
    site's, else the queue."""
    target = request.POST.get("next") or reverse("console:case-list")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("console:case-list")
    return target


def decision_data(
    request: HttpRequest,
    presets: dict[str, Preset],
    *,
    irreversible: bool = False,
    **fields: str,
) -> tuple[Any, dict[str, Any]]:
    """(form data, initial values) of a decision. A confirmation posts its data as it is.
    A preset button (one click, its reason named in presets.py, the optional note added)
    decides at once, unless the decision cannot be undone (a replay, a merge, an email
    sent again): then it opens the confirmation page with the reason filled in. Anything
    else opens the confirmation page empty."""
    given = {name: value for name, value in fields.items() if value}
    if confirmed(request):
        return request.POST, {}
    filled = with_preset(request.POST, presets, **given)
    if filled is None:
        return None, given
    if irreversible:
        return None, {"reason": filled["reason"], **given}
    return filled, {}


def open_case(case_id: int) -> ReviewCase:
    return get_object_or_404(
        ReviewCase.objects.select_related("event__source", "operation__destination", "owner"),
        pk=case_id,
    )


def found_ref(operation: Any) -> str:
    """The one record the last lookup found, if resolving with it is possible now."""
    try:
        return lookup_found_reference(operation)[0]
    except ActionRefusedError:
        return ""


def case_decision(
    request: HttpRequest,
    case: ReviewCase,
    form: forms.Form,
    *,
    act: Callable[[dict[str, Any]], object],
    success: Done,
    url_name: str,
    title: str,
    submit: str,
    explanation: str,
    done_url: str | None = None,
    template: str = "review_console/confirm.html",
    more: Callable[[], dict[str, Any]] | None = None,
) -> HttpResponse:
    """A decision on one case behind the confirmation page (`confirmed_action`): done,
    or the page (again, with the refusal and the typed reason). `more` is what only
    the page shows, read only when it is shown."""

    def page() -> HttpResponse:
        return render(
            request,
            template,
            {
                "case": case,
                "form": form,
                "title": title,
                "action": reverse(url_name, args=[case.pk]),
                "submit": submit,
                "explanation": explanation,
                **(more() if more else {}),
            },
        )

    return confirmed_action(
        request,
        form,
        act=act,
        success=success,
        done_url=done_url or case_url(case),
        page=page,
    )


def case_act(
    request: HttpRequest,
    case: ReviewCase,
    service: Callable[..., object],
    *,
    fields: dict[str, str] | None = None,
    **given: Any,
) -> Callable[[dict[str, Any]], object]:
    """The `act` of a decision taken by a case service: `service(case_id=, actor=,
    reason=)` with the form's `fields` (the service's argument: the form's field) and
    the `given` arguments."""

    def act(data: dict[str, Any]) -> object:
        chosen = {argument: data[field] for argument, field in (fields or {}).items()}
        return service(
            case_id=case.pk,
            actor=acting_user(request),
            reason=data["reason"],
            **chosen,
            **given,
        )

    return act


@dataclass(frozen=True)
class ReasonDecision:
    """A decision whose one input is its reason (a preset's or typed), taken by
    `service(case_id=, actor=, reason=)` behind the confirmation page. Its texts name the
    case as `{case}`, and whatever `words` says of the case by its name (`{group}`)."""

    presets: dict[str, Preset]
    service: Callable[..., object]
    success: str
    title: str
    submit: str
    explanation: str
    permission: str = CHANGE_CASES
    # Cannot be undone: a preset button opens the confirmation page, reason filled in.
    irreversible: bool = False
    words: Callable[[ReviewCase], dict[str, str]] | None = None


def reason_decision_view(name: str, decision: ReasonDecision) -> Callable[..., HttpResponse]:
    """The view of `decision`, routed as console:`name`: POST only, behind its permission."""

    @require_POST
    @console_permission(decision.permission)
    def view(request: HttpRequest, case_id: int) -> HttpResponse:
        case = open_case(case_id)
        words = {"case": case.pk, **(decision.words(case) if decision.words else {})}
        data, initial = decision_data(request, decision.presets, irreversible=decision.irreversible)
        return case_decision(
            request,
            case,
            ReasonForm(data, initial=initial),
            act=case_act(request, case, decision.service),
            success=decision.success.format(**words),
            url_name=f"console:{name}",
            title=decision.title.format(**words),
            submit=decision.submit.format(**words),
            explanation=decision.explanation.format(**words),
        )

    view.__name__ = view.__qualname__ = name.replace("-", "_")
    return view
