"""A worker of the shared-budget test (tests/core/test_budget.py), run as a process of
its own: `python -m tests.support.budget_taker DESTINATION_ID SECONDS REQUESTS PER_SECONDS`.
Takes requests as fast as the budget allows and prints the database's time of each, as
JSON, when done."""

from __future__ import annotations

import json
import sys
import time

import django


def main(destination_id: int, seconds: float, requests: int, per_seconds: float) -> None:
    from idempotency_core.execution.budget import Budget, budget_take, budget_take_at

    budget = Budget(requests, per_seconds, "configured")
    taken: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        at = budget_take_at(destination_id, budget)
        if at is not None:
            taken.append(at.timestamp())
            continue
        wait = budget_take(destination_id, budget)
        if wait is not None:
            time.sleep(min(wait.seconds, 0.05))
    print(json.dumps(taken))


if __name__ == "__main__":
    django.setup()
    main(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
