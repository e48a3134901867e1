"""A suspected duplicate's records side by side: which fields are the same, nearly the
same (spacing, capitals) or different. Reads only."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from idempotency_core.models import (
    ReviewCase,
)
from idempotency_core.review.comparison import FetchedRecord
from review_console.masking import record_for

COMPARED_FIELDS = ("name", "email", "phone", "message")


COMPARED_LABELS = {
    "name": "Name",
    "email": "Email",
    "phone": "Phone",
    "message": "Message",
    "created_at": "Made in the CRM",
}


# What the record holds that is not the customer's (Onefold's reference, the CRM's own
# bookkeeping): under Technical details only.
_TECHNICAL_RECORD_KEYS = frozenset({"external_ref", "created_at", "updated_at", "merged_into"})


SAME, NEARLY, DIFFERENT = "same", "nearly", "differs"


def comparable(value: str) -> str:
    """A value as two people would compare it: spacing and capitals aside."""
    return " ".join(value.split()).casefold()


def compare_values(values: list[str]) -> str:
    """SAME, NEARLY ("the same apart from spacing or capitals") or DIFFERENT."""
    if len(set(values)) <= 1:
        return SAME
    return NEARLY if len({comparable(v) for v in values}) == 1 else DIFFERENT


def duplicate_comparison(
    case: ReviewCase, records: list[FetchedRecord], *, unmasked: bool
) -> dict[str, Any]:
    """The records (fetched by the review service `duplicate_records_fetch`) side by
    side, oldest first, masked for the viewer, each with the submission it came from.
    Each row says whether the values are the same, the same apart from spacing or
    capitals, or different, decided on the real values (masked, "Lena Tan" and "Lars
    Tell" both read "L. T."); a row empty on every side is left out. No network."""
    real = sorted(
        (r for r in records if r.record is not None),
        key=lambda r: str((r.record or {}).get("created_at") or ""),
    )
    present = [replace(r, record=record_for(r.record or {}, unmasked=unmasked)) for r in real]
    extra_keys = sorted(
        {k for r in real for k in ((r.record or {}).get("extra") or {})}
        - _TECHNICAL_RECORD_KEYS
        - set(COMPARED_FIELDS)
    )
    rows = []
    for name in (*COMPARED_FIELDS, *(f"extra.{k}" for k in extra_keys)):
        actual = [_field_text(r.record or {}, name) for r in real]
        if not any(actual):
            continue  # nothing on any side: no row (no "FIELDS {}")
        shown = [_field_text(c.record or {}, name) for c in present]
        times = [_as_moment(v) for v in shown]
        label = name.removeprefix("extra.").replace("_", " ").capitalize()
        rows.append(
            {
                "field": COMPARED_LABELS.get(name, label),
                "values": shown,
                # Timestamps (a form's "submitted_at") are shown as local, relative times.
                "times": times if all(t is not None for t in times) else None,
                "compared": compare_values(actual),
                "differs": compare_values(actual) == DIFFERENT,
            }
        )
    return {
        "records": records,
        "present": present,
        "made": [_made_at(r.record or {}) for r in present],
        "rows": rows,
        "problems": [r for r in records if r.record is None],
        "evidence_external_ref": (case.evidence or {}).get("external_ref", ""),
    }


def _made_at(record: dict[str, Any]) -> datetime | None:
    return _as_moment(record.get("created_at"))


def _as_moment(value: Any) -> datetime | None:
    """An aware ISO timestamp as a datetime, else None."""
    try:
        parsed = parse_datetime(value) if isinstance(value, str) and "T" in value else None
    except ValueError:
        return None
    return parsed if parsed is not None and parsed.tzinfo is not None else None


def _field_text(record: dict[str, Any], name: str) -> str:
    if name.startswith("extra."):
        value = (record.get("extra") or {}).get(name[6:], "")
    elif name == "phone":
        value = record.get("phone") or (record.get("extra") or {}).get("phone", "")
    else:
        value = record.get(name, "")
    if value in (None, {}, []):
        return ""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {v}" for k, v in value.items() if v not in (None, "", {}, []))
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)
