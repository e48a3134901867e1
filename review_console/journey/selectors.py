"""Which forms of a source have a journey page, and the kept submissions it can show."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from idempotency_core.configuration.document import ANY_FORM
from idempotency_core.configuration.versions import config_current
from idempotency_core.intake.remap import unreadable_waiting
from idempotency_core.models import Event, Source

# Kept submissions offered by the page's picker, newest first.
PICKER_SIZE = 20
# Recent submissions whose forms the source page lists beside the configured ones.
RECENT_FORMS_SCAN = 200


def journey_events(source: Source, form: str) -> list[Event]:
    """The form's kept submissions, newest first (PICKER_SIZE): a payload still kept,
    not an edit (its journey is the edit path of the one it revises), not waiting
    unreadable for a corrected map. `"*"` means the forms without a block of their own."""
    return list(_kept(source, form).order_by("-received_at")[:PICKER_SIZE])


def journey_event(source: Source, form: str, event_id: Any) -> Event | None:
    return _kept(source, form).filter(pk=event_id).first()


def _kept(source: Source, form: str) -> Any:
    events = Event.objects.select_related("source").filter(
        ~Q(unreadable_waiting()), source=source, payload__isnull=False, revises__isnull=True
    )
    if form != ANY_FORM:
        return events.filter(form=form)
    return events.exclude(form__in=configured_forms(source) - {ANY_FORM})


def configured_forms(source: Source) -> set[str]:
    document = config_current().document
    return set(((document.get("sources") or {}).get(source.name) or {}).get("forms") or {})


def journey_forms(source: Source) -> list[str]:
    """The forms the source page links a journey for: those configured, those with a
    pipeline of their own, the default form and those of its recent submissions, then
    "*" (every other form)."""
    recent = (
        Event.objects.filter(source=source)
        .order_by("-received_at")
        .values_list("form", flat=True)[:RECENT_FORMS_SCAN]
    )
    names = (
        configured_forms(source) | set(source.pipelines or {}) | {source.default_form} | set(recent)
    )
    return [*sorted(name for name in names if name and name != ANY_FORM), ANY_FORM]
