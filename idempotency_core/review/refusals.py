"""Why a reviewer's action is refused: one family, mapped to an answer once per UI."""

from __future__ import annotations


class ActionRefusedError(Exception):
    """The action cannot be done now; the message says why, for a person."""


class ReplayRefusedError(ActionRefusedError):
    """The operation cannot be replayed now."""


class CaseActionRefusedError(ActionRefusedError):
    """The action cannot be done on this case now."""


class MergeRefusedError(ActionRefusedError):
    """The merge cannot be done."""


def require_reason(reason: str) -> str:
    """The reason a person gave, refused when empty."""
    reason = reason.strip()
    if not reason:
        raise CaseActionRefusedError("Give a reason: the audit trail records why, not only what.")
    return reason
