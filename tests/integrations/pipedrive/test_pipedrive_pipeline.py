"""The pipeline against the Pipedrive emulator: an unclear create is never repeated.

Real parts: PostgreSQL, the engine's own attempts (`operation_execute`, as a
worker runs them), the Pipedrive emulator over loopback for the CRM and the
sandbox's SMTP sink for the confirmation. The default "crm" destination is
switched to Pipedrive by ONEFOLD_CRM, configured from PIPEDRIVE_* variables
as in production.

Nothing in Pipedrive recognises a repeat and its search lags writes, so after a
lost answer the engine waits the settle delay, looks up, adopts what it finds,
and otherwise opens a case saying why it cannot tell. No second lead, ever.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Attempt, Event, Operation, ReviewCase
from idempotency_core.reconciliation.compare import reconcile, run_summary
from lab.emulators.pipedrive import (
    DEFAULT_API_TOKEN,
    REFERENCE_FIELD_KEY,
    PipedriveEmulator,
)
from tests.factories import completed, ingest, op, submission
from tests.support.processes import wait_for
from tests.support.vendors import (
    all_settled,
    configure,
    deliver_at_once,
    emulator_as_default,
    fault,
    stats,
)

SETTLE = 0.6  # PIPEDRIVE_SETTLE_SECONDS in these tests

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def emulator() -> Iterator[PipedriveEmulator]:
    with PipedriveEmulator() as server:
        yield server


@pytest.fixture
def pipedrive(
    emulator: PipedriveEmulator, sandbox: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[httpx.Client]:
    """The emulator, reset, as the default CRM; mail still goes to the sandbox's sink."""
    with emulator_as_default(
        emulator,
        setting="ONEFOLD_CRM",
        kind="pipedrive",
        settings=settings,
        monkeypatch=monkeypatch,
        PIPEDRIVE_SETTLE_SECONDS=str(SETTLE),
    ) as control:
        yield control


def execute_when_due(operation: Operation, *, timeout: float = 20) -> str:
    """Runs the operation's next attempt as soon as the engine lets it be claimed."""
    outcome = wait_for(
        lambda: operation_execute(operation_id=operation.pk),
        timeout=timeout,
        interval=0.05,
        what=f"{operation.step} to be due",
    )
    return str(outcome)


def unclear_create(control: httpx.Client, mode: str) -> tuple[Operation, float]:
    """An enquiry whose create ends unclear (`mode`); returns it and when that was."""
    fault(control, "create_record", mode)
    event = ingest(f"pd-{uuid.uuid4().hex[:8]}", contact_from_key=True)
    enquiry = op(event, "create_enquiry")
    assert operation_execute(operation_id=enquiry.pk) == Attempt.Outcome.AMBIGUOUS
    return enquiry, time.monotonic()


def test_a_lost_create_answer_is_adopted_after_the_settle_delay(
    pipedrive: httpx.Client, sandbox: Any
) -> None:
    configure(pipedrive, search_lag_seconds=SETTLE / 3)
    enquiry, unclear_at = unclear_create(pipedrive, "drop_response_after_commit")
    assert operation_execute(operation_id=enquiry.pk) is None  # not before the settle delay

    assert execute_when_due(enquiry) == Attempt.Outcome.SUCCEEDED
    assert time.monotonic() - unclear_at >= SETTLE
    enquiry.refresh_from_db()
    assert enquiry.status == Operation.Status.SUCCEEDED
    for step in ("assign_task", "send_confirmation"):
        assert execute_when_due(op(enquiry.event, step)) == Attempt.Outcome.SUCCEEDED

    counted = stats(pipedrive)
    assert counted["records_by_external_ref"] == {enquiry.key: 1}
    assert counted["calls"]["create_record"] == 1  # found, never sent again
    assert (counted["records"], counted["tasks"]) == (1, 1)
    leads = pipedrive.get("/v1/leads", headers={"x-api-token": DEFAULT_API_TOKEN}).json()["data"]
    assert [lead["id"] for lead in leads] == [enquiry.destination_ref]
    assert len(sandbox.messages()) == 1
    assert not ReviewCase.objects.exists()


@pytest.mark.parametrize(
    "mode", ["drop_response_after_commit", "fail_before_commit"], ids=["lost-answer", "500"]
)
def test_an_unclear_create_that_search_cannot_show_is_a_case_not_a_repeat(
    pipedrive: httpx.Client, sandbox: Any, mode: str
) -> None:
    """The search lags longer than the settle delay (or the lead never came to be):
    the lookup finds nothing, which proves nothing, so a person decides."""
    configure(pipedrive, search_lag_seconds=SETTLE * 10)
    enquiry, _ = unclear_create(pipedrive, mode)

    assert execute_when_due(enquiry) == Attempt.Outcome.AMBIGUOUS
    enquiry.refresh_from_db()
    assert enquiry.status == Operation.Status.NEEDS_REVIEW
    case = ReviewCase.objects.get(operation=enquiry)
    assert "Onefold cannot tell" in case.summary
    assert "search that lags its writes" in case.summary

    counted = stats(pipedrive)
    assert counted["calls"]["create_record"] == 1  # the create was never repeated
    expected = {enquiry.key: 1} if mode == "drop_response_after_commit" else {}
    assert counted["records_by_external_ref"] == expected
    # The later steps wait behind the case: no task, no email.
    assert counted["tasks"] == 0
    assert operation_execute(operation_id=op(enquiry.event, "assign_task").pk) is None
    assert sandbox.messages() == []


