"""The confirmation email through the Resend emulator: exactly once inside the key's window.

Real parts: PostgreSQL, the engine's own attempts (`operation_execute`, as a
worker runs them), the sandbox over loopback for the CRM and the Resend
emulator for email. The default "email" destination is switched to Resend by
ONEFOLD_EMAIL and configured from RESEND_* variables, as in production.

What is counted is what the emulator sent: its messages, by idempotency key.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import Attempt, Event, Operation, ReviewCase
from lab.emulators.resend import ResendEmulator
from tests.factories import ingest, op
from tests.support.vendors import configure, emulator_as_default, stats

pytestmark = pytest.mark.django_db
WINDOW = 1.0  # seconds: the emulator's key window and the adapter's, in the "outside" test


@pytest.fixture(scope="module")
def emulator() -> Iterator[ResendEmulator]:
    with ResendEmulator() as server:
        yield server


@pytest.fixture
def resend(
    emulator: ResendEmulator, sandbox: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[httpx.Client]:
    """The emulator, reset, as the default email destination; the CRM is the sandbox."""
    with emulator_as_default(
        emulator, setting="ONEFOLD_EMAIL", kind="resend", settings=settings, monkeypatch=monkeypatch
    ) as control:
        yield control


def fault(control: httpx.Client, mode: str) -> None:
    body = {"action": "send_email", "mode": mode}
    assert control.post("/_sandbox/faults", json=body).status_code == 200


def run_now(operation: Operation) -> str | None:
    """Executes the operation's next attempt now, whatever its scheduled time."""
    Operation.objects.filter(pk=operation.pk).update(next_attempt_at=timezone.now())
    return operation_execute(operation_id=operation.pk)


def confirmation_of(prefix: str) -> tuple[Event, Operation]:
    """An event whose enquiry and task are done; its confirmation not yet sent."""
    event = ingest(f"{prefix}-{uuid.uuid4().hex[:8]}", contact_from_key=True)
    for step in ("create_enquiry", "assign_task"):
        assert operation_execute(operation_id=op(event, step).pk) == Attempt.Outcome.SUCCEEDED
    return event, op(event, "send_confirmation")


@pytest.mark.parametrize(
    "mode", ["drop_response_after_commit", "http_500_after_commit"], ids=["lost", "500"]
)
def test_a_lost_answer_inside_the_window_is_retried_and_one_message_arrives(
    resend: httpx.Client, sandbox: Any, mode: str
) -> None:
    # Lifted on purpose: the domain check and two attempts run back to back here, faster
    # than Resend's 2 requests a second; the limit itself is met in the cluster test below.
    configure(resend, rate_limit=None)
    event, confirmation = confirmation_of("rs-inside")
    fault(resend, mode)
    assert operation_execute(operation_id=confirmation.pk) == Attempt.Outcome.AMBIGUOUS
    confirmation.refresh_from_db()
    assert confirmation.status == Operation.Status.RETRY_SCHEDULED
    assert confirmation.recovery == Operation.Recovery.REPEAT_WITH_KEY

    assert run_now(confirmation) == Attempt.Outcome.SUCCEEDED
    confirmation.refresh_from_db()
    sent = resend.get("/_sandbox/messages").json()["results"]
    assert [m["id"] for m in sent] == [confirmation.destination_ref]
    assert sent[0]["idempotency_key"] == confirmation.key
    assert sent[0]["to"] == [f"{event.key}@example.com"]
    counted = stats(resend)
    assert counted["messages_by_message_id"] == {confirmation.key: 1}
    assert counted["calls"]["send_email"] == 2  # two requests, one message
    assert sandbox.messages() == []  # nothing went through SMTP
    assert not ReviewCase.objects.exists()


def test_outside_the_window_a_case_and_no_second_message(
    resend: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is forgotten after its window (the emulator would send again, as Resend
    would after 24 hours), so the engine does not call: it opens a case."""
    configure(resend, idempotency_window_seconds=WINDOW)
    monkeypatch.setenv("RESEND_KEY_RETENTION_SECONDS", str(WINDOW))
    _, confirmation = confirmation_of("rs-outside")
    fault(resend, "drop_response_after_commit")
    assert operation_execute(operation_id=confirmation.pk) == Attempt.Outcome.AMBIGUOUS
    time.sleep(WINDOW * 1.5)

    assert run_now(confirmation) == Attempt.Outcome.AMBIGUOUS
    confirmation.refresh_from_db()
    assert confirmation.status == Operation.Status.NEEDS_REVIEW
    case = ReviewCase.objects.get(operation=confirmation)
    assert case.kind == ReviewCase.Kind.INTERRUPTED_SEND
    assert "past its window" in case.summary
    counted = stats(resend)
    assert counted["messages_by_message_id"] == {confirmation.key: 1}
    assert counted["calls"]["send_email"] == 1  # never asked again


def test_a_key_resend_refuses_stops_the_worker_before_any_send(resend: httpx.Client) -> None:
    configure(resend, api_key="re_the_accounts_real_key")
    _, confirmation = confirmation_of("rs-refused")
    assert operation_execute(operation_id=confirmation.pk) == Attempt.Outcome.RETRYABLE
    message = confirmation.attempts.get().error_message
    assert "idempotency_keys" in message and "invalid_api_key" in message
    assert "re_emulator_key" not in message
    counted = stats(resend)
    assert (counted["messages"], counted["calls"]["send_email"]) == (0, 0)
