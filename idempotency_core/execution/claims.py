"""The claim: an operation taken, and committed, before its destination is called.

Also the claims a chain collects: while `operation_execute_chain` records an outcome,
the step its success releases is claimed for the same worker instead of queued.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from django.conf import settings
from django.utils import timezone

from idempotency_core.execution.confirmations import Allowance
from idempotency_core.execution.statements import SCREENED, Taken, claim_take
from idempotency_core.models import Operation

# Set by operation_execute_chain while it records an outcome: the step that
# success releases is claimed for this worker (appended here) instead of queued.
_chained: ContextVar[list[Claim] | None] = ContextVar("onefold_chained", default=None)


@contextmanager
def claims_chained(into: list[Claim] | None) -> Iterator[None]:
    """Within it, what a success releases is claimed into `into` (None: queued)."""
    token = _chained.set(into)
    try:
        yield
    finally:
        _chained.reset(token)


def chain_collector() -> list[Claim] | None:
    """The list the released steps' claims go to, or None when they are queued."""
    return _chained.get()


class ClaimedAttempt(NamedTuple):
    """The claim's attempt as the outcome reads it: its row, inserted by the claim's
    statement, by id, and its number. Not an `Attempt` instance: building one for each
    step showed in the worker's profile, and nothing reads more of it."""

    pk: int
    number: int


@dataclass(frozen=True)
class Claim:
    operation: Operation
    attempt: ClaimedAttempt
    token: uuid.UUID
    # The earlier succeeded steps' references, when the claim read them (statements.py).
    refs: dict[str, str] | None = None
    # A confirmation's decision, made by the statement that claimed it (a chain's).
    allowance: Allowance | None = None


@dataclass(frozen=True)
class Screen:
    """A check run before the claim when `sql` (a boolean over `params()` and the
    operation's id) is true; the claim's statement evaluates it, so the usual case
    costs no round trip. Used by the suspected-duplicate search."""

    sql: str
    params: Callable[[], list[object]]
    check: Callable[[int], object]


def operation_claim(*, operation_id: int, screen: Screen | None = None) -> Claim | None:
    """Takes the operation if it is due and nobody holds it; None otherwise.

    Committed before the destination is called, so a second worker (or a
    redelivered task) finds it running and leaves it alone. The attempt records
    who or what scheduled it (worker, sweeper, a replaying admin).
    """
    # One statement, in its own transaction (autocommit): committed when it returns.
    claim = _claim_take(operation_id, now=timezone.now(), screen=screen)
    if claim == SCREENED and screen is not None:
        screen.check(operation_id)
        claim = _claim_take(operation_id, now=timezone.now())
    return claim if isinstance(claim, Claim) else None


def _claim_take(
    operation_id: int, *, now: datetime, screen: Screen | None = None
) -> Claim | Literal["screened"] | None:
    """The claim's conditional UPDATE of the operation, if due and unowned, and its
    attempt. Committed before the destination is called. One statement
    (statements.claim_take), which evaluates `screen` too (SCREENED when it holds)."""
    token = uuid.uuid4()
    taken = claim_take(
        operation_id,
        token=token,
        now=now,
        lease_until=lease_until(now),
        unless=None if screen is None else (screen.sql, screen.params()),
    )
    if taken is None or taken == SCREENED:
        return taken
    return claim_of(taken, token=token)


def lease_until(now: datetime) -> datetime:
    return now + timedelta(seconds=settings.ONEFOLD_LEASE_SECONDS)


def claim_of(taken: Taken, *, token: uuid.UUID, allowance: Allowance | None = None) -> Claim:
    """The claim a statement took (statements.py), its attempt already inserted."""
    operation, attempt_id, refs = taken
    # The statement numbered the attempt by the claimed row's count (statements.py).
    attempt = ClaimedAttempt(attempt_id, operation.attempt_count)
    return Claim(operation=operation, attempt=attempt, token=token, refs=refs, allowance=allowance)
