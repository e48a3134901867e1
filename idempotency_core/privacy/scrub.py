"""Replacing a person's values wherever they were quoted: case summaries and evidence,
attempts' errors, audit details. The values are matched as they are written and as
JSON, URLs and HTML would carry them, without regard to case."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable
from functools import reduce
from operator import or_
from typing import Any
from urllib.parse import quote, quote_plus

from django.db.models import Q

ERASED = "[erased]"
# Shorter values ("10k", "yes") are common words: they are erased only inside rows that
# belong to the person, never looked for in everyone's rows.
SEARCHABLE_LENGTH = 6
# A phone number is also matched by its digits alone ("+44 20 7946 0000" as 442079460000).
_PHONE_DIGITS = 7


def variants(value: str) -> set[str]:
    """How `value` may appear once quoted by JSON, a URL or HTML."""
    found = {value, json.dumps(value)[1:-1], quote(value, safe=""), quote_plus(value)}
    found.add(html.escape(value))
    digits = re.sub(r"\D", "", value)
    if len(digits) >= _PHONE_DIGITS and re.fullmatch(r"[\d\s()+.\-/]+", value):
        found.add(digits)
    return {v for v in found if v.strip()}


class Scrubber:
    """Replaces `values` anywhere in a text (those shorter than SEARCHABLE_LENGTH, and
    `words`, a name's parts, only as whole words: "yes" is no part of "yesterday")."""

    def __init__(self, values: Iterable[str], words: Iterable[str] = ()) -> None:
        every = sorted({v for value in values for v in variants(value)}, key=len, reverse=True)
        self.values = tuple(every)
        long = [re.escape(v) for v in every if len(v) >= SEARCHABLE_LENGTH]
        short = sorted(
            {w for w in (*words, *(v for v in every if len(v) < SEARCHABLE_LENGTH)) if w},
            key=len,
            reverse=True,
        )
        whole = [rf"(?<!\w){re.escape(w)}(?!\w)" for w in short]
        self._long = re.compile("|".join(long), re.IGNORECASE) if long else None
        self._all = re.compile("|".join(long + whole), re.IGNORECASE) if long + whole else None

    def text(self, text: str) -> str:
        if self._all is None or not text:
            return text
        return self._all.sub(ERASED, text)

    def value(self, value: Any) -> Any:
        """A JSON value with every string scrubbed. Keys only by the long values (an
        address counted by recipient): a short value may be a key's own name."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, dict):
            return {self._key(str(k)): self.value(v) for k, v in value.items()}
        return value

    def _key(self, key: str) -> str:
        return self._long.sub(ERASED, key) if self._long is not None and key else key

    def searchable(self) -> tuple[str, ...]:
        """The variants worth looking for in everyone's rows."""
        return tuple(v for v in self.values if len(v) >= SEARCHABLE_LENGTH)

    def mentions(self, fields: Iterable[str]) -> Q:
        """Rows where any of `fields` mentions a searchable value (case-insensitive;
        a JSON field is read as its text)."""
        terms = [Q(**{f"{field}__icontains": v}) for field in fields for v in self.searchable()]
        return reduce(or_, terms) if terms else Q(pk__in=[])
