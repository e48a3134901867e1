"""Constraints several models declare alike."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


def choices_valid(
    field: str, choices: type[models.TextChoices], name: str
) -> models.CheckConstraint:
    """The database's own check that `field` holds one of `choices`' values: a row
    a hand-written statement writes is held to the same list as the ORM's."""
    return models.CheckConstraint(
        condition=Q(**{f"{field}__in": [c.value for c in choices]}), name=name
    )
