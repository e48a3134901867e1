"""What one effect sends, rendered from the business configuration and a submission."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.utils.dateparse import parse_datetime

from idempotency_core.configuration.document import (
    allowed_reply_to_domains,
    form_block,
    in_domains,
    is_address,
)
from idempotency_core.configuration.template_limits import render_bounds
from idempotency_core.configuration.templates import (
    TemplateRenderError,
    template_render,
    template_values,
)
from idempotency_core.configuration.versions import ConfigVersion
from idempotency_core.execution.confirmations import (
    DEFAULT_SUBJECT,
    confirmation_default_text,
    greeting_name,
)
from integrations.base import Classification, DestinationError

DEFAULT_TITLE = "Follow up {{ form }} enquiry"
# A phone number as a confirmation may show it.
_PHONE = re.compile(r"\+?[0-9 ().\-]{3,30}")
# Line breaks in a subject would end the header.
_LINE_BREAKS = re.compile(r"[\r\n]+")
# A round robin's turn: its counter for this scope advanced by one, in the transaction
# that stores the content (execution/content.py). Raises when no turn can be taken.
Turn = Callable[[str], int]


_Render = TypeVar("_Render", bound=Callable[..., dict[str, Any]])


def _one_budget(render: _Render) -> _Render:
    """One operation's content, all its templates, rendered within one budget of
    output and time (template_limits.py): past it, the step is refused, not stalled."""

    @functools.wraps(render)
    def bounded(*args: Any, **kwargs: Any) -> dict[str, Any]:
        with render_bounds():
            return render(*args, **kwargs)

    return bounded  # type: ignore[return-value]


class TurnUnavailableError(Exception):
    """Rendering needs a round robin's turn where none may be taken (a render ahead of
    the claim, execution/content.py): rendered when the step is claimed instead."""


@dataclass(frozen=True)
class RenderInput:
    """What a step's content is rendered from."""

    payload: Mapping[str, Any]
    source: str
    # The source's own assignee (`Source.task_assignee`): a task's when none is configured.
    default_assignee: str
    # The destination references of the event's earlier, succeeded steps.
    refs: Mapping[str, str]
    # The first attempt's time: a task's due date counts from it.
    now: datetime

    @property
    def form(self) -> str:
        return str(self.payload.get("form") or "")


def _block(inp: RenderInput, version: ConfigVersion, section: str) -> Mapping[str, Any]:
    return form_block(version.document, inp.source, inp.form)[1].get(section) or {}


def submission_values(inp: RenderInput, *, confirmation: bool = False) -> dict[str, Any]:
    """The template context (docs/internals.md; mutable: `template_values` freezes)."""
    payload = inp.payload
    contact = payload.get("contact") or {}
    shown: Callable[[Any], Any] = _shown if confirmation else (lambda value: value)
    name = shown(contact.get("name") or "")
    first, _, last = str(name).strip().partition(" ")
    phone = str(contact.get("phone") or "")
    submitted = payload.get("submitted_at")
    return {
        "contact": {
            "name": name,
            "first_name": first,
            "last_name": last.strip(),
            "email": str(contact.get("email") or ""),
            "phone": phone if not confirmation or _PHONE.fullmatch(phone) else "",
        },
        "message": shown(payload.get("message") or ""),
        "fields": shown(payload.get("fields") or {}),
        "form": inp.form,
        "source": inp.source,
        "submitted_at": parse_datetime(submitted) if isinstance(submitted, str) else None,
        "reference": inp.refs.get("create_enquiry", ""),
    }


