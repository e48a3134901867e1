"""A vendor's emulator as the default destination, its controls, and delivery storms:
shared by the vendor pipeline tests
(tests/integrations/<vendor>/test_<vendor>_pipeline.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from idempotency_core.execution.destinations import verification_forget
from idempotency_core.models import Operation
from lab.emulators.kit import EmulatorServer


@contextmanager
def emulator_as_default(
    emulator: EmulatorServer,
    *,
    setting: str,
    kind: str,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    **env: str,
) -> Iterator[httpx.Client]:
    """The emulator, reset, as the default `setting` ("ONEFOLD_CRM" or "ONEFOLD_EMAIL")
    with its adapter's variables (plus `env`); yields a client of its controls."""
    with httpx.Client(base_url=emulator.http_url, timeout=30) as control:
        assert control.post("/_sandbox/reset").status_code == 200
        for name, value in {**emulator.adapter_env(), **env}.items():  # type: ignore[attr-defined]
            monkeypatch.setenv(name, value)
        setattr(settings, setting, kind)
        verification_forget()
        yield control
        verification_forget()


def configure(control: httpx.Client, **changes: Any) -> None:
    assert control.post("/_sandbox/config", json=changes).status_code == 200


def fault(control: httpx.Client, action: str, mode: str, times: int = 1) -> None:
    body = {"action": action, "mode": mode, "times": times}
    assert control.post("/_sandbox/faults", json=body).status_code == 200


def stats(control: httpx.Client) -> dict[str, Any]:
    return dict(control.get("/_sandbox/stats").json())


def deliver_at_once(
    pool: ThreadPoolExecutor,
    url: str,
    api_key: str,
    event_key: str,
    body: dict[str, Any],
    *,
    deliveries: int,
) -> list[int]:
    """`deliveries` POSTs of one submission released together by a barrier: their codes."""
    barrier = threading.Barrier(deliveries)

    def deliver(_: int) -> int:
        # Plain HTTP on loopback: no certificate to verify, and httpx's default SSL
        # context costs 15-25 ms of CPU a client (a storm makes 1,000 of them).
        with httpx.Client(timeout=60, verify=False) as client:
            barrier.wait(timeout=60)
            return client.post(
                f"{url}/api/v1/submissions/",
                json=body,
                headers={"Authorization": f"Api-Key {api_key}", "Idempotency-Key": event_key},
            ).status_code

    return list(pool.map(deliver, range(deliveries)))


def all_settled(operations: int) -> bool:
    """`operations` operations exist and none is still on its way."""
    unsettled = Operation.objects.exclude(
        status__in=[Operation.Status.SUCCEEDED, Operation.Status.NEEDS_REVIEW]
    )
    return Operation.objects.count() == operations and not unsettled.exists()
