"""Staff views of the review console.

Pages are GET; actions are POST-only (GET answers 405) and go through a
confirmation page that asks for a reason: the button on the case page POSTs
without `confirm`, which renders the confirmation; the confirmation POSTs with
`confirm=yes` and a reason, which calls the service, adds a message and
redirects back to the case. Every decision is taken by a service in
`idempotency_core`, so the console cannot bypass what protects normal processing.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import BadRequest, PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.middleware import HtmxDetails

from idempotency_core.models import AuditEntry, ReviewCase
from idempotency_core.review.cases import (
    case_close,
    case_mark_not_duplicate,
    case_mark_resolved,
    case_reopen_check,
    case_take_ownership,
)
from idempotency_core.review.comparison import duplicate_records_fetch
from idempotency_core.review.duplicate_rule import create_anyway_offered, matched_records
from idempotency_core.review.email_cases import (
    email_may_have_gone,
    email_receipt_confirm,
    email_send_again,
    is_email_case,
)
from idempotency_core.review.lookup import (
    latest_lookup,
    lookup_found_reference,
    operation_destination_lookup,
)
from idempotency_core.review.merge import (
    DUPLICATE_KINDS,
    duplicate_merge_request,
    duplicate_record_refs,
)
from idempotency_core.review.refusals import ActionRefusedError
from idempotency_core.review.replay import UNPROVEN, operation_replay
from review_console import selectors
from review_console.bulk import bulk_replay_counts, bulk_replay_start, filter_refusal
from review_console.causes import (
    HOLD_CHOICES,
    cause_groups,
    cause_words,
    holds_in_force,
    without_held,
)
from review_console.field_tree import unreadable_view
from review_console.forms import (
    CloseForm,
    EmailSettleForm,
    MergeForm,
    ReasonForm,
    ReplayForm,
    ResolveForm,
    ResolveFoundForm,
    TakeOwnershipForm,
)
from review_console.glossary import counted, step_label
from review_console.http import require_GET, require_POST
from review_console.masking import contact_for
from review_console.models import BulkReplayItem, BulkReplayJob
from review_console.permissions import (
    CHANGE_CASES,
    CHANGE_CONFIG,
    CHANGE_SOURCE,
    REPLAY,
    VIEW_AUDIT,
    VIEW_CASES,
    VIEW_CONTACT,
    acting_user,
    console_allows,
    console_permission,
    may_try_again,
)
from review_console.presets import (
    CLOSE,
    EMAIL_RECEIVED,
    EMAIL_SEND_AGAIN,
    MERGE,
    NOT_DUPLICATE,
    RESOLVE_FOUND,
    Preset,
    preset_reason,
    with_preset,
)
from review_console.presets import (
    REPLAY as REPLAY_PRESETS,
)
from review_console.story import case_story, destination_words, queue_line


class HtmxHttpRequest(HttpRequest):
    """A request that went through django-htmx's middleware (django-htmx's own typing
    recipe): `request.htmx` says whether htmx sent it."""

    htmx: HtmxDetails


def _case_url(case: ReviewCase | int) -> str:
    return reverse("console:case-detail", args=[getattr(case, "pk", case)])


def _confirmed(request: HttpRequest) -> bool:
    return request.POST.get("confirm") == "yes"


def _decision_data(
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
    if _confirmed(request):
        return request.POST, {}
    filled = with_preset(request.POST, presets, **given)
    if filled is None:
        return None, given
    if irreversible:
        return None, {"reason": filled["reason"], **given}
    return filled, {}


def _open_case(case_id: int) -> ReviewCase:
    return get_object_or_404(
        ReviewCase.objects.select_related("event__source", "operation__destination", "owner"),
        pk=case_id,
    )


def _querystring(request: HttpRequest, *, drop: tuple[str, ...] = ("after", "before")) -> str:
    params = request.GET.copy()
    for key in drop:
        params.pop(key, None)
    return params.urlencode()


# -- pages ----------------------------------------------------------------------


@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    """The console's home. A Settings admin who reviews no cases is sent to Settings,
    the only part of the console that is theirs, rather than a 403 after sign-in."""
    if not console_allows(request.user, VIEW_CASES) and console_allows(request.user, CHANGE_CONFIG):
        return redirect("console:settings")
    return _dashboard(request)


@console_permission(VIEW_CASES)
def _dashboard(request: HttpRequest) -> HttpResponse:
    # Reveals of contact details are shown to those who oversee the reviewers: Replay
    # admins and superusers (review/contact.py).
    overseer = request.user.has_perm(REPLAY)
    return render(
        request,
        "review_console/dashboard.html",
        {
            "summary": selectors.dashboard_summary(),
            "mine": selectors.my_cases(request.user),
            "reveals": selectors.recent_reveals() if overseer else None,
        },
    )


@require_GET
@console_permission(VIEW_CASES)
def case_list(request: HttpRequest) -> HttpResponse:
    filterset = selectors.case_filterset(request.GET, request=request)
    sort = request.GET.get("sort", selectors.DEFAULT_SORT)
    if sort not in selectors.SORTS:
        sort = selectors.DEFAULT_SORT
    groups: list[dict[str, Any]] = []
    if filterset.is_valid():
        holds = holds_in_force()
        # A held cause's new cases wait in its group, not in the list (causes.py), unless
        # the list is that cause's ("Show them").
        listed = filterset.qs if request.GET.get("cause") else without_held(filterset.qs, holds)
        page = selectors.keyset_page(
            listed,
            fields=selectors.SORTS[sort][1],
            after=request.GET.get("after", ""),
            before=request.GET.get("before", ""),
        )
        if not (request.GET.get("after") or request.GET.get("before") or request.GET.get("cause")):
            groups = cause_groups(filterset.qs, holds=holds)
            for group in groups:
                group["label"] = cause_words(group["cause"])
    else:
        page = selectors.KeysetPage(items=[])
    selectors.queue_customers(page.items, unmasked=request.user.has_perm(VIEW_CONTACT))
    for case in page.items:
        case.line = queue_line(case)
    chosen = [k for k in request.GET if k not in ("after", "before", "sort") and request.GET[k]]
    return render(
        request,
        "review_console/case_list.html",
        {
            "filters_active": len(chosen),
            "groups": groups,
            "now": timezone.now(),
            "hold_choices": HOLD_CHOICES[1:],
            "close_presets": list(CLOSE.values()),
            "chips": selectors.queue_chips(request.GET, request=request),
            "chip_groups": [("kind", "Kind"), ("owner", "Owner"), ("status", "Status")],
            "chosen_kinds": request.GET.getlist("kind"),
            "chosen_statuses": request.GET.getlist("status"),
            "filter": filterset,
            "page": page,
            "sort": sort,
            "sorts": [(key, label) for key, (label, _) in selectors.SORTS.items()],
            "querystring": _querystring(request),
            "filter_querystring": _querystring(request, drop=("after", "before", "sort")),
            "can_change": request.user.has_perm(CHANGE_CASES),
            "can_replay": request.user.has_perm(REPLAY),
        },
    )


@require_GET
@console_permission(VIEW_CASES)
def case_detail(request: HttpRequest, case_id: int) -> HttpResponse:
    case = _open_case(case_id)
    return render(request, "review_console/case_detail.html", _case_context(request, case))


def _case_context(request: HttpRequest, case: ReviewCase) -> dict[str, Any]:
    """Everything the case page shows; the two sentences on top come from story.py."""
    event = case.event
    user = request.user
    revealed = selectors.contact_revealed_to(user, event) if event is not None else None
    unmasked = user.has_perm(VIEW_CONTACT) or revealed is not None
    audit = selectors.case_audit(case)
    context: dict[str, Any] = {
        "case": case,
        "event": event,
        "payload": (event.payload or {}) if event is not None else {},
        "contact": contact_for(event.payload if event else None, unmasked=unmasked),
        "unmasked": unmasked,
        "revealed": revealed,
        "deliveries": selectors.event_deliveries(event) if event is not None else [],
        "operations": selectors.event_operations(event) if event is not None else [],
        "related": selectors.related_events(event) if event is not None else [],
        "audit": audit,
        "related_cases": selectors.related_cases(case, audit),
        "is_email": is_email_case(case),
        "email_undecided": email_may_have_gone(case),
        "is_open": case.status in ReviewCase.OPEN_STATUSES,
        "is_duplicate": case.kind in DUPLICATE_KINDS,
        # A held duplicate is settled by its own two decisions only; so is an enquiry the
        # CRM's duplicate rule matched.
        "is_held": case.kind in (ReviewCase.Kind.DUPLICATE_HELD, ReviewCase.Kind.DUPLICATE_RULE),
        "is_duplicate_rule": case.kind == ReviewCase.Kind.DUPLICATE_RULE,
        "matched_records": matched_records(case),
        "create_anyway": create_anyway_offered(case),
        # Creating past the CRM's duplicate rule may duplicate: Replay admins' alone,
        # whatever a Reviewer may try again.
        "can_create_anyway": user.has_perm(REPLAY),
        "can_change": user.has_perm(CHANGE_CASES),
        "can_replay": user.has_perm(REPLAY),
        "close_presets": list(CLOSE.values()),
        "where": destination_words(case.operation.destination if case.operation else None),
        "settled_by": selectors.settled_by(case, audit),
        "settled_note": selectors.settled_note(case, audit),
        "reopen": case_reopen_check(case),
    }
    if case.kind == ReviewCase.Kind.UNREADABLE:
        context["unreadable"] = unreadable_view(case, unmasked=unmasked)
    if case.operation is not None:
        _operation_context(context, case.operation)
        context["can_replay"] = may_try_again(user, context["replay"])
    story = case_story(
        case,
        customer=context["contact"]["name"] or "the customer",
        can_replay=context["can_replay"],
        can_lookup=bool(context.get("replay", {}).get("can_lookup")),
        audit=audit,
        can_map=user.has_perm(CHANGE_SOURCE),
        can_reopen=bool(context["reopen"].possible and context["can_change"]),
    )
    context["story"] = story
    context["waiting"] = story.tone == "info"
    return context


def _operation_context(context: dict[str, Any], operation: Any) -> None:
    context["replay"] = selectors.replay_preview(operation)
    context["lookup"] = latest_lookup(operation)
    context["found_ref"] = _found_ref(operation)
    # The safe action first: where an earlier try may have worked, the lookup and
    # "resolve with the record found" lead, and a replay is the second choice.
    context["safe_first"] = not context["email_undecided"] and (
        context["case"].kind in SAFE_FIRST_KINDS or context["replay"]["needs_check"]
    )


# Cases where an earlier try may have created the effect: look before trying again.
SAFE_FIRST_KINDS = (ReviewCase.Kind.AMBIGUOUS, ReviewCase.Kind.INTERRUPTED_SEND)


def _found_ref(operation: Any) -> str:
    """The one record the last lookup found, if resolving with it is possible now."""
    try:
        return lookup_found_reference(operation)[0]
    except ActionRefusedError:
        return ""


@require_GET
@console_permission(CHANGE_CASES)
def case_compare(request: HttpRequest, case_id: int) -> HttpResponse:
    """The merge page: records side by side, differences marked, survivor choice."""
    return _compare_page(request, _open_case(case_id), form=None)


def _compare_page(
    request: HttpRequest, case: ReviewCase, *, form: MergeForm | None
) -> HttpResponse:
    """The comparison, with `form` as posted (its errors and the typed note kept) or,
    when None, a fresh form with the older record chosen to stay."""
    if case.kind not in DUPLICATE_KINDS:
        raise Http404("Only suspected duplicates have a comparison.")
    records = duplicate_records_fetch(case)  # the reviewer asked: reads the CRM
    comparison = selectors.duplicate_comparison(
        case, records, unmasked=request.user.has_perm(VIEW_CONTACT)
    )
    refs = [c.ref for c in comparison["present"]]
    if form is None:
        form = MergeForm(initial={"survivor": refs[0] if refs else ""})
    return render(
        request,
        "review_console/merge_compare.html",
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


@require_GET
@console_permission(VIEW_AUDIT)
def audit_list(request: HttpRequest) -> HttpResponse:
    filterset = selectors.audit_filterset(request.GET)
    page = (
        selectors.keyset_page(
            filterset.qs,
            fields=("-at", "-id"),
            after=request.GET.get("after", ""),
            before=request.GET.get("before", ""),
        )
        if filterset.is_valid()
        else selectors.KeysetPage(items=[])
    )
    shown = audit_details_for(request.user)
    for entry in page.items:
        entry.details = shown(entry.details)
    return render(
        request,
        "review_console/audit_list.html",
        {
            "filter": filterset,
            "page": page,
            "querystring": _querystring(request),
        },
    )


# Details that name a secret by its first characters (a signing secret, a CAPTCHA
# key, an API key): shown only to those who manage sources (security review F11).
_SECRET_DETAILS = frozenset({"prefix", "secret_prefix", "previous_prefix", "prefixes"})


def audit_details_for(user: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """How this viewer reads an audit entry's details: as stored, or without secrets'
    first characters for a viewer who may not change sources."""
    if user.has_perm(CHANGE_SOURCE):
        return lambda details: details
    return lambda details: {
        key: "(shown to those who manage sources)" if key in _SECRET_DETAILS else value
        for key, value in (details or {}).items()
    }


class _Echo:
    def write(self, value: str) -> str:
        return value


# What a spreadsheet reads as the start of a formula (OWASP, "CSV Injection"): a
# reviewer's reason "=HYPERLINK(...)" must open as text, not run as a formula.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    return f"'{text}" if text.startswith(_FORMULA_STARTS) else text


@require_GET
@console_permission(VIEW_AUDIT)
def audit_export(request: HttpRequest) -> StreamingHttpResponse:
    """The filtered trail as CSV, streamed: an export of a year must not fill memory.
    Every cell that a spreadsheet would read as a formula is written as text."""
    filterset = selectors.audit_filterset(request.GET)
    rows = filterset.qs if filterset.is_valid() else AuditEntry.objects.none()
    writer = csv.writer(_Echo())
    shown = audit_details_for(request.user)

    def lines() -> Iterator[str]:
        yield writer.writerow(
            ["at", "actor", "action", "case", "event", "operation", "reason", "details"]
        )
        for entry in rows.iterator(chunk_size=2000):
            cells = [
                entry.at.isoformat(),
                entry.actor_label,
                entry.action,
                entry.case_id or "",
                entry.event_id or "",
                entry.operation_id or "",
                entry.reason,
                # JSON, not Python's repr: the details are read by other tools.
                json.dumps(shown(entry.details), ensure_ascii=False, sort_keys=True),
            ]
            yield writer.writerow([_csv_cell(cell) for cell in cells])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="onefold-audit.csv"'
    return response


@require_GET
@console_permission(VIEW_CASES)
def bulk_replay_list(request: HttpRequest) -> HttpResponse:
    """The last bulk replays, newest first (a new one starts from the queue's filter)."""
    jobs = BulkReplayJob.objects.select_related("created_by").order_by("-created_at", "-pk")[:100]
    return render(request, "review_console/bulk_replay_list.html", {"jobs": jobs})


@require_GET
@console_permission(VIEW_CASES)
def bulk_replay_detail(request: HtmxHttpRequest, job_id: int) -> HttpResponse:
    job = get_object_or_404(BulkReplayJob.objects.select_related("created_by"), pk=job_id)
    counts = bulk_replay_counts(job)
    done = sum(counts[s] for s in BulkReplayItem.DONE)
    problems = job.items.exclude(
        status__in=[BulkReplayItem.Status.REPLAYED, BulkReplayItem.Status.PENDING]
    ).order_by("pk")[:200]
    template = "_bulk_replay_progress.html" if request.htmx else "bulk_replay_detail.html"
    return render(
        request,
        f"review_console/{template}",
        {
            "job": job,
            "counts": counts,
            "done": done,
            "percent": round(done / job.total * 100) if job.total else 0,
            "problems": problems,
            "running": job.status != BulkReplayJob.Status.FINISHED,
        },
    )


# -- actions (POST only) ----------------------------------------------------------


def _confirm_action(
    request: HttpRequest,
    form: forms.Form,
    *,
    act: Callable[[dict[str, Any]], object],
    success: str | Callable[[dict[str, Any]], str],
    done_url: str,
) -> HttpResponse | None:
    """Runs a confirmed action: a valid form calls the service, then a message and a
    redirect to `done_url`. The console's one mapping of a service's refusal
    (`ActionRefusedError`): it becomes the form's error, and None tells the view to
    render the page again with it (the typed reason kept)."""
    if not (form.is_bound and form.is_valid()):
        return None
    try:
        act(form.cleaned_data)
    except ActionRefusedError as exc:
        form.add_error(None, str(exc))
        return None
    messages.success(request, success if isinstance(success, str) else success(form.cleaned_data))
    return redirect(done_url)


def _confirm_page(
    request: HttpRequest,
    *,
    case: ReviewCase,
    form: Any,
    title: str,
    action: str,
    submit: str,
    explanation: str,
    template: str = "review_console/confirm.html",
    **extra: Any,
) -> HttpResponse:
    return render(
        request,
        template,
        {
            "case": case,
            "form": form,
            "title": title,
            "action": action,
            "submit": submit,
            "explanation": explanation,
            **extra,
        },
    )


def _case_decision(
    request: HttpRequest,
    case: ReviewCase,
    form: forms.Form,
    *,
    act: Callable[[dict[str, Any]], object],
    success: str,
    url_name: str,
    title: str,
    submit: str,
    explanation: str,
    done_url: str | None = None,
) -> HttpResponse:
    """A decision on one case behind the confirmation page: done, or the page (again,
    with the refusal and the typed reason)."""
    done = _confirm_action(
        request, form, act=act, success=success, done_url=done_url or _case_url(case)
    )
    if done is not None:
        return done
    return _confirm_page(
        request,
        case=case,
        form=form,
        title=title,
        action=reverse(url_name, args=[case.pk]),
        submit=submit,
        explanation=explanation,
    )


@require_POST
@console_permission(CHANGE_CASES)
def case_take(request: HttpRequest) -> HttpResponse:
    form = TakeOwnershipForm(request.POST)
    target = request.POST.get("next") or reverse("console:case-list")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = reverse("console:case-list")
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
    case = _open_case(case_id)
    operation = case.operation
    if operation is None:
        raise Http404("This case has no operation to look up.")
    result = operation_destination_lookup(
        operation_id=operation.pk, actor=acting_user(request), case=case
    )
    if request.htmx:
        # The result in place, and the case's audit trail (now with this lookup) with it.
        return render(
            request,
            "review_console/case_lookup_response.html",
            {
                "lookup": latest_lookup(operation),
                "audit": selectors.case_audit(case),
                "oob": True,
                "case": case,
                "offer_resolve": case.status in ReviewCase.OPEN_STATUSES,
                "found_ref": _found_ref(operation),
            },
        )
    level = {True: messages.SUCCESS, False: messages.INFO, None: messages.WARNING}[result.found]
    words = {
        True: "it is there.",
        False: "it is not there.",
        None: "the CRM could not say; check it by hand.",
    }
    messages.add_message(request, level, f"Looked up in the CRM: {words[result.found]}")
    return redirect(f"{_case_url(case)}#operation-{case.operation_id}")


@require_POST
@console_permission(CHANGE_CASES)
def case_replay(request: HttpRequest, case_id: int) -> HttpResponse:
    case = _open_case(case_id)
    operation = case.operation
    if operation is None:
        raise Http404("This case has no operation to replay.")
    data, initial = _decision_data(request, REPLAY_PRESETS, irreversible=True)
    form = ReplayForm(data, initial=initial)
    preview = selectors.replay_preview(operation)
    if not may_try_again(request.user, preview):
        raise PermissionDenied(UNPROVEN)
    if not preview["needs_check"] or not request.user.has_perm(REPLAY):
        # The destination recognises a repeat: there is nothing to confirm.
        del form.fields["destination_checked"]
    done = _confirm_action(
        request,
        form,
        act=lambda data: operation_replay(
            operation_id=operation.pk,
            actor=acting_user(request),
            reason=data["reason"],
            destination_checked=data.get("destination_checked", False),
        ),
        success=f"“{step_label(operation.step)}” will be tried again shortly, with the same "
        "protections as before. The case stays in progress and is resolved when it works.",
        done_url=_case_url(case),
    )
    if done is not None:
        return done
    return _confirm_page(
        request,
        case=case,
        form=form,
        title=f"Try again: {step_label(operation.step)}",
        action=reverse("console:case-replay", args=[case.pk]),
        submit="Try again",
        explanation="",
        template="review_console/replay_confirm.html",
        operation=operation,
        replay=preview,
        replay_steps=selectors.replay_steps(operation),
        lookup=latest_lookup(operation),
    )


@require_POST
@console_permission(CHANGE_CASES)
def case_resolve(request: HttpRequest, case_id: int) -> HttpResponse:
    case = _open_case(case_id)
    if _confirmed(request):
        form = ResolveForm(request.POST)
    else:
        lookup = latest_lookup(case.operation) if case.operation else None
        found = (lookup.details.get("refs") or [""])[0] if lookup else ""
        form = ResolveForm(initial={"destination_ref": request.POST.get("destination_ref", found)})
    done = _confirm_action(
        request,
        form,
        act=lambda data: case_mark_resolved(
            case_id=case.pk,
            actor=acting_user(request),
            destination_ref=data["destination_ref"],
            reason=data["reason"],
        ),
        success=lambda data: f"Case {case.pk} resolved with reference {data['destination_ref']}.",
        done_url=_case_url(case),
    )
    if done is not None:
        return done
    step = f"“{step_label(case.operation.step)}”" if case.operation else "the effect"
    return _confirm_page(
        request,
        case=case,
        form=form,
        title=f"Mark case {case.pk} resolved",
        action=reverse("console:case-resolve", args=[case.pk]),
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
    case = _open_case(case_id)
    if case.operation is None:
        raise Http404("This case has no operation to resolve with a record.")
    try:
        ref, lookup = lookup_found_reference(case.operation)
    except ActionRefusedError as exc:
        messages.error(request, str(exc))
        return redirect(_case_url(case))
    data, initial = _decision_data(request, RESOLVE_FOUND)
    form = ResolveFoundForm(data, initial={"lookup": lookup.pk, **initial})
    if form.is_valid() and form.cleaned_data["lookup"] != lookup.pk:
        form.add_error(None, "A newer lookup came in since this page opened: check it below.")
    done = _confirm_action(
        request,
        form,
        act=lambda data: case_mark_resolved(
            case_id=case.pk,
            actor=acting_user(request),
            destination_ref=ref,
            reason=data["reason"],
            from_lookup=lookup.pk,
        ),
        success=f"Case {case.pk} resolved: it is in the CRM (the record the lookup found).",
        done_url=_case_url(case),
    )
    if done is not None:
        return done
    step = step_label(case.operation.step)
    return _confirm_page(
        request,
        case=case,
        form=form,
        title=f"Resolve with record {ref}",
        action=reverse("console:case-resolve-found", args=[case.pk]),
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
    case = _open_case(case_id)
    code = request.POST.get("preset", "")
    data, initial = _decision_data(request, CLOSE, resolution_code=code)
    form = CloseForm(data, initial=initial)
    done = _confirm_action(
        request,
        form,
        act=lambda data: case_close(
            case_id=case.pk,
            actor=acting_user(request),
            resolution_code=data["resolution_code"],
            reason=data["reason"],
        ),
        success=f"Case {case.pk} closed. It can be reopened if that was wrong.",
        done_url=_case_url(case),
    )
    if done is not None:
        return done
    explanation = "Closing ends the case without the effect being proven."
    if case.operation is not None and case.operation.status == "needs_review":
        explanation += (
            f" “{step_label(case.operation.step)}” and the later steps of this submission that "
            "have not run are cancelled and will never run. Nothing already done is undone."
        )
    return _confirm_page(
        request,
        case=case,
        form=form,
        title=f"Close case {case.pk}",
        action=reverse("console:case-close", args=[case.pk]),
        submit="Close the case",
        explanation=explanation,
    )


@require_POST
@console_permission(CHANGE_CASES)
def case_not_duplicate(request: HttpRequest, case_id: int) -> HttpResponse:
    case = _open_case(case_id)
    data, initial = _decision_data(request, NOT_DUPLICATE)
    form = ReasonForm(data, initial=initial)
    done = _confirm_action(
        request,
        form,
        act=lambda data: case_mark_not_duplicate(
            case_id=case.pk, actor=acting_user(request), reason=data["reason"]
        ),
        success=f"Case {case.pk} resolved: not a duplicate, both records kept.",
        done_url=_case_url(case),
    )
    if done is not None:
        return done
    return _confirm_page(
        request,
        case=case,
        form=form,
        title=f"Case {case.pk}: not a duplicate",
        action=reverse("console:case-not-duplicate", args=[case.pk]),
        submit="Resolve as not a duplicate",
        explanation="Both records stay as they are; the case is resolved.",
    )


@require_POST
@console_permission(CHANGE_CASES)
def case_merge(request: HttpRequest, case_id: int) -> HttpResponse:
    case = _open_case(case_id)
    form = MergeForm(_merge_data(request, case))
    done = _confirm_action(
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
        done_url=_case_url(case),
    )
    if done is not None:
        return done
    # Refused or invalid: the same page again, with the message and the typed reason.
    return _compare_page(request, case, form=form)


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
    filterset = selectors.case_filterset(params, request=request)
    if not filterset.is_valid():
        messages.error(request, "The filter is not valid; fix it on the queue first.")
        return redirect(reverse("console:case-list"))
    form = ReasonForm(request.POST if _confirmed(request) else None)
    if form.is_bound and form.is_valid():
        try:
            job = bulk_replay_start(
                actor=acting_user(request),
                params=params,
                reason=form.cleaned_data["reason"],
                description=params.urlencode(),
            )
        except ActionRefusedError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Bulk replay #{job.pk} started.")
            return redirect(reverse("console:bulk-replay-detail", args=[job.pk]))
    matching = filterset.qs.filter(operation__isnull=False)
    count = matching.order_by()[: selectors.COUNT_CAP + 1].count()
    return render(
        request,
        "review_console/bulk_replay_confirm.html",
        {
            "form": form,
            "params": [(k, v) for k in params for v in params.getlist(k)],
            "count": min(count, selectors.COUNT_CAP),
            "capped": count > selectors.COUNT_CAP,
            "querystring": params.urlencode(),
        },
    )


@require_POST
@console_permission(CHANGE_CASES)
def case_email(request: HttpRequest, case_id: int) -> HttpResponse:
    """An email case settled by what the customer says (review/email_cases.py)."""
    case = _open_case(case_id)
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
    data, initial = _decision_data(
        request, presets, irreversible=outcome != "received", outcome=outcome
    )
    form = EmailSettleForm(data, initial=initial)

    def act(data: dict[str, Any]) -> object:
        settle = email_receipt_confirm if data["outcome"] == "received" else email_send_again
        return settle(case_id=case.pk, actor=acting_user(request), reason=data["reason"])

    done = _confirm_action(
        request,
        form,
        act=act,
        success=lambda data: (
            f"Case {case.pk} resolved: the customer received the email."
            if data["outcome"] == "received"
            else "The email will be sent again within seconds, as a new email with its own "
            "key; the case is resolved when the mail server accepts it."
        ),
        done_url=_case_url(case),
    )
    if done is not None:
        return done
    return _confirm_page(
        request,
        case=case,
        form=form,
        title="Did the customer get the email?",
        action=reverse("console:case-email", args=[case.pk]),
        submit="Confirm",
        explanation=(
            "The connection to the mail service was cut off, so nobody can tell whether the "
            "email went out, and an email cannot be looked up. Ask the customer. If they "
            "have it, the case is resolved and nothing is sent. If not, a new email is sent, "
            "once, linked to the first."
        ),
    )
