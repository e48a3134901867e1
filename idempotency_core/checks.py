"""System checks that refuse timing settings under which a task could run twice unseen.

See shared TASK-QUEUE.md, rule 7: the broker's `retry` must outlast a task's
longest wait plus run, and a claim's lease must outlast the task timeout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register


@register(Tags.compatibility)
def check_task_queue_timings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    q = settings.Q_CLUSTER
    errors: list[CheckMessage] = []
    workers = int(q.get("workers", 1))
    timeout = q.get("timeout")
    retry = q.get("retry")
    queue_limit = q.get("queue_limit", workers)
    if timeout is None or retry is None:
        return [Error("Q_CLUSTER needs both 'timeout' and 'retry'.", id="onefold.E001")]
    floor = timeout * (1 + math.ceil((queue_limit + 1) / workers))
    if retry <= floor:
        errors.append(
            Error(
                f"Q_CLUSTER retry={retry}s must exceed timeout x (1 + ceil((queue_limit+1)/"
                f"workers)) = {floor}s, or a queued task is handed out twice.",
                hint="Raise ONEFOLD_Q_RETRY or lower ONEFOLD_Q_TIMEOUT.",
                id="onefold.E002",
            )
        )
    if q.get("bulk", 1) != 1:
        errors.append(Error("Q_CLUSTER bulk must be 1.", id="onefold.E003"))
    if queue_limit > workers:
        errors.append(Error("Q_CLUSTER queue_limit must not exceed workers.", id="onefold.E004"))
    lease = settings.ONEFOLD_LEASE_SECONDS
    if lease <= timeout:
        errors.append(
            Error(
                f"ONEFOLD_LEASE_SECONDS={lease} must exceed the task timeout ({timeout}s): "
                "a lease that expires while its worker may still be calling the destination "
                "lets a second attempt start beside it.",
                id="onefold.E005",
            )
        )
    if timeout <= settings.ONEFOLD_HTTP_TIMEOUT_SECONDS:
        errors.append(
            Error(
                "ONEFOLD_HTTP_TIMEOUT_SECONDS must be below the task timeout, so a hung "
                "destination call ends before the worker is killed.",
                id="onefold.E006",
            )
        )
    if settings.ONEFOLD_RETRY_MAX_SECONDS < settings.ONEFOLD_RETRY_BASE_SECONDS:
        errors.append(
            Error(
                "ONEFOLD_RETRY_MAX_SECONDS is below ONEFOLD_RETRY_BASE_SECONDS.", id="onefold.E007"
            )
        )
    if not settings.DEBUG and settings.SECRET_KEY == settings.INSECURE_SECRET_KEY:
        errors.append(
            Warning(
                "SECRET_KEY is the built-in development key.",
                hint="Set SECRET_KEY in the environment before serving real traffic.",
                id="onefold.W001",
            )
        )
    return errors
