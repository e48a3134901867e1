"""Keyset paging of the console's long lists (the queue, the audit trail): a page
follows the last row's sort key, not an OFFSET, so page 2000 costs what page 1 costs."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.exceptions import BadRequest
from django.db.models import (
    CharField,
    DateTimeField,
    IntegerField,
    Model,
    Q,
    QuerySet,
)
from django.utils.dateparse import parse_datetime

PAGE_SIZE = 50
COUNT_CAP = 10_000


@dataclass
class KeysetPage:
    items: list[Any]
    next_cursor: str = ""
    prev_cursor: str = ""
    total: int = 0
    total_capped: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _encode(values: list[Any]) -> str:
    raw = json.dumps([v.isoformat() if isinstance(v, datetime) else v for v in values])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


class InvalidCursorError(BadRequest):
    """A page link that no page printed (edited, truncated or forged): answered 400
    by Django's handler, never a guess at which page was meant."""


# A cursor this module writes is under 200 characters; anything far longer was not.
_CURSOR_MAX_LENGTH = 1000


_BIGINT = 2**63


def _decode(cursor: str, fields: tuple[str, ...], model: type[Model]) -> list[Any]:
    """The sort key a cursor carries, each value checked against its model field's type
    before it reaches a query: a value PostgreSQL or Python's dates cannot hold would
    otherwise fail inside the query (500) instead of being refused (400)."""
    refused = InvalidCursorError("This page link is not valid; start again from the first page.")
    if len(cursor) > _CURSOR_MAX_LENGTH:
        raise refused
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(
            base64.urlsafe_b64decode(padded.encode()), parse_constant=_refuse_constant
        )
    except (ValueError, TypeError, RecursionError):
        raise refused from None
    if not isinstance(values, list) or len(values) != len(fields):
        raise refused
    try:
        return [
            _cursor_value(model._meta.get_field(name.lstrip("-")), value)
            for name, value in zip(fields, values, strict=True)
        ]
    except (ValueError, TypeError):
        raise refused from None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a sort key")  # NaN, Infinity: json.loads accepts them


def _cursor_value(model_field: Any, value: Any) -> Any:
    """`value` as `model_field` stores it, or ValueError."""
    if isinstance(model_field, DateTimeField):
        parsed = parse_datetime(value) if isinstance(value, str) else None  # may raise
        if parsed is None or parsed.tzinfo is None:
            raise ValueError("not an aware timestamp")
        return parsed
    if isinstance(model_field, IntegerField):  # AutoField and BigAutoField included
        # bool is an int to Python, not to a cursor; bigint is PostgreSQL's widest.
        if type(value) is not int or not -_BIGINT <= value < _BIGINT:
            raise ValueError("not an integer the column holds")
        return value
    if isinstance(model_field, CharField):
        if not isinstance(value, str) or len(value) > (model_field.max_length or 0):
            raise ValueError("not a text the column holds")
        value.encode()  # a lone surrogate raises UnicodeEncodeError, a ValueError
        if "\x00" in value:
            raise ValueError("PostgreSQL text cannot hold NUL")
        return value
    raise ValueError(f"{model_field.name} cannot be a sort key")


def _beyond(fields: tuple[str, ...], values: list[Any], *, forward: bool) -> Q:
    """Rows strictly after (or before) `values` in the order of `fields`.

    Expanded as (a > x) OR (a = x AND b > y) ..., and AND-ed with `a >= x` so
    that PostgreSQL seeks the index to the cursor instead of filtering from the
    first row.
    """
    descending = fields[0].startswith("-")
    greater = forward != descending
    op = "gt" if greater else "lt"
    names = [f.lstrip("-") for f in fields]
    condition = Q()
    for i, name in enumerate(names):
        term = Q(**{f"{name}__{op}": values[i]})
        for j in range(i):
            term &= Q(**{names[j]: values[j]})
        condition |= term
    seek = Q(**{f"{names[0]}__{op}e": values[0]})
    return seek & condition


def keyset_page(
    queryset: QuerySet,
    *,
    fields: tuple[str, ...],
    after: str = "",
    before: str = "",
    size: int = PAGE_SIZE,
    count_cap: int = COUNT_CAP,
) -> KeysetPage:
    names = [f.lstrip("-") for f in fields]
    cursor = before or after
    cursor_values = _decode(cursor, fields, queryset.model) if cursor else None
    backwards = bool(before)
    qs = queryset
    if cursor_values is not None:
        qs = qs.filter(_beyond(fields, cursor_values, forward=not backwards))
    if backwards:
        reverse = [f[1:] if f.startswith("-") else f"-{f}" for f in fields]
        rows = list(qs.order_by(*reverse)[: size + 1])
        more_before = len(rows) > size
        rows = list(reversed(rows[:size]))
        has_prev, has_next = more_before, True
    else:
        rows = list(qs.order_by(*fields)[: size + 1])
        has_next = len(rows) > size
        rows = rows[:size]
        has_prev = cursor_values is not None
    # A capped count: "10,000+" tells a reviewer as much as an exact figure and
    # stops counting a six-figure queue on every page view.
    total = queryset.order_by().values("pk")[: count_cap + 1].count()
    page = KeysetPage(items=rows, total=min(total, count_cap), total_capped=total > count_cap)
    if rows and has_next:
        page.next_cursor = _encode([getattr(rows[-1], n) for n in names])
    if rows and has_prev:
        page.prev_cursor = _encode([getattr(rows[0], n) for n in names])
    return page
