"""`{% held_pair case unmasked as pair %}`: the two submissions of a held duplicate
(review_console/cases/held.py), for templates/review_console/cases/_hold_actions.html."""

from __future__ import annotations

from typing import Any

from django import template

from idempotency_core.models import ReviewCase
from review_console.cases.held import held_pair as _held_pair

register = template.Library()


@register.simple_tag
def held_pair(case: ReviewCase, unmasked: bool) -> dict[str, Any] | None:
    return _held_pair(case, unmasked=bool(unmasked))
