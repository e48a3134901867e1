"""The Settings pages' editor: one section of one form's block as a form, its draft,
its problems by field, and its preview from a kept submission.

A section (docs/configuration.md: enquiry, contact, task, confirmation) is edited as
its keys, one form field each. Templates are typed as they are; what is structured
(a CRM property map, an assignee rule, languages) is typed as YAML, read with the
line of each value (`yaml_load`), so a problem the validator finds in it names the
line of that box. The draft is the current configuration with this section replaced
(`config_with_section`); it is validated by the one validation `config_apply` runs,
and previewed by `content_preview` under the draft as an unsaved version: nothing is
written until it is saved.

The preview renders from a real kept submission the block applies to (its own form,
or for "*" a form the source names no block for). A viewer without
`view_contact_details` gets the submission masked before it is rendered (the
contact by masking.py, every other value the visitor typed as the field map's page
masks it), so nothing of it reaches the page, nor the test they send themselves.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django import forms

from idempotency_core.configuration.document import ANY_FORM, SECTIONS, Path, Problem
from idempotency_core.configuration.versions import ConfigVersion, section_of
from idempotency_core.configuration.yamlfile import FileMarks, YamlFileError, yaml_dump, yaml_load
from idempotency_core.execution.content import content_preview
from idempotency_core.models import Event, Source
from integrations.base import DestinationError
from review_console.forms import REASON_HELP
from review_console.masking import contact_for
from review_console.sources.field_tree import mask_value

SECTION_LABELS = {
    "enquiry": "CRM enquiry",
    "contact": "CRM contact",
    "task": "Follow-up task",
    "confirmation": "Confirmation email",
}
# The step whose content a section shapes: what the preview renders.
PREVIEW_STEPS = {
    "enquiry": "create_enquiry",
    "contact": "create_enquiry",
    "task": "assign_task",
    "confirmation": "send_confirmation",
}
RECENT_SUBMISSIONS = 20


@dataclass(frozen=True)
class Spec:
    """One key of a section as a form field: `kind` says how it is typed and read."""

    key: str
    # "line": one-line template; "text": multi-line template; "yaml": a structure;
    # "assignee": a name or a YAML rule; "hours": a number; "send": yes or no.
    kind: str
    label: str
    help: str = ""


SPECS: dict[str, tuple[Spec, ...]] = {
    "enquiry": (
        Spec(
            "fields",
            "yaml",
            "CRM properties of the enquiry",
            "One a line, property: template. For example  company: '{{ fields.company }}'",
        ),
        Spec("pipeline", "line", "Pipeline", "A template; empty: the CRM adapter's setting."),
        Spec("stage", "line", "Stage", "A template; empty: the CRM adapter's setting."),
    ),
    "contact": (
        Spec(
            "fields",
            "yaml",
            "CRM properties of the contact",
            "One a line, property: template. For example  company: '{{ fields.company }}'",
        ),
    ),
    "task": (
        Spec("title", "line", "Title", "A template; empty: Follow up {{ form }} enquiry."),
        Spec(
            "assignee",
            "assignee",
            "Assignee",
            "A name; or several people in turn, or one chosen by a field of the form "
            "(how: technical details). Empty: the source's own assignee.",
        ),
        Spec("due_in_hours", "hours", "Due in (hours)", "Empty: no due date."),
    ),
    "confirmation": (
        Spec("send", "send", "Send the confirmation"),
        Spec("subject", "line", "Subject", "A template; empty: We received your enquiry."),
        Spec("text", "text", "Text", "A template; empty: Onefold's built-in text."),
        Spec(
            "html",
            "text",
            "HTML (optional)",
            "A template, autoescaped; makes the email multipart (text and HTML).",
        ),
        Spec(
            "reply_to",
            "line",
            "Reply-To (optional)",
            "One address, or a template that renders to one.",
        ),
        Spec(
            "language_field",
            "line",
            "Language field (optional)",
            "The value that chooses a language below, e.g. fields.lang.",
        ),
        Spec(
            "languages",
            "yaml",
            "Languages (optional)",
            "YAML by language code, e.g.  fr: {subject: 'Bien reçu', text: 'Bonjour, ...'}",
        ),
    ),
}
if {s: {spec.key for spec in specs} for s, specs in SPECS.items()} != {
    s: set(keys) for s, keys in SECTIONS.items()
}:
    raise AssertionError("every key of docs/configuration.md needs its field here")

SEND_CHOICES = [("yes", "Yes"), ("no", "No: turned off for this form")]


class SectionForm(forms.Form):
    """A section's keys, the submission the preview renders from, and the reason."""

    based_on = forms.IntegerField(widget=forms.HiddenInput, required=False)
    event = forms.ChoiceField(required=False, label="Preview with the submission")
    reason = forms.CharField(
        required=False,
        strip=True,
        label="Why (kept with the version and the decision, in their history)",
        help_text=REASON_HELP,
        widget=forms.TextInput(attrs={"class": "reason", "autocomplete": "off"}),
    )

    def __init__(
        self,
        *args: Any,
        section: str,
        saved: Mapping[str, Any],
        events: list[tuple[str, str]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.section = section
        self.saved = saved  # the section as the version the editor started from says it
        event_field = self.fields["event"]
        assert isinstance(event_field, forms.ChoiceField)
        event_field.choices = events
        for spec in SPECS[section]:
            self.fields[spec.key] = _field(spec)
        self.order_fields(["event"] + [spec.key for spec in SPECS[section]] + ["reason"])

    def draft(self) -> Draft:
        """The section as typed, where each value is, and what reading it found."""
        draft = Draft()
        for spec in SPECS[self.section]:
            raw = self.cleaned_data.get(spec.key)
            _read(spec, raw, self.saved.get(spec.key), draft)
        return draft


def _field(spec: Spec) -> forms.Field:
    attrs = {"spellcheck": "false", "autocomplete": "off", "class": "template"}
    if spec.kind == "send":
        return forms.ChoiceField(
            choices=SEND_CHOICES, label=spec.label, help_text=spec.help, initial="yes"
        )
    if spec.kind in ("text", "yaml", "assignee"):
        rows = {"text": 7, "yaml": 5, "assignee": 2}[spec.kind]
        widget: forms.Widget = forms.Textarea(attrs={**attrs, "rows": rows})
    else:
        widget = forms.TextInput(attrs=attrs)
    return forms.CharField(
        required=False, strip=False, label=spec.label, help_text=spec.help, widget=widget
    )


def initial_of(section: str, values: Mapping[str, Any]) -> dict[str, str]:
    """The form's initial text for a section as saved."""
    initial: dict[str, str] = {}
    for spec in SPECS[section]:
        if spec.key not in values:
            continue
        value = values[spec.key]
        if spec.kind == "send":
            initial[spec.key] = "no" if value is False else "yes"
        elif spec.kind in ("yaml", "assignee") and isinstance(value, Mapping | list):
            initial[spec.key] = yaml_dump(value) if isinstance(value, Mapping) else str(value)
        else:
            initial[spec.key] = str(value)
    return initial


@dataclass
class Draft:
    """A section as typed: its values, where the YAML ones are, and reading problems."""

    values: dict[str, Any] = field(default_factory=dict)
    files: dict[str, FileMarks] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def _read(spec: Spec, raw: Any, saved: Any, draft: Draft) -> None:
    text = str(raw or "").replace("\r\n", "\n")
    if spec.kind == "send":
        if text == "no":
            draft.values[spec.key] = False
        elif saved is True:  # written as `send: true`: kept so, not a change
            draft.values[spec.key] = True
        return
    if not text.strip():
        return  # left out: Onefold's built-in content
    if spec.kind == "line":
        draft.values[spec.key] = text.strip()
    elif spec.kind == "text":
        draft.values[spec.key] = text
    elif spec.kind == "hours":
        draft.values[spec.key] = _number(text.strip())
    else:
        try:
            value, marks, problems = yaml_load(text)
        except YamlFileError as exc:
            draft.problems.append(Problem((spec.key,), exc.problem.message, exc.problem.line))
            return
        draft.problems += [Problem((spec.key, *p.path), p.message, p.line) for p in problems]
        if spec.kind == "assignee" and not isinstance(value, Mapping | list):
            # A name as typed: "12345678" is a CRM owner's id, not a number.
            value = text.strip()
        draft.values[spec.key] = value
        draft.files[spec.key] = marks


def _number(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text  # not a number: the validation says so


class DraftMarks:
    """Where a problem of the draft is, in the box of the field it falls in: a YAML
    box's own lines (a template inside one: the line of the template's line). A
    one-line or text template has its line in the validator's message already."""

    def __init__(self, prefix: Path, files: Mapping[str, FileMarks]) -> None:
        self.prefix = prefix
        self.files = files

    def _in_box(self, path: Path) -> tuple[FileMarks, Path] | None:
        n = len(self.prefix)
        if tuple(path[:n]) != self.prefix or len(path) <= n:
            return None
        marks = self.files.get(str(path[n]))
        return (marks, tuple(path[n + 1 :])) if marks is not None else None

    def line_of(self, path: Path) -> int | None:
        found = self._in_box(path)
        return found[0].line_of(found[1]) if found else None

    def key_line_of(self, path: Path) -> int | None:
        found = self._in_box(path)
        return found[0].key_line_of(found[1]) if found else None

    def template_line(self, path: Path, line: int) -> int | None:
        found = self._in_box(path)
        return found[0].template_line(found[1], line) if found else None


def section_prefix(source: str, form: str, section: str) -> Path:
    return ("sources", source, "forms", form, section)


def problems_by_field(
    problems: list[Problem], prefix: Path
) -> tuple[dict[str, list[str]], list[str]]:
    """Each problem as the field it falls in shows it ("line 2: company: ..."), and
    those of no field of this section (another form's block), as the validator says
    them."""
    fields: dict[str, list[str]] = {}
    others: list[str] = []
    n = len(prefix)
    for problem in problems:
        path = tuple(problem.path)
        if path[:n] != prefix or len(path) <= n:
            others.append(str(problem))
            continue
        inner = ".".join(str(part) for part in path[n + 1 :])
        fields.setdefault(str(path[n]), []).append(_worded(inner, problem))
    return fields, others


def draft_problems_by_field(problems: list[Problem]) -> dict[str, list[str]]:
    """Reading problems (paths start at the field's key)."""
    fields: dict[str, list[str]] = {}
    for problem in problems:
        inner = ".".join(str(part) for part in problem.path[1:])
        fields.setdefault(str(problem.path[0]), []).append(_worded(inner, problem))
    return fields


def _worded(inner: str, problem: Problem) -> str:
    line = f"line {problem.line}: " if problem.line is not None else ""
    return f"{line}{inner + ': ' if inner else ''}{problem.message}"


# -- the submissions a preview renders from ------------------------------------------


def kept_submissions(
    source: Source,
    form: str,
    document: Mapping[str, Any],
    *,
    limit: int = RECENT_SUBMISSIONS,
    pk: str | None = None,
) -> list[Event]:
    """The newest submissions of `source` whose payload is kept and that `form`'s block
    applies to: the form's own, or for "*" those of a form the source names no block
    for (in `document`). With `pk`, that one submission if it is such a one."""
    events = Event.objects.filter(source=source, payload__isnull=False)
    if pk is not None:
        try:
            events = events.filter(pk=uuid.UUID(pk))
        except ValueError:
            return []
    if form == ANY_FORM:
        named = ((document.get("sources") or {}).get(source.name) or {}).get("forms") or {}
        events = events.exclude(form__in=[name for name in named if name != ANY_FORM])
    else:
        events = events.filter(form=form)
    return list(
        events.select_related("source")
        .only("id", "received_at", "payload", "form", "source", "revises")
        .order_by("-received_at", "-pk")[:limit]
    )


def submission_label(event: Event, *, unmasked: bool) -> str:
    name = contact_for(event.payload, unmasked=unmasked)["name"] or "no name"
    return f"{event.received_at:%Y-%m-%d %H:%M} · {event.form or 'no form'} · {name}"


def shown_payload(payload: Mapping[str, Any], *, unmasked: bool) -> dict[str, Any]:
    """The payload as this viewer may see it: as kept, or with the contact masked
    (masking.py) and every other value the visitor typed masked as on the field map's
    page (`mask_value`)."""
    shown = copy.deepcopy(dict(payload))
    if unmasked:
        return shown
    contact = contact_for(shown, unmasked=False)
    kept = shown.get("contact") or {}
    shown["contact"] = {key: contact[key] for key in ("name", "email", "phone") if kept.get(key)}
    if shown.get("message"):
        shown["message"] = mask_value(str(shown["message"]))
    shown["fields"] = _masked(shown.get("fields") or {})
    return shown


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        return mask_value(value)
    if isinstance(value, Mapping):
        return {key: _masked(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item) for item in value]
    return value


@dataclass(frozen=True)
class Preview:
    """What the step would send (`content`), or why it cannot be rendered (`error`)."""

    content: dict[str, Any] | None = None
    error: str = ""


def preview_render(
    *, event: Event, section: str, document: Mapping[str, Any], number: int, unmasked: bool
) -> Preview:
    """The section's step rendered from `event` (masked for this viewer) under
    `document`, an unsaved version numbered `number`. Stores nothing."""
    shown = copy.copy(event)  # the instance, not its row: the payload is replaced only here
    shown.payload = shown_payload(event.payload or {}, unmasked=unmasked)
    try:
        content = content_preview(
            event=shown, step=PREVIEW_STEPS[section], version=ConfigVersion(number, document)
        )
    except DestinationError as exc:
        return Preview(error=exc.message)
    return Preview(content=content)


def saved_section(document: Mapping[str, Any], source: str, form: str, section: str) -> Any:
    return section_of(document, source=source, form=form, section=section)
