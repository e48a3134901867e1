"""The engine: claim an operation, call its destination, record the outcome.

The claim is committed before any network call, the outcome is written only under
the claim token, and the next step is released with this one's success. Every caller
goes through `operation_execute` (or `operation_execute_chain`), so none bypasses them.
The parts: claims.py (the claim), perform.py (the call), outcomes.py (the outcome and
what it releases or holds), enqueue.py (the task).
"""

from __future__ import annotations

import time

from django.conf import settings

from idempotency_core.execution.claims import Claim, Screen, claims_chained, operation_claim
from idempotency_core.execution.enqueue import TASK, operation_enqueue, tasks_queued_to
from idempotency_core.execution.outcomes import operation_record_outcome
from idempotency_core.execution.perform import operation_perform
from idempotency_core.platform.logfilters import log_ids_bound

# The entry points: a caller either runs an operation now or queues its task.
__all__ = [
    "TASK",
    "Screen",
    "operation_enqueue",
    "operation_execute",
    "operation_execute_chain",
    "tasks_queued_to",
]

_CHAIN_MARGIN_SECONDS = 0.5


def operation_execute(*, operation_id: int) -> str | None:
    """Runs one attempt if the operation can be claimed. Safe to call twice at once."""
    claim = operation_claim(operation_id=operation_id)
    if claim is None:
        return None
    result = operation_perform(claim)
    operation_record_outcome(claim=claim, result=result)
    return result.outcome


def operation_execute_chain(
    *, operation_id: int, seconds: float, screen: Screen | None = None
) -> str | None:
    """`operation_execute`, then each step its success releases, in this task.

    The next step is claimed with this one's success instead of queued, while the
    `seconds` left cover a lookup and a call; a worker that dies between leaves a
    lease the sweeper recovers. Returns the outcome of `operation_id`'s attempt.
    """
    deadline = time.monotonic() + seconds
    first = operation_claim(operation_id=operation_id, screen=screen)
    claims = [first] if first is not None else []
    outcome = None
    while claims:
        claim = claims.pop(0)
        # The task's log lines named the first operation; each step names its own.
        with log_ids_bound(operation_id=claim.operation.pk):
            result = operation_perform(claim)
            outcome = outcome or result.outcome
            time_left = deadline - time.monotonic()
            chained: list[Claim] | None = [] if time_left > _chain_allowance() else None
            with claims_chained(chained):
                operation_record_outcome(claim=claim, result=result)
        claims.extend(chained or ())
    return outcome


def _chain_allowance() -> float:
    """The time a chained step may need: a lookup and a call, each bounded by the
    HTTP timeout, and a margin for the two transactions around them."""
    return 2 * settings.ONEFOLD_HTTP_TIMEOUT_SECONDS + _CHAIN_MARGIN_SECONDS
