"""The confirmation email through the Resend emulator: exactly once inside the key's window.

Real parts: PostgreSQL, the engine's own attempts (`operation_execute`, as a
worker runs them) and, at the end, a real cluster behind gunicorn; the sandbox
over loopback for the CRM and the Resend emulator for email, with Resend's
rate limit on. The default "email" destination is switched to Resend by
ONEFOLD_EMAIL and configured from RESEND_* variables, as in production.

What is counted is what the emulator sent: its messages, by idempotency key.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Attempt, Event, Operation, ReviewCase
from lab.emulators.resend import DEFAULT_API_KEY, DEFAULT_DOMAIN, ResendEmulator
from tests.factories import configured, ingest, op, submission
from tests.support.processes import wait_for
from tests.support.vendors import all_settled, configure, emulator_as_default, stats

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


def fault(control: httpx.Client, mode: str, **options: Any) -> None:
    body = {"action": "send_email", "mode": mode, **options}
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


def test_a_retry_after_a_template_change_is_a_repeat_resend_accepts_never_a_409(
    resend: httpx.Client,
) -> None:
    """The first send's answer is lost after Resend sent it; the template changes; the
    retry sends the stored content under the same key, so Resend recognises the repeat
    (same key, same body) and answers with the first email. Rendered anew, the body
    would differ and Resend would refuse it: 409 invalid_idempotent_request
    (test_resend.py shows the emulator does)."""
    configure(resend, rate_limit=None)  # two attempts back to back, as above
    forms = {"*": {"confirmation": {"subject": "First {{ contact.name }}", "html": "<p>1</p>"}}}
    configured(forms)
    _, confirmation = confirmation_of("rs-template")
    fault(resend, "http_500_after_commit")
    assert operation_execute(operation_id=confirmation.pk) == Attempt.Outcome.AMBIGUOUS
    configured({"*": {"confirmation": {"subject": "Second", "html": "<p>2</p>"}}})

    assert run_now(confirmation) == Attempt.Outcome.SUCCEEDED
    (sent,) = resend.get("/_sandbox/messages").json()["results"]
    assert (sent["subject"], sent["html"]) == ("First Kim", "<p>1</p>")
    counted = stats(resend)
    assert counted["messages_by_message_id"] == {confirmation.key: 1}
    assert counted["calls"]["send_email"] == 2
    assert [a.http_status for a in confirmation.attempts.order_by("number")] == [500, 200]
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
    assert operation_execute(operation_id=confirmation.pk) == Attempt.Outcome.WAITED
    message = confirmation.attempts.get().error_message
    assert "idempotency_keys" in message and "invalid_api_key" in message
    assert DEFAULT_API_KEY not in message
    counted = stats(resend)
    assert (counted["messages"], counted["calls"]["send_email"]) == (0, 0)


def test_a_sender_domain_that_is_not_verified_stops_the_worker_before_any_send(
    resend: httpx.Client,
) -> None:
    configure(resend, domains=[{"name": DEFAULT_DOMAIN, "status": "pending"}])
    _, confirmation = confirmation_of("rs-pending")
    assert operation_execute(operation_id=confirmation.pk) == Attempt.Outcome.WAITED
    message = confirmation.attempts.get().error_message
    assert f"sender_domain: GET /domains: sender domain {DEFAULT_DOMAIN} is pending" in message
    counted = stats(resend)
    assert (counted["messages"], counted["calls"]["send_email"]) == (0, 0)
    assert not ReviewCase.objects.exists()


def test_check_destinations_refuses_a_sender_domain_that_is_not_verified(
    resend: httpx.Client,
) -> None:
    out = io.StringIO()
    call_command("check_destinations", "email", stdout=out, stderr=out)
    assert (
        f"email\tsender_domain\tverified\tGET /domains: sender domain {DEFAULT_DOMAIN} is verified"
        in (out.getvalue())
    )
    configure(resend, domains=[{"name": DEFAULT_DOMAIN, "status": "pending"}])
    time.sleep(1.05)  # Resend's 2 requests a second: check_destinations is not paced
    out = io.StringIO()
    with pytest.raises(CommandError, match="refused: email") as refused:
        call_command("check_destinations", "email", stdout=out, stderr=out)
    assert refused.value.returncode == 1
    assert (
        f"email\tsender_domain\trefused\tGET /domains: sender domain {DEFAULT_DOMAIN} is "
        "pending, not verified: Resend refuses every send from it (403 validation_error)"
    ) in out.getvalue()
    assert "email\tidempotency_keys\tverified\t" in out.getvalue()
    assert DEFAULT_API_KEY not in out.getvalue()


# -- a real cluster at Resend's rate -------------------------------------------------------

SUBMISSIONS = 30
LOST = 20  # answers lost after Resend sent the email
IN_FLIGHT = 10  # sends still in progress when the client gives up, so the retry meets them
# A slow send outlasts the suite's client timeout (ONEFOLD_HTTP_TIMEOUT_SECONDS, 1.5 s,
# config/test_settings.py) by far. The shared budget sends the first attempts at 2 a second
# (15 s for 30), and the retries come after them, each preceded by a fresh read of the
# domain (the capability recovery relies on): the slow sends' retries are the first
# (their attempts timed out first), so a send still in progress meets its retry well
# within 30 s, however busy the machine; the test asks that one does. Each 409 it meets
# is a wait, not an attempt spent, and the scenario ends soon after the slow sends do.
SLOW_SEND = 30.0


@pytest.mark.slow
@pytest.mark.paced  # a cluster, a sweeper and gunicorn, at Resend's 2 requests a second
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_at_two_requests_a_second_lost_answers_and_in_flight_retries_send_one_email_each(
    sandbox: Any, web_server: Any, qcluster_factory: Any
) -> None:
    """Resend at its documented 2 requests a second, 20 answers
    lost after the send and 10 sends that outlast the client's timeout, retried while
    Resend may still be sending them (the first retries meet 409
    concurrent_idempotent_requests), through a real django-q2 cluster and a sweeper.
    One email per submission, every operation succeeded, and no retries_exhausted
    case: a 429 waits for the shared budget and never spends one of the operation's
    attempts (the suite's ONEFOLD_MAX_ATTEMPTS, 4, is not raised)."""
    with (
        ResendEmulator() as resend,
        httpx.Client(base_url=resend.http_url, timeout=30) as mail,
    ):
        # The slow sends come first: they need a worker each while the others queue.
        fault(mail, "slow", seconds=SLOW_SEND, times=IN_FLIGHT)
        fault(mail, "drop_response_after_commit", times=LOST)
        env = {**resend.adapter_env(), "ONEFOLD_EMAIL": "resend"}
        qcluster_factory("qcluster", **env)
        qcluster_factory.sweeper("sweeper", **env)
        _, _, api_key = source_create_with_key(name="website")
        with httpx.Client(timeout=60) as client:
            for n in range(SUBMISSIONS):
                answer = client.post(
                    f"{web_server.url}/api/v1/submissions/",
                    json=submission(
                        contact={"name": f"Person {n}", "email": f"person{n}@example.com"}
                    ),
                    headers={
                        "Authorization": f"Api-Key {api_key}",
                        "Idempotency-Key": f"rs-rate-{n}-{uuid.uuid4().hex[:6]}",
                    },
                )
                assert answer.status_code == 202, answer.text
        wait_for(
            lambda: all_settled(SUBMISSIONS * 3),
            timeout=300,
            interval=0.5,
            what="every operation to settle",
        )
        sent = stats(mail)
        faults_left = mail.get("/_sandbox/faults").json()["results"]

    keys = Operation.objects.filter(step="send_confirmation").values_list("key", flat=True)
    assert sent["messages_by_message_id"] == dict.fromkeys(sorted(keys), 1)
    assert sent["messages"] == SUBMISSIONS
    assert list(ReviewCase.objects.values_list("kind", "summary")) == []
    assert set(Operation.objects.values_list("status", flat=True)) == {"succeeded"}
    assert set(sent["messages_by_recipient"].values()) == {1}
    # Every fault met a send, and every unclear send was asked again under its key.
    assert faults_left == []
    assert sent["calls"]["send_email"] >= SUBMISSIONS + LOST + IN_FLIGHT
    in_flight = Attempt.objects.filter(error_message__contains="concurrent_idempotent_requests")
    assert in_flight.exists()  # a retry did meet a send still in progress
    assert sandbox.messages() == []  # nothing went through SMTP
