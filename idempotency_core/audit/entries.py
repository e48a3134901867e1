"""Audit entries: the append-only record of decisions (invariant 6)."""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

from django.contrib.auth.models import User

from idempotency_core.models import AuditEntry, Event, Operation, ReviewCase


def audit_record(
    *,
    action: str,
    actor: User | None = None,
    system: str = "",
    case: ReviewCase | None = None,
    event: Event | None = None,
    operation: Operation | None = None,
    reason: str = "",
    details: dict[str, Any] | None = None,
) -> AuditEntry:
    """Writes one entry. Either a person (`actor`) or a named system part decided."""
    if actor is None and not system:
        raise ValueError("an audit entry needs an actor or a system name")
    label = f"user:{actor.get_username()}" if actor is not None else f"system:{system}"
    return AuditEntry.objects.create(
        actor=actor,
        actor_label=label,
        action=action,
        case=case,
        event=event_of(event, operation),
        operation=operation,
        reason=reason,
        details=details or {},
    )


def event_of(event: Event | None, operation: Operation | None) -> Event | None:
    """The submission an entry or a case is about: `event`, else `operation`'s."""
    if event is None and operation is not None:
        return operation.event
    return event


class _About(TypedDict, total=False):
    """Who decided (a person or a named system part), and why: as `audit_record`."""

    actor: User | None
    system: str
    reason: str
    details: dict[str, Any] | None


def case_audit(
    case: ReviewCase, *, action: str, operation: Operation | None = None, **about: Unpack[_About]
) -> AuditEntry:
    """An entry about `case`: it names the case's event and its operation (or
    `operation`), so that each of their trails shows the decision."""
    return audit_record(
        action=action,
        case=case,
        event=case.event,
        operation=operation if operation is not None else case.operation,
        **about,
    )
