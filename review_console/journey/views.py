"""The customer journey of a form: /console/journey/<source>/<form>/ (journey.py builds it).

Anyone who may view cases may open it. It reads, renders and writes nothing: no case,
no audit entry, no round robin's turn. Contact details follow the console's masking
rule (VIEW_CONTACT, or a reveal of that submission still in force).
"""

from __future__ import annotations

import uuid

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from idempotency_core.configuration.document import ANY_FORM
from idempotency_core.models import Event, Source
from review_console.http import require_GET
from review_console.journey.paths import EXAMPLE_CONTACT, journey_build
from review_console.journey.selectors import journey_event, journey_events
from review_console.masking import contact_for, contact_revealed_to
from review_console.permissions import VIEW_CASES, VIEW_CONTACT, console_permission


@require_GET
@console_permission(VIEW_CASES)
def journey(request: HttpRequest, source: str, form: str) -> HttpResponse:
    found = get_object_or_404(Source, name=source)
    kept = journey_events(found, form)
    chosen = _chosen(request, found, form, kept)
    may_see = request.user.has_perm(VIEW_CONTACT)
    unmasked = may_see or contact_revealed_to(request.user, chosen) is not None
    built = journey_build(source=found, form=form, event=chosen, unmasked=unmasked)
    choices = [
        (
            event,
            contact_for(
                event.payload,
                unmasked=may_see or (chosen is not None and event.pk == chosen.pk and unmasked),
            ),
        )
        for event in kept
    ]
    return render(
        request,
        "review_console/journey/journey.html",
        {
            "journey": built,
            "choices": choices,
            "contact": contact_for(chosen.payload, unmasked=unmasked) if chosen else None,
            "any_form": form == ANY_FORM,
            "example": EXAMPLE_CONTACT,
        },
    )


def _chosen(request: HttpRequest, source: Source, form: str, kept: list[Event]) -> Event | None:
    """The submission asked for (`?submission=<id>`, one of the form's kept ones), else
    the newest kept one, else None (the page shows a synthetic example)."""
    asked = request.GET.get("submission", "")
    if not asked:
        return kept[0] if kept else None
    try:
        event_id = uuid.UUID(asked)
    except ValueError:
        raise Http404("No such submission") from None
    event = journey_event(source, form, event_id)
    if event is None:
        raise Http404("No kept submission of this form with that id")
    return event
