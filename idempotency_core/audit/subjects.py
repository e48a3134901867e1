"""What a review case is about, as the `subject` string invariant 5 is keyed on."""

from __future__ import annotations

from django.db.models import Q

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


def event_pair_naming(event_id: object) -> Q:
    """The pair subjects that name the event, as the earlier or the later one (a
    filter on `subject`)."""
    return Q(subject__startswith=event_pair_subject(event_id, "")) | Q(
        subject__startswith=_EVENTS, subject__endswith=f":{event_id}"
    )


def event_pair_naming_sql(subject_column: str, event_column: str) -> str:
    """The same test as `event_pair_naming`, as SQL: whether the subject in
    `subject_column` is a pair naming the event in `event_column`."""
    return (
        f"(starts_with({subject_column}, '{_EVENTS}') AND {event_column}::text "
        f"IN (split_part({subject_column}, ':', 2), split_part({subject_column}, ':', 3)))"
    )


def external_ref_subject_sql(ref_column: str) -> str:
    """A case about a reference several destination records hold, as SQL."""
    return f"'{_EXTERNAL_REF}' || {ref_column}"


def record_subject_prefix(destination_name: str) -> str:
    """A case about one destination record is this prefix and the record's id."""
    return f"record:{destination_name}:"
