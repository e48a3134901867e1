"""Template helpers of the console: ages a tired reviewer reads at a glance, and people
named as people ("Rita Ray", "Onefold"), never as actor ids ("user:rita", "system:worker")."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from review_console import glossary
from review_console.cases.story import destination_words

register = template.Library()


@register.filter
def ago(value: datetime | None) -> str:
    """'just now', '12 min ago', '3 h ago', '5 d ago'."""
    if not value:
        return ""
    seconds = int((timezone.now() - value).total_seconds())
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} d ago"


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'}"


def relative_words(value: datetime, *, now: datetime | None = None) -> str:
    """'just now', '3 minutes ago', '2 hours ago', 'yesterday', '5 days ago' (or 'in ...')."""
    seconds = int(((now or timezone.now()) - value).total_seconds())
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        words = _count(seconds // 60, "minute")
    elif seconds < 86400:
        words = _count(seconds // 3600, "hour")
    elif seconds < 2 * 86400 and not future:
        return "yesterday"
    else:
        words = _count(seconds // 86400, "day")
    return f"in {words}" if future else f"{words} ago"


@register.filter
def when(value: datetime | None) -> SafeString | str:
    """A moment as a person reads it: relative words in a `<time>` whose `datetime` is
    exact and whose title is the exact local time (console.js rewrites the title in
    the browser's own time zone; the server's, named, until it does)."""
    if not value:
        return ""
    local = timezone.localtime(value)
    exact = f"{local:%a} {local.day} {local:%b %Y, %H:%M} {local.tzname() or ''}".strip()
    return format_html(
        '<time datetime="{}" title="{}">{}</time>', value.isoformat(), exact, relative_words(value)
    )


def person_name(user: Any) -> str:
    """A person as colleagues name them: their full name, else their username."""
    if user is None:
        return "Onefold"
    full = user.get_full_name().strip() if hasattr(user, "get_full_name") else ""
    return full or str(user.get_username())


@register.filter
def person(user: Any) -> str:
    return person_name(user) if user is not None else "nobody"


@register.filter
def actor_name(entry: Any) -> str:
    """Who took an audited decision: a person's name, or "Onefold" for its own parts
    (worker, sweeper, reconciliation), never the stored label ("system:worker")."""
    actor = getattr(entry, "actor", None)
    if actor is not None:
        return person_name(actor)
    label = str(getattr(entry, "actor_label", "") or "")
    if label.startswith("user:"):
        return label.removeprefix("user:")
    return "Onefold"


@register.filter
def age_class(value: datetime | None) -> str:
    """CSS class by age: older work stands out."""
    if not value:
        return ""
    hours = (timezone.now() - value).total_seconds() / 3600
    return "age-old" if hours >= 24 else "age-mid" if hours >= 1 else "age-new"


@register.filter
def get_item(mapping: dict[str, Any], key: str) -> Any:
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.filter
def get_index(sequence: Any, index: int) -> Any:
    try:
        return sequence[int(index)]
    except (IndexError, TypeError, ValueError, KeyError):
        return None


@register.simple_tag(takes_context=True)
def query_with(context: dict[str, Any], **changes: Any) -> str:
    """The current query string with some parameters replaced (sorting, paging)."""
    params = context["request"].GET.copy()
    for key in ("after", "before"):
        params.pop(key, None)
    for key, value in changes.items():
        if value in (None, ""):
            params.pop(key, None)
        else:
            params[key] = value
    return params.urlencode()


# -- plain language (review_console/glossary.py) -----------------------------------

# The template filter each glossary function is known by.
GLOSSARY_FILTERS: dict[str, Callable[[Any], Any]] = {
    "step_label": glossary.step_label,
    "kind_label": glossary.kind_label,
    "case_status_label": glossary.case_status_label,
    "op_status_label": glossary.operation_status_label,
    "outcome_label": glossary.outcome_label,
    "recovery_label": glossary.recovery_label,
    "trigger_label": glossary.trigger_label,
    "resolution_label": glossary.resolution_label,
    "action_label": glossary.action_label,
    "delivery_label": glossary.delivery_outcome_label,
    "evidence_rows": glossary.evidence_rows,
    "reply_text_label": glossary.reply_text_label,
}
for _name, _words in GLOSSARY_FILTERS.items():
    register.filter(_name, _words)


@register.filter
def reply_words(attempt: Any) -> str:
    """An attempt's answer code in words ("accepted by the mail server" for SMTP 250)."""
    return glossary.reply_label(
        smtp_code=getattr(attempt, "smtp_code", None),
        http_status=getattr(attempt, "http_status", None),
    )


register.filter("plain", glossary.plain_text)
register.filter("reference_text", glossary.reference_text)
register.filter("missing_words", glossary.missing_words)


@register.filter
def destination_label(destination: Any) -> str:
    """'the CRM' or 'the mail service' (its configured name is a technical detail)."""
    return destination_words(destination)
