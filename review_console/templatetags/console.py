"""Template helpers of the console: ages a tired reviewer reads at a glance."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

from review_console import glossary

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

register.filter("step_label", glossary.step_label)
register.filter("kind_label", glossary.kind_label)
register.filter("case_status_label", glossary.case_status_label)
register.filter("op_status_label", glossary.operation_status_label)
register.filter("outcome_label", glossary.outcome_label)
register.filter("recovery_label", glossary.recovery_label)
register.filter("trigger_label", glossary.trigger_label)
register.filter("resolution_label", glossary.resolution_label)
register.filter("action_label", glossary.action_label)
register.filter("delivery_label", glossary.delivery_outcome_label)
register.filter("evidence_rows", glossary.evidence_rows)
register.filter("reply_text_label", glossary.reply_text_label)


@register.filter
def reply_words(attempt: Any) -> str:
    """An attempt's answer code in words ("accepted by the mail server" for SMTP 250)."""
    return glossary.reply_label(
        smtp_code=getattr(attempt, "smtp_code", None),
        http_status=getattr(attempt, "http_status", None),
    )


register.filter("plain", glossary.plain_text)
register.filter("reference_text", glossary.reference_text)
