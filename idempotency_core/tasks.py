"""django-q2 task entry points. Thin: take an id, call a service, safe to run twice."""

from __future__ import annotations

from dataclasses import asdict

from idempotency_core.engine import operation_execute
from idempotency_core.sweeper import operations_sweep


def operation_run(operation_id: int) -> str | None:
    # Onefold records every outcome on the operation and returns normally, so
    # the broker's own retry is only a backstop for a crashed worker.
    return operation_execute(operation_id=operation_id)


def sweep() -> dict[str, int]:
    return asdict(operations_sweep())
