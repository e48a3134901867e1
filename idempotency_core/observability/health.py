"""/healthz and /readyz, for load balancers and orchestrators (docs/operations.md)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_safe
from django_q.models import OrmQ


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    return _no_store(JsonResponse({"status": "ok"}))


@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    checks = readiness(timeout=settings.ONEFOLD_READY_TIMEOUT_SECONDS)
    failed = [name for name, result in checks.items() if result != "ok"]
    return _no_store(
        JsonResponse(
            {"status": "unready" if failed else "ready", "checks": checks, "failed": failed},
            status=503 if failed else 200,
        )
    )


def _no_store(response: JsonResponse) -> JsonResponse:
    response["Cache-Control"] = "no-store"
    return response


def database_check() -> None:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def task_queue_check() -> None:
    alias = settings.Q_CLUSTER.get("orm")
    if alias:
        OrmQ.objects.using(alias).exists()
        return
    from django_q.brokers import get_broker

    if not get_broker().ping():
        raise ConnectionError("the task queue's broker did not answer")


CHECKS: dict[str, Callable[[], None]] = {
    "database": database_check,
    "task_queue": task_queue_check,
}


@dataclass
class _Probe:
    done: threading.Event = field(default_factory=threading.Event)
    # check name -> "ok" or the class of the error it raised (never its text: a
    # driver's message may name hosts and users).
    results: dict[str, str] = field(default_factory=dict)


_lock = threading.Lock()
_current: _Probe | None = None


def readiness(*, timeout: float) -> dict[str, str]:
    """Each check's result: "ok", an error's class, or "timeout" when it had not
    answered within `timeout` seconds."""
    global _current
    with _lock:
        probe = _current
        if probe is None or probe.done.is_set():
            probe = _current = _Probe()
            threading.Thread(
                target=_probe_run, args=(probe,), name="onefold-readyz", daemon=True
            ).start()
    probe.done.wait(timeout)
    return {name: probe.results.get(name, "timeout") for name in CHECKS}


def _probe_run(probe: _Probe) -> None:
    try:
        for name, check in CHECKS.items():
            try:
                check()
            except Exception as exc:  # any failure means "not ready", named by its class
                probe.results[name] = type(exc).__name__
            else:
                probe.results[name] = "ok"
    finally:
        # This thread's own connections: one probe, one connection, closed after it.
        connections.close_all()
        probe.done.set()
