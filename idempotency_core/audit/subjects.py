"""What a review case is about, as the `subject` string invariant 5 is keyed on."""

from __future__ import annotations

_OPERATION = "operation:"
_EVENT = "event:"
_EVENTS = "events:"
_EXTERNAL_REF = "external_ref:"


def operation_subject(operation_id: int) -> str:
    """A case about one operation (an attempt's outcome, a stuck step)."""
    return f"{_OPERATION}{operation_id}"


def operation_subject_sql(id_column: str) -> str:
    """The same subject as `operation_subject`, as a SQL expression over `id_column`."""
    return f"'{_OPERATION}' || {id_column}"


def event_subject(event_id: object) -> str:
    """A case about a whole event (a late repeat of an expired key)."""
    return f"{_EVENT}{event_id}"


def event_pair_subject(earlier_id: object, later_id: object) -> str:
    """A case about two events suspected to be one enquiry."""
    return f"{_EVENTS}{earlier_id}:{later_id}"


def external_ref_subject_sql(ref_column: str) -> str:
    """A case about a reference several destination records hold, as SQL."""
    return f"'{_EXTERNAL_REF}' || {ref_column}"


def record_subject_prefix(destination_name: str) -> str:
    """A case about one destination record is this prefix and the record's id."""
    return f"record:{destination_name}:"
