"""The two submissions of a held suspected duplicate, side by side for a reviewer.

Like the merge page's comparison (selectors.duplicate_comparison), a field is the
same, the same apart from spacing or capitals, or different on the real values, and
is then shown masked for a viewer without the permission to see contact details. No
network: the held one was never written, so its CRM record does not exist; the first
one's CRM references are shown as stored.
"""

from __future__ import annotations

from typing import Any

from idempotency_core.models import Event, ReviewCase
from review_console.cases.comparison import DIFFERENT, compare_values
from review_console.glossary import operation_status_label, step_label
from review_console.masking import contact_for

HELD_KIND = ReviewCase.Kind.DUPLICATE_HELD
_FIELDS = (("name", "Name"), ("email", "Email"), ("phone", "Phone"))


def held_pair(case: ReviewCase, *, unmasked: bool) -> dict[str, Any] | None:
    """The first and the held submission of a `duplicate_held` case; None otherwise."""
    if case.kind != HELD_KIND:
        return None
    ids = [str(i) for i in (case.evidence or {}).get("event_ids", [])][:2]
    found = {str(e.pk): e for e in Event.objects.filter(pk__in=ids).prefetch_related("operations")}
    events = [found[i] for i in ids if i in found]
    if len(events) != 2:
        return None
    payloads = [e.payload or {} for e in events]
    real = [contact_for(p, unmasked=True) for p in payloads]
    shown = [contact_for(p, unmasked=unmasked) for p in payloads]
    rows = [
        _row(label, [c[name] for c in real], [c[name] for c in shown]) for name, label in _FIELDS
    ]
    messages = [str(p.get("message", "")) for p in payloads]
    rows.append(_row("Message", messages, messages))
    forms = [e.form for e in events]
    rows.append(_row("Form", forms, forms))
    rows = [row for row in rows if any(row["real"])]  # empty on both sides: no row
    return {
        "events": events,
        "rows": rows,
        "received": [e.received_at for e in events],
        "steps": [_steps(e) for e in events],
    }


def _row(label: str, real: list[str], shown: list[str]) -> dict[str, Any]:
    compared = compare_values(real)
    return {
        "field": label,
        "values": shown,
        "real": real,
        "compared": compared,
        "differs": compared == DIFFERENT,
    }


def _steps(event: Event) -> list[dict[str, str]]:
    return [
        {
            "label": step_label(o.step),
            "status": operation_status_label(o.status),
            "record": o.destination_ref,
        }
        for o in sorted(event.operations.all(), key=lambda o: o.position)
    ]
