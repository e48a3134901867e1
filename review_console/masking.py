"""Masking of contact details for viewers without `view_contact_details`.

Enough stays visible to tell two people apart on a call ("a***@example.com",
"+44 ** **** 0000", "A. L."), not enough to contact them.
"""

from __future__ import annotations

import re
from typing import Any

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
