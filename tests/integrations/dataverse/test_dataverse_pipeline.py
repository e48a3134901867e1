"""The pipeline against the Dataverse emulator: lost creates end adopted, read by GUID.

Real parts: PostgreSQL, the engine's own attempts (`operation_execute`, as a
worker runs them), the Dataverse emulator over loopback (its token endpoint
too) for the CRM, and the sandbox's SMTP sink for the confirmation. The
default "crm" destination is switched to Dataverse by ONEFOLD_CRM and
configured from DATAVERSE_* variables, as in production.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Attempt, Event, Operation, ReviewCase
from integrations.dataverse.adapter import record_guid
from lab.emulators.dataverse import DataverseEmulator
from lab.emulators.resend import ResendEmulator
from tests.factories import ingest, op, submission
from tests.support.processes import wait_for
from tests.support.vendors import (
    all_settled,
    configure,
    deliver_at_once,
    emulator_as_default,
    fault,
    stats,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def emulator() -> Iterator[DataverseEmulator]:
    with DataverseEmulator() as server:
        yield server


@pytest.fixture
def dataverse(
    emulator: DataverseEmulator, sandbox: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[httpx.Client]:
    """The emulator, reset, as the default CRM; mail still goes to the sandbox's sink."""
    with emulator_as_default(
        emulator,
        setting="ONEFOLD_CRM",
        kind="dataverse",
        settings=settings,
        monkeypatch=monkeypatch,
    ) as control:
        yield control


def run_now(operation: Operation) -> str | None:
    """Executes the operation's next attempt now, whatever its scheduled time."""
    Operation.objects.filter(pk=operation.pk).update(next_attempt_at=timezone.now())
    return operation_execute(operation_id=operation.pk)


def enquiry_of(prefix: str) -> tuple[Event, Operation]:
    event = ingest(f"{prefix}-{uuid.uuid4().hex[:8]}", contact_from_key=True)
    return event, op(event, "create_enquiry")


@pytest.mark.parametrize(
    "mode", ["drop_response_after_commit", "http_500_after_commit"], ids=["lost", "500"]
)
def test_lost_create_answers_end_adopted_by_their_guid_with_one_lead_and_one_task(
    dataverse: httpx.Client, sandbox: Any, mode: str
) -> None:
    event, enquiry = enquiry_of("dv-lost")
    fault(dataverse, "create_record", mode)
    assert operation_execute(operation_id=enquiry.pk) == Attempt.Outcome.AMBIGUOUS
    assert run_now(enquiry) == Attempt.Outcome.SUCCEEDED

    task = op(event, "assign_task")
    fault(dataverse, "create_task", mode)
    assert operation_execute(operation_id=task.pk) == Attempt.Outcome.AMBIGUOUS
    assert run_now(task) == Attempt.Outcome.SUCCEEDED
    assert operation_execute(operation_id=op(event, "send_confirmation").pk) == "succeeded"

    enquiry.refresh_from_db()
    task.refresh_from_db()
    assert enquiry.destination_ref == record_guid("lead", enquiry.key)
    assert task.destination_ref == record_guid("task", task.key)
    # Recovery read each by its GUID first and adopted what the lost attempt made,
    # without a second create (the 412 of a create sent again is tested in test_dataverse).
    for operation in (enquiry, task):
        attempts = list(operation.attempts.order_by("number"))
        assert [a.adopted for a in attempts] == [False, True]
        assert attempts[1].http_status is None
    counted = stats(dataverse)
    assert counted["records_by_external_ref"] == {enquiry.key: 1}
    assert counted["tasks_by_external_ref"] == {task.key: 1}
    assert (counted["records"], counted["tasks"]) == (1, 1)
    assert (counted["calls"]["create_record"], counted["calls"]["create_task"]) == (1, 1)
    assert len(sandbox.messages()) == 1
    assert not ReviewCase.objects.exists()


def test_a_pending_alternate_key_is_refused_before_any_call(dataverse: httpx.Client) -> None:
    configure(dataverse, alternate_key_status="Pending")
    _, enquiry = enquiry_of("dv-pending")
    assert operation_execute(operation_id=enquiry.pk) == Attempt.Outcome.WAITED
    message = enquiry.attempts.get().error_message
    assert "unique_external_ref" in message
    assert "key onefold_ref_key on [onefold_ref]: Pending" in message
    assert "emulator-secret" not in message
    counted = stats(dataverse)
    assert (counted["records"], counted["calls"]["create_record"]) == (0, 0)


