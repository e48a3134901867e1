"""The fields of kept deliveries, as the console shows them (reads only, no network).

A hook keeps each verified delivery's raw body (until payload retention), so the
console can show what a sender really sent: on an unreadable submission's case, and
in the source page's field-map editor, where an admin picks which field is the name,
the email address, the phone number, the message and the extra fields.

A delivery's document (its body read with the source's profile) is flattened to its
leaves: each a path of keys and list positions, which is the field map's own path
form (`["q3_studentsName", "first"]`), so a picked path is a valid expression as it
is, and its value as text. A viewer without `view_contact_details` sees every value
masked: which field holds a contact detail is exactly what is not known yet.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from django.db.models import Exists, OuterRef

from idempotency_core.intake.hooks import missing_lines, submission_from
from idempotency_core.intake.remap import kept_document, unreadable_waiting
from idempotency_core.intake.senders.finding import (
    JOTFORM_QUESTION,
    Answer,
    answers_labelled,
    fold_composites,
)
from idempotency_core.intake.senders.mapping import text
from idempotency_core.intake.senders.profiles import PRESETS, Profile, profile_resolve
from idempotency_core.models import Delivery, Event, ReviewCase, Source
from review_console.masking import contact_for, mask_email

# Leaves shown per delivery (a provider's metadata can be long), and their values' length.
LEAVES_LIMIT = 300
VALUE_SHOWN = 160
# The editor reads the source's most recent kept deliveries, this many events.
RECENT_KEPT = 20

Path = tuple[str | int, ...]
_QUESTION = re.compile(JOTFORM_QUESTION)


@dataclass(frozen=True)
class Leaf:
    path: Path
    value: str
    # The form's own label for the path's first key, where the delivery says it
    # (Jotform's `pretty`: "Student's Name"); "" when it does not.
    title: str = ""

    @property
    def label(self) -> str:
        return " \u203a ".join(str(part) for part in self.path)  # a right angle quote

    @property
    def shown(self) -> str:
        """What a person picks: the form's label where known, else the path in words
        (`event_id` reads "event id")."""
        if not self.title:
            return " \u203a ".join(str(part).replace("_", " ") for part in self.path)
        return " \u203a ".join([self.title, *(str(part) for part in self.path[1:])])

    @property
    def expression(self) -> str:
        """The path as the field map writes it (JSON), the value of a choice."""
        return json.dumps(list(self.path), ensure_ascii=False, separators=(",", ":"))


def mask_value(value: str) -> str:
    """Enough to recognise the kind of value, not to read it."""
    if not value:
        return ""
    if "@" in value:
        return mask_email(value)
    return f"{value[:1]}••• ({len(value)} characters)"


def leaves(document: Any, *, unmasked: bool, limit: int = LEAVES_LIMIT) -> list[Leaf]:
    """The document's leaves in document order, at most `limit`."""
    found: list[Leaf] = []

    def walk(value: Any, path: Path) -> None:
        if len(found) >= limit:
            return
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(item, (*path, str(key)))
        elif isinstance(value, list) and value and any(isinstance(i, dict | list) for i in value):
            for index, item in enumerate(value):
                walk(item, (*path, index))
        elif path:
            shown = text(value)[:VALUE_SHOWN]
            found.append(Leaf(path, shown if unmasked else mask_value(shown)))

    walk(document, ())
    titles = form_labels(document)
    return [replace(leaf, title=titles.get(str(leaf.path[0]), "")) for leaf in found]


def form_labels(document: Any) -> dict[str, str]:
    """Each answer's label as the form shows it, where the delivery carries the labels
    (a `pretty` text of "Label:value, ..."), by the answer's key."""
    if not isinstance(document, dict) or not isinstance(document.get("pretty"), str):
        return {}
    # Composite answers posted part by part (`q3_name[first]`) fold into one, in the
    # form's order, which `pretty` follows; a repeat (rawRequest's) is the same answer.
    answers: dict[str, Answer] = {}
    for key, value in fold_composites((str(k), v) for k, v in document.items()):
        if _QUESTION.match(key) and key not in answers:
            answers[key] = Answer(key, value)
    labelled = answers_labelled(list(answers.values()), document["pretty"])
    return {answer.key: answer.label for answer in labelled if answer.label}


