"""Template helpers of the console: ages a tired reviewer reads at a glance."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone

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
