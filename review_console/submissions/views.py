"""The customer search (in every console page's header) and the submission page.

A submission has a page whether or not it ever needed a person: deliveries, steps
and their tries, every case, the audit entries and links to the CRM record, on
one timeline. Contact details follow the console's masking rule.
"""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from idempotency_core.models import Event
from review_console.http import require_GET
from review_console.masking import contact_for, contact_revealed_to, revealed_event_ids
from review_console.permissions import VIEW_CASES, VIEW_CONTACT, console_permission
from review_console.submissions.selectors import (
    RESULTS_LIMIT,
    crm_record_url,
    event_deliveries,
    event_operations,
    related_events,
    step_note,
    submission_audit,
    submission_cases,
    submission_search,
    submission_timeline,
)


@require_GET
@console_permission(VIEW_CASES)
def search(request: HttpRequest) -> HttpResponse:
    """One box for email, name, key or reference; exactly one match opens its page."""
    may_see_contact = request.user.has_perm(VIEW_CONTACT)
    revealed = [] if may_see_contact else revealed_event_ids(request.user)
    result = submission_search(
        request.GET.get("q", ""), may_see_contact=may_see_contact, revealed=revealed
    )
    if result.case_id is not None:
        return redirect(reverse("console:case-detail", args=[result.case_id]))
    if len(result.events) == 1 and not result.notice:
        return redirect(reverse("console:submission-detail", args=[result.events[0].pk]))
    shown = {str(pk) for pk in revealed}
    rows = [
        (event, contact_for(event.payload, unmasked=may_see_contact or str(event.pk) in shown))
        for event in result.events
    ]
    return render(
        request,
        "review_console/submissions/search.html",
        {
            "result": result,
            "rows": rows,
            "limit": RESULTS_LIMIT,
            "search_query": result.query,
        },
    )


@require_GET
@console_permission(VIEW_CASES)
def submission_detail(request: HttpRequest, event_id: uuid.UUID) -> HttpResponse:
    event = get_object_or_404(Event.objects.select_related("source", "revises"), pk=event_id)
    unmasked = request.user.has_perm(VIEW_CONTACT) or (
        contact_revealed_to(request.user, event) is not None
    )
    operations = event_operations(event)
    deliveries = event_deliveries(event)
    cases = submission_cases(event, operations)
    audit = submission_audit(event, cases, operations)
    steps = [
        (
            op,
            crm_record_url(op.destination, op.destination_ref),
            step_note(op),
        )
        for op in operations
    ]
    return render(
        request,
        "review_console/submissions/submission_detail.html",
        {
            "event": event,
            "payload": event.payload or {},
            "contact": contact_for(event.payload, unmasked=unmasked),
            "steps": steps,
            "deliveries": deliveries,
            "cases": cases,
            "timeline": submission_timeline(
                deliveries=deliveries, operations=operations, cases=cases, audit=audit
            ),
            "related": related_events(event),
        },
    )
