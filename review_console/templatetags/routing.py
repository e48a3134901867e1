"""Template filters of routing: the group a case is handed on to."""

from __future__ import annotations

from django import template

from idempotency_core.models import ReviewCase
from idempotency_core.review.notifications import hand_on_group as _hand_on_group

register = template.Library()


@register.filter
def hand_on_group(case: ReviewCase) -> str:
    return _hand_on_group(case)