def source_profile(source: Source) -> Profile | None:
    """The source's profile with its overrides (the preset if they no longer fit)."""
    if source.profile not in PRESETS:
        return None
    try:
        return profile_resolve(source.profile, source.profile_overrides)
    except (ValueError, TypeError):
        return PRESETS[source.profile]


@dataclass
class UnreadableView:
    """What an unreadable submission's case page shows of its delivery."""

    fields: list[Leaf] = field(default_factory=list)
    # Why the fields cannot be shown ("" when they are).
    problem: str = ""
    missing: list[str] = field(default_factory=list)
    field_map: str = ""


def unreadable_view(case: ReviewCase, *, unmasked: bool) -> UnreadableView:
    evidence = case.evidence or {}
    view = UnreadableView(
        missing=[str(line) for line in evidence.get("missing", [])],
        field_map=json.dumps(evidence.get("field_map", {}), indent=2, ensure_ascii=False),
    )
    event = case.event
    profile = source_profile(event.source) if event is not None else None
    if event is None or profile is None:
        view.problem = "The case names no delivery of a source with a hook."
        return view
    document = kept_document(event, profile)
    if isinstance(document, str):
        view.problem = document or "Nothing of the delivery is kept any more (retention)."
        return view
    view.fields = leaves(document, unmasked=unmasked)
    return view


# -- the field-map editor -------------------------------------------------------------


@dataclass
class KeptDelivery:
    """One event's first kept delivery, read with a profile: its fields, and what the
    profile's map makes of it."""

    event: Event
    waiting: bool  # unreadable, its case open
    fields: list[Leaf]
    problem: str = ""
    contact: dict[str, str] = field(default_factory=dict)
    message: str = ""
    extras: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def readable(self) -> bool:
        return not self.problem and not self.missing


def kept_deliveries(
    source: Source, profile: Profile, *, unmasked: bool, limit: int = RECENT_KEPT
) -> list[KeptDelivery]:
    """The source's most recent events with a kept delivery (the waiting unreadable
    ones first), each read and mapped with `profile`: the editor's field tree and its
    preview. Reads only: nothing is stored."""
    kept = Delivery.objects.filter(event=OuterRef("pk"), raw_body__isnull=False)
    events = (
        Event.objects.filter(Exists(kept), source=source, payload__isnull=False)
        .annotate(waiting=unreadable_waiting())
        .select_related("source")
        .order_by("-waiting", "-received_at", "-pk")[:limit]
    )
    return [_read(event, profile, unmasked=unmasked) for event in events]


def _read(event: Event, profile: Profile, *, unmasked: bool) -> KeptDelivery:
    waiting = bool(getattr(event, "waiting", False))
    document = kept_document(event, profile)
    if isinstance(document, str):
        return KeptDelivery(event, waiting, [], problem=document or "nothing kept")
    _, payload, errors = submission_from(event.source, profile, document, {})
    extras = payload.get("fields") or {}
    return KeptDelivery(
        event,
        waiting,
        leaves(document, unmasked=unmasked),
        contact=contact_for(payload, unmasked=unmasked),
        message=str(payload.get("message", ""))[:VALUE_SHOWN]
        if unmasked
        else mask_value(str(payload.get("message", ""))[:VALUE_SHOWN]),
        extras=sorted(extras) if isinstance(extras, dict) else [],
        missing=missing_lines(errors),
    )


def field_tree(deliveries: list[KeptDelivery]) -> list[Leaf]:
    """Every path found in the deliveries, once, in first-seen order, each with the
    value of the most recent delivery that has it."""
    seen: dict[Path, Leaf] = {}
    for delivery in deliveries:
        for leaf in delivery.fields:
            seen.setdefault(leaf.path, leaf)
    return list(seen.values())