def test_check_destinations_refuses_dataverse_until_the_key_is_active(
    dataverse: httpx.Client,
) -> None:
    out = io.StringIO()
    call_command("check_destinations", "crm", stdout=out, stderr=out)
    assert (
        "crm\tunique_external_ref\tverified\tGET /EntityDefinitions(LogicalName='lead')/Keys"
        in (out.getvalue())
    )
    for status in ("Pending", "Failed"):
        configure(dataverse, alternate_key_status=status)
        out = io.StringIO()
        with pytest.raises(CommandError) as refused:
            call_command("check_destinations", "crm", stdout=out, stderr=out)
        assert refused.value.returncode == 1 and "crm" in str(refused.value)
        assert "crm\tunique_external_ref\trefused\t" in out.getvalue()
        assert f"[onefold_ref]: {status}" in out.getvalue()


# -- through gunicorn and a real cluster, with Resend for email -------------------------

ROUNDS = 20
DELIVERIES = 50


@pytest.mark.slow
@pytest.mark.serial  # 50 x 20 deliveries through gunicorn: both cores
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_identical_concurrent_deliveries_through_a_cluster_make_one_of_each(
    emulator: DataverseEmulator, sandbox: Any, web_server: Any, qcluster_factory: Any
) -> None:
    """Each round, one submission delivered 50 times at once through gunicorn; lost
    answers, 500s after commit and 429s on lead, task and email, and every token
    revoked mid-run; a real django-q2 cluster and a sweeper recover. Each unclear
    create is read by its GUID before anything is sent again, and Resend answers every
    repeated key with its first answer: one lead, one task and one email per
    submission, no case."""
    with (
        ResendEmulator() as resend,
        httpx.Client(base_url=emulator.http_url, timeout=30) as control,
        httpx.Client(base_url=resend.http_url, timeout=30) as mail,
    ):
        assert control.post("/_sandbox/reset").status_code == 200
        # At most three failed attempts for any one operation (four are allowed).
        for mode in ("drop_response_after_commit", "http_500_after_commit"):
            fault(control, "create_record", mode)
            fault(control, "create_task", mode)
            fault(mail, "send_email", mode)
        fault(control, "create_record", "http_429")
        env = {
            **emulator.adapter_env(),
            **resend.adapter_env(),
            "ONEFOLD_CRM": "dataverse",
            "ONEFOLD_EMAIL": "resend",
        }
        qcluster_factory("qcluster", **env)
        qcluster_factory.sweeper("sweeper", **env)
        deliver_rounds(web_server.url, control)
        wait_for(
            lambda: all_settled(ROUNDS * 3),
            timeout=240,
            interval=0.5,
            what="every operation to settle",
        )
        counted, sent = stats(control), stats(mail)

    assert list(ReviewCase.objects.values_list("summary", flat=True)) == []
    assert set(Operation.objects.values_list("status", flat=True)) == {"succeeded"}
    assert Event.objects.count() == ROUNDS
    for step, counts in (
        ("create_enquiry", counted["records_by_external_ref"]),
        ("assign_task", counted["tasks_by_external_ref"]),
        ("send_confirmation", sent["messages_by_message_id"]),
    ):
        keys = sorted(Operation.objects.filter(step=step).values_list("key", flat=True))
        assert counts == dict.fromkeys(keys, 1), step
    # Nothing else either: no lead, task or email without Onefold's reference.
    assert (counted["records"], counted["tasks"], sent["messages"]) == (ROUNDS, ROUNDS, ROUNDS)
    # Every unclear create was read by its GUID first and adopted, not sent again; the
    # 429 was sent again.
    assert counted["calls"]["create_record"] == ROUNDS + 1
    assert counted["calls"]["create_task"] == ROUNDS
    # Each unclear send was sent again under its key (one email each, above); a send
    # Resend's 2-a-second limit refused (429, nothing sent) was sent again too.
    assert sent["calls"]["send_email"] >= ROUNDS + 2
    # Revoked tokens were refused (401) and replaced: a process shares one token.
    assert counted["calls"]["unauthorized"] >= 1 and counted["calls"]["token"] >= 2
    assert sandbox.messages() == []


def deliver_rounds(web_url: str, control: httpx.Client) -> None:
    """ROUNDS submissions, each POSTed DELIVERIES times at once, each answered 202 once
    and 200 (a replay) to every other delivery; tokens revoked halfway."""
    _, _, api_key = source_create_with_key(name="website")
    with ThreadPoolExecutor(max_workers=DELIVERIES) as pool:
        for n in range(ROUNDS):
            body = submission(
                contact={"name": f"Person {n}", "email": f"person{n}@example.com"},
                message=f"Enquiry {n}",
            )
            event_key = f"dv-e2e-{n}-{uuid.uuid4().hex[:6]}"
            codes = deliver_at_once(pool, web_url, api_key, event_key, body, deliveries=DELIVERIES)
            assert sorted(codes) == [200] * (DELIVERIES - 1) + [202], (n, codes)
            if n == ROUNDS // 2:
                configure(control, revoke_tokens=True)