def _shown(value: Any) -> Any:
    """A visitor's value as a confirmation may show it (every string, at any depth)."""
    if isinstance(value, str):
        return greeting_name(value, markup=True)
    if isinstance(value, Mapping):
        return {key: _shown(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_shown(item) for item in value]
    return value


def value_at(values: Mapping[str, Any], path: str) -> str:
    """The value a value path names (document.py), as text; "" when absent."""
    head, _, rest = path.partition(".")
    value: Any = values.get(head)
    if rest:
        value = value.get(rest) if isinstance(value, Mapping) else None
    return "" if value is None else str(value).strip()


def _render(
    source: str, values: Mapping[str, Any], version: ConfigVersion, html: bool = False
) -> str:
    try:
        return template_render(source, values, html=html)
    except TemplateRenderError as exc:
        raise DestinationError(
            f"the business configuration (version {version.number}) could not be rendered: "
            f"{exc}; correct it (manage.py config apply), then replay",
            classification=Classification.PERMANENT,
        ) from exc


@_one_budget
def enquiry_render(inp: RenderInput, version: ConfigVersion, turn: Turn) -> dict[str, Any]:
    """An enquiry's content: its core fields, properties, contact's, pipeline, stage."""
    raw = submission_values(inp)
    values = template_values(raw)
    enquiry, contact = _block(inp, version, "enquiry"), _block(inp, version, "contact")

    def properties(templates: Mapping[str, str]) -> dict[str, str]:
        rendered = {name: _render(t, values, version) for name, t in templates.items()}
        return {name: value for name, value in rendered.items() if value.strip()}

    return {
        "kind": "enquiry",
        "version": version.number,
        "fields": enquiry_fields(inp),
        "properties": properties(enquiry.get("fields") or {}),
        "contact": properties(contact.get("fields") or {}),
        "pipeline": _render(enquiry.get("pipeline") or "", values, version).strip(),
        "stage": _render(enquiry.get("stage") or "", values, version).strip(),
    }


def enquiry_fields(inp: RenderInput) -> dict[str, Any]:
    """The enquiry's core fields, as every CRM adapter reads them."""
    payload = inp.payload
    contact = payload.get("contact") or {}
    return {
        "name": contact.get("name", ""),
        "email": contact.get("email", ""),
        "phone": contact.get("phone", ""),
        "message": payload.get("message", ""),
        "form": payload.get("form", ""),
        "source": inp.source,
        "submitted_at": payload.get("submitted_at"),
        "fields": payload.get("fields") or {},
    }


@_one_budget
def task_render(inp: RenderInput, version: ConfigVersion, turn: Turn) -> dict[str, Any]:
    """A task's content: its title, assignee (and the rule that chose it), due date."""
    raw = submission_values(inp)
    task = _block(inp, version, "task")
    title = _render(task.get("title") or DEFAULT_TITLE, template_values(raw), version).strip()
    form_key = form_block(version.document, inp.source, inp.form)[0]
    assignee, rule = assignee_choose(
        task.get("assignee"),
        raw,
        default=inp.default_assignee,
        turn=lambda: turn(f"{inp.source}/{form_key}"),
    )
    hours = task.get("due_in_hours")
    due_at = inp.now + timedelta(hours=float(hours)) if hours else None
    return {
        "kind": "task",
        "version": version.number,
        # An empty rendering (a field not sent) would leave the CRM a task without a title.
        "title": _LINE_BREAKS.sub(" ", title)
        or _render(DEFAULT_TITLE, template_values(raw), version),
        "assignee": assignee,
        "assignee_rule": rule,
        "due_at": due_at.isoformat() if due_at is not None else None,
    }


def assignee_choose(
    spec: object, values: Mapping[str, Any], *, default: str, turn: Callable[[], int]
) -> tuple[str, str]:
    """The assignee `spec` (a validated document's) names for these values, and the rule
    ("fixed", "round_robin", "from_field", or "source" when the source's own
    `task_assignee` is used: nothing configured, or a from_field with no default that
    matched nothing). Every rule but "source" names a CRM owner (execution/steps.py).
    A round robin takes `turn()`, the counter's new value (1 on), and gives the names in
    order; a field's value is matched exactly, then ignoring case, else the default."""
    if isinstance(spec, str) and spec.strip():
        return spec.strip(), "fixed"
    if isinstance(spec, Mapping) and spec.get("round_robin"):
        names = [str(name).strip() for name in spec["round_robin"]]
        return names[(turn() - 1) % len(names)], "round_robin"
    if isinstance(spec, Mapping) and spec.get("from_field"):
        chosen = value_at(values, str(spec["from_field"]))
        choices = {str(k): str(v).strip() for k, v in (spec.get("map") or {}).items()}
        if chosen in choices:
            return choices[chosen], "from_field"
        folded = {k.casefold(): v for k, v in choices.items()}
        if chosen.casefold() in folded:
            return folded[chosen.casefold()], "from_field"
        if spec.get("default"):
            return str(spec["default"]).strip(), "from_field"
        # No default configured: the source's own assignee, a label like any other
        # "source" rule (never looked up among the CRM's owners).
        return default, "source"
    return default, "source"


@_one_budget
def confirmation_render(inp: RenderInput, version: ConfigVersion, turn: Turn) -> dict[str, Any]:
    """A confirmation's content: whether it is sent, to whom, and what it says."""
    block = _block(inp, version, "confirmation")
    language, variant = _language(block, submission_values(inp))
    raw = submission_values(inp, confirmation=True)
    values = template_values(raw)
    subject = _render(variant.get("subject") or block.get("subject") or "", values, version)
    text = _render(variant.get("text") or block.get("text") or "", values, version)
    html = _render(variant.get("html") or block.get("html") or "", values, version, html=True)
    reply_to = _render(block.get("reply_to") or "", values, version).strip()
    if reply_to and not is_address(reply_to):
        raise DestinationError(
            f"the configuration's reply_to renders to {reply_to!r}, not one email address",
            classification=Classification.PERMANENT,
        )
    domains = allowed_reply_to_domains()
    if reply_to and domains and not in_domains(reply_to, domains):
        raise DestinationError(
            f"the configuration's reply_to is not in {', '.join(domains)} "
            "(ONEFOLD_REPLY_TO_DOMAINS); correct it (manage.py config apply), then replay",
            classification=Classification.PERMANENT,
        )
    contact = inp.payload.get("contact") or {}
    return {
        "kind": "confirmation",
        "version": version.number,
        "send": block.get("send", True) is not False,
        "to": str(contact.get("email") or "").strip(),
        "subject": " ".join(_LINE_BREAKS.sub(" ", subject).split()) or DEFAULT_SUBJECT,
        "text": text if text.strip() else confirmation_default_text(contact.get("name")),
        "html": html if html.strip() else None,
        "reply_to": reply_to or None,
        "language": language,
    }


def _language(block: Mapping[str, Any], values: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The language variant the submission asks for (`language_field`): the code as
    given, else its first part ("fr-CA" -> "fr"), ignoring case; ("", {}) for none."""
    languages = block.get("languages") or {}
    field = block.get("language_field")
    if not languages or not field:
        return "", {}
    wanted = value_at(values, str(field)).casefold().replace("_", "-")
    by_code = {str(code).casefold(): str(code) for code in languages}
    for candidate in (wanted, wanted.partition("-")[0]):
        if candidate and candidate in by_code:
            code = by_code[candidate]
            return code, languages[code] or {}
    return "", {}
