"""Preset reasons: a decision is one button, its reason written for the reviewer.

Each decision button on a case page (and on the queue) carries a preset, the
reason the audit trail records ("Spam or test submission"), so that deciding is
one click; an optional note the reviewer types is added to it. A preset names
its reason here, never in the request: a posted `preset` that is not listed is
ignored and the confirmation page asks for a reason as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.http import QueryDict

from idempotency_core.review.cases import RESOLUTION_CODES


@dataclass(frozen=True)
class Preset:
    code: str
    label: str  # the button's words
    reason: str  # what the audit trail records


def _presets(*items: Preset) -> dict[str, Preset]:
    return {p.code: p for p in items}


# Close: one button per category (RESOLUTION_CODES); "other" needs a note, so it is
# offered with the note box (More decisions), not as a one-click preset.
CLOSE = _presets(
    Preset("handled_elsewhere", "Handled elsewhere", RESOLUTION_CODES["handled_elsewhere"]),
    Preset("spam_or_test", "Spam or test", RESOLUTION_CODES["spam_or_test"]),
    Preset("customer_withdrew", "Customer withdrew", RESOLUTION_CODES["customer_withdrew"]),
    Preset("duplicate_submission", "Sent twice", RESOLUTION_CODES["duplicate_submission"]),
    Preset("not_fixable", "Cannot be fixed", RESOLUTION_CODES["not_fixable"]),
)
RESOLVE_FOUND = _presets(
    Preset("found", "It is there: resolve", "Found in the CRM by the lookup, checked again"),
)
NOT_DUPLICATE = _presets(
    Preset("separate_requests", "Not a duplicate: keep both", "Two separate requests"),
)
REPLAY = _presets(
    Preset("cause_fixed", "Try again", "The cause is fixed; trying again"),
)
MERGE = _presets(
    Preset("same_request", "Merge into one", "Same person and request, sent twice"),
)
EMAIL_RECEIVED = _presets(
    Preset("customer_has_it", "Customer has it", "The customer confirmed they received it"),
)
EMAIL_SEND_AGAIN = _presets(
    Preset("not_received", "Not received: send again", "The customer did not receive it"),
)
HOLD_SAME = _presets(
    Preset("same_enquiry", "Same enquiry", "Same person and message, sent twice"),
)
HOLD_SEPARATE = _presets(
    Preset("separate_enquiry", "Separate enquiry", "A separate request from the same person"),
)
LINK_RECORD = _presets(
    Preset("link", "Link to the CRM's record", "The record the CRM matched is this enquiry"),
)
CREATE_ANYWAY = _presets(
    Preset("create_anyway", "Create anyway", "A different request: a record of its own"),
)
REOPEN = _presets(
    Preset("decided_too_soon", "Reopen", "Decided too soon: it needs another look"),
)
REVEAL = _presets(
    Preset("contact_customer", "Show contact details", "To contact the customer about this case"),
)


def preset_reason(presets: dict[str, Preset], code: str, note: str) -> str | None:
    """The reason for preset `code` with the reviewer's note, or None if not a preset."""
    preset = presets.get(code)
    if preset is None:
        return None
    note = " ".join(note.split())[:500]
    return f"{preset.reason}: {note}" if note else preset.reason


def with_preset(data: QueryDict, presets: dict[str, Preset], **fields: str) -> QueryDict | None:
    """`data` as a confirmed form: the preset's reason (and `fields`, e.g. the close's
    resolution code) filled in; None when `data` names no preset of `presets`."""
    code = data.get("preset", "")
    reason = preset_reason(presets, code, data.get("note", ""))
    if reason is None:
        return None
    filled = data.copy()
    filled["reason"] = reason
    filled["confirm"] = "yes"
    for name, value in fields.items():
        filled[name] = value
    return filled


# One click, as the console's other decisions: handing on is undone by taking it back.
HAND_ON = {
    "cannot_decide": Preset(
        "cannot_decide", "Hand on", "I cannot decide it: handed on to the group that can"
    )
}
