"""Masking of contact details for viewers without `view_contact_details`.

Enough stays visible to tell two people apart on a call ("a***@example.com",
"+44 ** **** 0000", "A. L."), not enough to contact them.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils import timezone

from idempotency_core.models import AuditEntry, Event
from idempotency_core.review.contact import REVEAL_ACTION, REVEAL_WINDOW

_DIGIT = re.compile(r"\d")


def mask_email(value: str) -> str:
    local, at, domain = (value or "").partition("@")
    if not at:
        return "***" if value else ""
    return f"{local[:1]}***@{domain}"


def mask_phone(value: str) -> str:
    """Keeps an international prefix and the last four digits."""
    value = value or ""
    digits = [m.start() for m in _DIGIT.finditer(value)]
    keep = set(digits[-4:])
    if value.startswith("+"):
        prefix = re.match(r"\+\d{1,3}", value)
        if prefix:
            keep |= set(range(prefix.start(), prefix.end()))
    return "".join("*" if i in digits and i not in keep else ch for i, ch in enumerate(value))


def mask_name(value: str) -> str:
    parts = (value or "").split()
    return " ".join(f"{p[0].upper()}." for p in parts)


def contact_for(payload: dict[str, Any] | None, *, unmasked: bool) -> dict[str, str]:
    """The contact block of a payload as shown to this viewer."""
    contact = (payload or {}).get("contact") or {}
    name = str(contact.get("name", ""))
    email = str(contact.get("email", ""))
    phone = str(contact.get("phone", ""))
    if unmasked:
        return {"name": name, "email": email, "phone": phone, "masked": ""}
    return {
        "name": mask_name(name),
        "email": mask_email(email),
        "phone": mask_phone(phone),
        "masked": "yes",
    }


def record_for(record: dict[str, Any], *, unmasked: bool) -> dict[str, Any]:
    """A destination record (CRM) with its contact fields masked for this viewer."""
    if unmasked:
        return dict(record)
    masked = dict(record)
    masked["name"] = mask_name(str(record.get("name", "")))
    masked["email"] = mask_email(str(record.get("email", "")))
    extra = dict(record.get("extra") or {})
    if "phone" in extra:
        extra["phone"] = mask_phone(str(extra["phone"]))
    masked["extra"] = extra
    return masked


def contact_revealed_to(user: Any, event: Event | None) -> AuditEntry | None:
    """The reveal of `event`'s contact details to `user` still in force, if any: one
    probe of the audit trail's event index."""
    if event is None or not getattr(user, "is_authenticated", False):
        return None
    return (
        AuditEntry.objects.filter(
            event=event,
            action=REVEAL_ACTION,
            actor=user,
            at__gte=timezone.now() - REVEAL_WINDOW,
        )
        .order_by("-at")
        .first()
    )


def revealed_event_ids(user: Any, *, limit: int = 1000) -> list[Any]:
    """The submissions whose contact details are revealed to `user` now (newest first)."""
    if not getattr(user, "is_authenticated", False):
        return []
    return list(
        AuditEntry.objects.filter(
            action=REVEAL_ACTION, actor=user, at__gte=timezone.now() - REVEAL_WINDOW
        )
        .exclude(event__isnull=True)
        .order_by("-at")
        .values_list("event_id", flat=True)[:limit]
    )