def test_a_refused_reference_field_stops_the_worker_before_any_call(
    pipedrive: httpx.Client, sandbox: Any
) -> None:
    configure(pipedrive, lead_fields=[])
    event = ingest(f"pd-{uuid.uuid4().hex[:8]}", contact_from_key=True)
    enquiry = op(event, "create_enquiry")
    assert operation_execute(operation_id=enquiry.pk) == Attempt.Outcome.WAITED
    attempt = enquiry.attempts.get()
    assert "is not a lead field" in attempt.error_message
    counted = stats(pipedrive)
    assert counted["calls"]["create_record"] == 0 and counted["calls"]["create_person"] == 0


def test_check_destinations_verifies_and_refuses_the_reference_field(
    pipedrive: httpx.Client,
) -> None:
    out = io.StringIO()
    call_command("check_destinations", "crm", stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert lines[0].startswith("crm\tlookup\tverified\tGET /v1/leadFields:")
    assert lines[1].startswith("crm\tmessage_field\tverified\tGET /v1/leadFields:")
    assert DEFAULT_API_TOKEN not in out.getvalue()

    field = {"key": REFERENCE_FIELD_KEY, "name": "Onefold reference", "field_type": "enum"}
    configure(pipedrive, lead_fields=[field])
    out = io.StringIO()
    with pytest.raises(CommandError, match="refused: crm") as refused:
        call_command("check_destinations", "crm", stdout=out)
    assert refused.value.returncode == 1
    assert "crm\tlookup\trefused\t" in out.getvalue()
    assert "type enum, which search cannot find" in out.getvalue()


def test_reconciliation_lists_pipedrive_leads_and_finds_one_deleted(
    pipedrive: httpx.Client, sandbox: Any
) -> None:
    configure(pipedrive, search_lag_seconds=0)
    events = [completed(f"pd-recon-{n}", contact_from_key=True) for n in range(3)]
    period = {
        "since": timezone.now() - timedelta(days=1),
        "until": timezone.now() + timedelta(minutes=1),
    }
    clean = run_summary(reconcile(**period))
    assert (clean["events"], clean["destination_records"]) == (3, 3)
    assert sum(clean["findings"].values()) == 0
    deleted = op(events[0], "create_enquiry")
    response = pipedrive.delete(
        f"/v1/leads/{deleted.destination_ref}", headers={"x-api-token": DEFAULT_API_TOKEN}
    )
    assert response.status_code == 200
    found = run_summary(reconcile(**period))
    assert found["destination_records"] == 2
    assert found["findings"]["removed"] == 1 and sum(found["findings"].values()) == 1
    assert ReviewCase.objects.get(kind="recon_removed").operation_id == deleted.pk


# -- through gunicorn and a real cluster ----------------------------------------------

ROUNDS = 20
DELIVERIES = 50
CUSTOMERS = 10  # rounds share customers: a returning customer's person is found by email


@pytest.mark.slow
@pytest.mark.serial  # 50 x 20 deliveries through gunicorn: both cores
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_identical_concurrent_deliveries_through_a_cluster_make_one_lead_and_task_each(
    emulator: PipedriveEmulator, sandbox: Any, web_server: Any, qcluster_factory: Any
) -> None:
    """Each round, one submission delivered 50 times at once through gunicorn; lost
    lead and activity answers and a 429; a real django-q2 cluster and a sweeper
    recover. The search settles within the delay, so every lost answer is adopted:
    one lead, one activity and one email per submission, and a create sent again
    only after the 429."""
    with httpx.Client(base_url=emulator.http_url, timeout=30) as control:
        assert control.post("/_sandbox/reset").status_code == 200
        configure(control, search_lag_seconds=SETTLE / 3)
        fault(control, "create_record", "drop_response_after_commit", times=4)
        fault(control, "create_record", "http_429")
        fault(control, "create_task", "drop_response_after_commit", times=3)
        env = {
            "ONEFOLD_CRM": "pipedrive",
            **emulator.adapter_env(),
            "PIPEDRIVE_SETTLE_SECONDS": str(SETTLE),
        }
        qcluster_factory("qcluster", **env)
        qcluster_factory.sweeper("sweeper", **env)
        _, _, key = source_create_with_key(name="website")
        with ThreadPoolExecutor(max_workers=DELIVERIES) as pool:
            for n in range(ROUNDS):
                person = n % CUSTOMERS
                body = submission(
                    contact={"name": f"Person {person}", "email": f"person{person}@example.com"},
                    message=f"Enquiry {n}",
                )
                event_key = f"pd-e2e-{n}-{uuid.uuid4().hex[:6]}"
                codes = deliver_at_once(
                    pool, web_server.url, key, event_key, body, deliveries=DELIVERIES
                )
                # One delivery of each round created the event; the others were replays.
                assert sorted(codes) == [200] * (DELIVERIES - 1) + [202], (n, codes)
        wait_for(
            lambda: all_settled(ROUNDS * 3),
            timeout=240,
            interval=0.5,
            what="every operation to settle",
        )
        counted = stats(control)

    assert set(Operation.objects.values_list("status", flat=True)) == {"succeeded"}
    assert Event.objects.count() == ROUNDS
    keys = sorted(Operation.objects.filter(step="create_enquiry").values_list("key", flat=True))
    assert counted["records_by_external_ref"] == dict.fromkeys(keys, 1)
    task_keys = sorted(Operation.objects.filter(step="assign_task").values_list("key", flat=True))
    assert counted["tasks_by_external_ref"] == dict.fromkeys(task_keys, 1)
    # Nothing else either: no lead or activity without Onefold's reference.
    assert (counted["records"], counted["tasks"]) == (ROUNDS, ROUNDS)
    # A lost answer is found by search after the delay, never sent again; a 429 is.
    assert counted["calls"]["create_record"] == ROUNDS + 1
    assert counted["calls"]["create_task"] == ROUNDS
    assert len(sandbox.messages()) == ROUNDS
    assert not ReviewCase.objects.exists()
