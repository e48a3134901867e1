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
from review_console import selectors, submissions
from review_console.http import require_GET
from review_console.masking import contact_for
from review_console.permissions import VIEW_CASES, VIEW_CONTACT, console_permission


@require_GET
@console_permission(VIEW_CASES)
def search(request: HttpRequest) -> HttpResponse:
    """One box for email, name, key or reference; exactly one match opens its page."""
    may_see_contact = request.user.has_perm(VIEW_CONTACT)
    revealed = [] if may_see_contact else selectors.revealed_event_ids(request.user)
    result = submissions.submission_search(
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
        "review_console/search.html",
        {
            "result": result,
            "rows": rows,
            "limit": submissions.RESULTS_LIMIT,
            "search_query": result.query,
        },
    )


@require_GET
@console_permission(VIEW_CASES)
def submission_detail(request: HttpRequest, event_id: uuid.UUID) -> HttpResponse:
    event = get_object_or_404(Event.objects.select_related("source", "revises"), pk=event_id)
    unmasked = request.user.has_perm(VIEW_CONTACT) or (
        selectors.contact_revealed_to(request.user, event) is not None
    )
    operations = selectors.event_operations(event)
    deliveries = selectors.event_deliveries(event)
    cases = submissions.submission_cases(event, operations)
    audit = submissions.submission_audit(event, cases, operations)
    steps = [
        (
            op,
            submissions.crm_record_url(op.destination, op.destination_ref),
            submissions.step_note(op),
        )
        for op in operations
    ]
    return render(
        request,
        "review_console/submission_detail.html",
        {
            "event": event,
            "payload": event.payload or {},
            "contact": contact_for(event.payload, unmasked=unmasked),
            "steps": steps,
            "deliveries": deliveries,
            "cases": cases,
            "timeline": submissions.submission_timeline(
                deliveries=deliveries, operations=operations, cases=cases, audit=audit
            ),
            "related": selectors.related_events(event),
        },
    )
