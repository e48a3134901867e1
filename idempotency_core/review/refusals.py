"""Why a reviewer's action is refused: one family, mapped to an answer once per UI.

Every review service raises a subclass of `ActionRefusedError` with a message
written for a person. The staff API turns the family into 409 Conflict in one
place, and the console's confirm-action helper turns it into a form error in
one place, so no view has to know which service refuses what.
"""

from __future__ import annotations


class ActionRefusedError(Exception):
    """The action cannot be done now; the message says why, for a person."""


class ReplayRefusedError(ActionRefusedError):
    """The operation cannot be replayed now."""


class CaseActionRefusedError(ActionRefusedError):
    """The action cannot be done on this case now."""


class MergeRefusedError(ActionRefusedError):
    """The merge cannot be done."""
