"""Salesforce's record ids ([IDS] in the emulator's store): 15 or 18 letters and
digits, the first three the object's key prefix, an 18-character id's last three the
case checksum of the first 15."""

from __future__ import annotations

import re

KEY_PREFIXES = {"Lead": "00Q", "Contact": "003", "Task": "00T"}
_ID = re.compile(r"[A-Za-z0-9]{15}(?:[A-Za-z0-9]{3})?")
_SUFFIX = "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"


def id_problem(value: str, prefix: str, sobject: str) -> str | None:
    """[IDS]: 15 or 18 letters and digits, starting with the object's key prefix; an
    18-character id's last three characters are the case checksum of the first 15."""
    shape = f"Salesforce {sobject} ids are 15 or 18 letters and digits starting with {prefix}"
    if not _ID.fullmatch(value) or not value.startswith(prefix):
        return shape
    if len(value) == 18 and value[15:].upper() != checksum(value[:15]):
        return f"{shape}; the last three characters of this one do not match the first 15"
    return None


def checksum(id15: str) -> str:
    suffix = ""
    for start in range(0, 15, 5):
        bits = sum(1 << i for i, ch in enumerate(id15[start : start + 5]) if "A" <= ch <= "Z")
        suffix += _SUFFIX[bits]
    return suffix


def user_id(assignee: str) -> str | None:
    """`assignee` when it is a user id (005...)."""
    return assignee if id_problem(assignee, "005", "User") is None else None
