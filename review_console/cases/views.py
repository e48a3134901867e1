"""The console's home, the queue of cases and the case page.

Pages are GET; actions are POST-only (GET answers 405) and go through a
confirmation page that asks for a reason: the button on the case page POSTs
without `confirm`, which renders the confirmation; the confirmation POSTs with
`confirm=yes` and a reason, which calls the service, adds a message and
redirects back to the case. Every decision is taken by a service in
`idempotency_core`, so the console cannot bypass what protects normal processing.
"""

from __future__ import annotations

from typing import Any

from django.http import (
    HttpRequest,
    HttpResponse,
)
from django.shortcuts import redirect, render
from django.utils import timezone

from idempotency_core.models import ReviewCase
from idempotency_core.review.cases import (
    case_reopen_check,
)
from idempotency_core.review.duplicate_rule import create_anyway_offered, matched_records
from idempotency_core.review.email_cases import (
    email_may_have_gone,
    is_email_case,
)
from idempotency_core.review.lookup import (
    latest_lookup,
)
from idempotency_core.review.merge import (
    DUPLICATE_KINDS,
)
from review_console.cases.causes import (
    HOLD_CHOICES,
    cause_groups,
    group_decision_defaults,
    holds_in_force,
    without_held,
)
from review_console.cases.dashboard import dashboard_summary, my_cases, recent_reveals
from review_console.cases.decisions import found_ref, open_case
from review_console.cases.presets import (
    CLOSE,
)
from review_console.cases.selectors import (
    DEFAULT_SORT,
    SORTS,
    case_audit,
    case_filterset,
    queue_chips,
    queue_customers,
    related_cases,
    replay_preview,
    settled_by,
    settled_note,
)
from review_console.cases.story import case_story, destination_words, queue_line
from review_console.http import querystring, require_GET
from review_console.masking import contact_for, contact_revealed_to
from review_console.paging import KeysetPage, keyset_page
from review_console.permissions import (
    CHANGE_CASES,
    CHANGE_CONFIG,
    CHANGE_SOURCE,
    REPLAY,
    VIEW_CASES,
    VIEW_CONTACT,
    console_allows,
    console_permission,
    may_try_again,
)
from review_console.settings.routing import routed_to_me
from review_console.sources.field_tree import unreadable_view
from review_console.submissions.selectors import event_deliveries, event_operations, related_events

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
    # Who may open cases but not take them (Settings admins) gets, for *Next case*, the
    # oldest case routed or handed on to them, to fix its cause from its page.
    fixer = not request.user.has_perm(CHANGE_CASES)
    return render(
        request,
        "review_console/cases/dashboard.html",
        {
            "summary": dashboard_summary(user=request.user),
            "mine": my_cases(request.user),
            "reveals": recent_reveals() if overseer else None,
            "routed": routed_to_me(request.user) if fixer else None,
        },
    )


@require_GET
@console_permission(VIEW_CASES)
def case_list(request: HttpRequest) -> HttpResponse:
    filterset = case_filterset(request.GET, request=request)
    sort = request.GET.get("sort", DEFAULT_SORT)
    if sort not in SORTS:
        sort = DEFAULT_SORT
    groups: list[dict[str, Any]] = []
    if filterset.is_valid():
        holds = holds_in_force()
        # A held cause's new cases wait in its group, not in the list (causes.py), unless
        # the list is that cause's ("Show them").
        listed = filterset.qs if request.GET.get("cause") else without_held(filterset.qs, holds)
        page = keyset_page(
            listed,
            fields=SORTS[sort][1],
            after=request.GET.get("after", ""),
            before=request.GET.get("before", ""),
        )
        # Narrowed to one cause ("Decide all", or Next case), the list is that group's.
        if not (request.GET.get("after") or request.GET.get("before")):
            groups = cause_groups(filterset.qs, holds=holds)
            for group in groups:
                group_decision_defaults(group)
    else:
        page = KeysetPage(items=[])
    queue_customers(page.items, unmasked=request.user.has_perm(VIEW_CONTACT))
    for case in page.items:
        case.line = queue_line(case)
    chosen = [
        k for k in request.GET if k not in ("after", "before", "sort", "cause") and request.GET[k]
    ]
    return render(
        request,
        "review_console/cases/case_list.html",
        {
            "filters_active": len(chosen),
            "groups": groups,
            "group_focus": bool(request.GET.get("cause")),
            "now": timezone.now(),
            "hold_choices": HOLD_CHOICES[1:],
            "close_presets": list(CLOSE.values()),
            "chips": queue_chips(request.GET, request=request),
            "chip_groups": [("kind", "Kind"), ("owner", "Owner"), ("status", "Status")],
            "chosen_kinds": request.GET.getlist("kind"),
            "chosen_statuses": request.GET.getlist("status"),
            "filter": filterset,
            "page": page,
            "sort": sort,
            "sorts": [(key, label) for key, (label, _) in SORTS.items()],
            "querystring": querystring(request),
            "filter_querystring": querystring(request, drop=("after", "before", "sort")),
            "can_change": request.user.has_perm(CHANGE_CASES),
            "can_replay": request.user.has_perm(REPLAY),
        },
    )


@require_GET
@console_permission(VIEW_CASES)
def case_detail(request: HttpRequest, case_id: int) -> HttpResponse:
    case = open_case(case_id)
    return render(request, "review_console/cases/case_detail.html", _case_context(request, case))


def _case_context(request: HttpRequest, case: ReviewCase) -> dict[str, Any]:
    """Everything the case page shows; the two sentences on top come from story.py."""
    event = case.event
    user = request.user
    revealed = contact_revealed_to(user, event) if event is not None else None
    unmasked = user.has_perm(VIEW_CONTACT) or revealed is not None
    audit = case_audit(case)
    context: dict[str, Any] = {
        "case": case,
        "event": event,
        "payload": (event.payload or {}) if event is not None else {},
        "contact": contact_for(event.payload if event else None, unmasked=unmasked),
        "unmasked": unmasked,
        "revealed": revealed,
        "deliveries": event_deliveries(event) if event is not None else [],
        "operations": event_operations(event) if event is not None else [],
        "related": related_events(event) if event is not None else [],
        "audit": audit,
        "related_cases": related_cases(case, audit),
        "is_email": is_email_case(case),
        "email_undecided": email_may_have_gone(case),
        "is_open": case.status in ReviewCase.OPEN_STATUSES,
        "is_duplicate": case.kind in DUPLICATE_KINDS,
        # A held duplicate is settled by its own two decisions only.
        "is_held": case.kind == ReviewCase.Kind.DUPLICATE_HELD,
        # An enquiry the CRM's duplicate rule matched: nothing was created, so there is
        # nothing to look up or resolve by reference; it is linked, closed (spam the rule
        # caught) or tried again (once the rule is fixed), as the services allow.
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
        "settled_by": settled_by(case, audit),
        "settled_note": settled_note(case, audit),
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
    context["replay"] = replay_preview(operation)
    context["lookup"] = latest_lookup(operation)
    context["found_ref"] = found_ref(operation)
    # The safe action first: where an earlier try may have worked, the lookup and
    # "resolve with the record found" lead, and a replay is the second choice.
    context["safe_first"] = not context["email_undecided"] and (
        context["case"].kind in SAFE_FIRST_KINDS or context["replay"]["needs_check"]
    )


# Cases where an earlier try may have created the effect: look before trying again.
SAFE_FIRST_KINDS = (ReviewCase.Kind.AMBIGUOUS, ReviewCase.Kind.INTERRUPTED_SEND)


# -- actions (POST only) ----------------------------------------------------------
