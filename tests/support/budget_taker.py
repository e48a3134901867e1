"""A worker of the shared-budget test (tests/idempotency_core/execution/test_budget.py),
run as a process of its own:
`python -m tests.support.budget_taker DESTINATION_ID SECONDS REQUESTS PER_SECONDS`.
Reserves requests as fast as the budget allows and prints the time each was reserved
for (the database's clock), as
JSON, when done."""

from __future__ import annotations

import json
import sys
import time

import django


def main(destination_id: int, seconds: float, requests: int, per_seconds: float) -> None:
    from idempotency_core.execution.budget import Budget, budget_finish, budget_reserve

    budget = Budget(requests, per_seconds, "configured")
    taken: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        reserved = budget_reserve(destination_id, budget, within=1.0)
        if reserved is None:
            time.sleep(0.05)
            continue
        taken.append(reserved.at.timestamp())
        time.sleep(reserved.delay)  # as a worker does: its request goes at its turn
        budget_finish(destination_id, reserved)  # and is answered at once
    print(json.dumps(taken))


if __name__ == "__main__":
    django.setup()
    main(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
