"""The pipeline against the HubSpot emulator: the engine's steps, recovery and refusal.

The default CRM destination is switched to HubSpot (ONEFOLD_CRM=hubspot, the
emulator's URL and a token in HUBSPOT_*); email goes to the sandbox's SMTP
sink. Each scenario ends by counting what HubSpot holds.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from idempotency_core.execution.destinations import verification_forget
from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import Event, Operation, ReviewCase
from idempotency_core.reconciliation.compare import reconcile, run_summary
from integrations.hubspot.adapter import seconds_to_midnight
from integrations.hubspot.emulator import HubSpotEmulator
from tests.factories import completed, ingest, op

TOKEN = "pat-na1-pipeline-secret"
STEPS = ("create_enquiry", "assign_task", "send_confirmation")


@pytest.fixture
def hubspot(sandbox, settings, monkeypatch) -> Iterator[HubSpotEmulator]:
    """The emulator, with the default CRM pointed at it (email stays on the sandbox)."""
    with HubSpotEmulator() as emulator:
        emulator.hubspot.set_config({"token": TOKEN})
        settings.ONEFOLD_CRM = "hubspot"
        monkeypatch.setenv("HUBSPOT_TOKEN", TOKEN)
        monkeypatch.setenv("HUBSPOT_BASE_URL", emulator.http_url)
        verification_forget()
        yield emulator
        verification_forget()


def stats(emulator: HubSpotEmulator) -> dict[str, Any]:
    return emulator.hubspot.stats()


def run_now(operation: Operation) -> str | None:
    """Executes the operation's next attempt now, whatever its scheduled time."""
    Operation.objects.filter(pk=operation.pk).update(next_attempt_at=timezone.now())
    return operation_execute(operation_id=operation.pk)


def run_steps(event: Event) -> list[str | None]:
    return [operation_execute(operation_id=op(event, step).pk) for step in STEPS]


@pytest.mark.django_db
def test_lost_create_answers_under_a_lagging_search_give_one_of_each(hubspot, sandbox):
    """Issue 11's must-show: search 5 s behind, the deal's create answer lost, then a
    retry: one contact, one deal; the same email again: same contact, a second deal."""
    hubspot.hubspot.set_config({"search_lag_seconds": 5})
    hubspot.hubspot.add_fault(action="create_record", mode="drop_response_after_commit")
    event = ingest("hs-1")
    enquiry = op(event, "create_enquiry")
    assert operation_execute(operation_id=enquiry.pk) == "ambiguous"
    enquiry.refresh_from_db()
    assert (enquiry.status, enquiry.recovery) == ("retry_scheduled", "repeat_unique_ref")
    assert run_now(enquiry) == "succeeded"
    adopted = enquiry.attempts.order_by("-number").first()
    assert adopted.adopted and adopted.http_status == 409
    assert run_steps(event)[1:] == ["succeeded", "succeeded"]
    counts = stats(hubspot)
    assert (counts["contacts"], counts["records"], counts["tasks"]) == (1, 1, 1)
    assert counts["calls"]["create_record"] == 2
    assert counts["records_by_external_ref"] == {op(event, "create_enquiry").key: 1}

    second = ingest("hs-2", message="And the bathroom, please.")
    assert run_steps(second) == ["succeeded"] * 3
    counts = stats(hubspot)
    assert (counts["contacts"], counts["records"], counts["tasks"]) == (1, 2, 2)
    assert counts["contacts_by_email"] == {"ada@example.com": 1}
    assert (
        op(second, "create_enquiry").destination_ref != op(event, "create_enquiry").destination_ref
    )
    assert sandbox.stats()["messages_by_recipient"] == {"ada@example.com": 2}


@pytest.mark.django_db
def test_a_lost_task_answer_is_retried_into_one_task(hubspot, sandbox):
    event = ingest("hs-task")
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "succeeded"
    hubspot.hubspot.add_fault(action="create_task", mode="drop_response_after_commit")
    task = op(event, "assign_task")
    assert operation_execute(operation_id=task.pk) == "ambiguous"
    assert run_now(task) == "succeeded"
    assert task.attempts.order_by("-number").first().adopted
    assert operation_execute(operation_id=op(event, "send_confirmation").pk) == "succeeded"
    counts = stats(hubspot)
    assert (counts["records"], counts["tasks"]) == (1, 1)
    assert counts["tasks_by_external_ref"] == {task.key: 1}
    assert sandbox.stats()["messages"] == 1


@pytest.mark.django_db
def test_a_daily_limit_is_retried_after_the_accounts_midnight(hubspot, settings):
    settings.ONEFOLD_RETRY_MAX_SECONDS = 10 * 86400  # let the destination's delay show whole
    hubspot.hubspot.set_config({"rate_limit_policy": "DAILY"})
    hubspot.hubspot.add_fault(action="create_record", mode="http_429")
    event = ingest("hs-daily")
    enquiry = op(event, "create_enquiry")
    assert operation_execute(operation_id=enquiry.pk) == "retryable"
    enquiry.refresh_from_db()
    wait = (enquiry.next_attempt_at - timezone.now()).total_seconds()
    midnight = seconds_to_midnight("UTC")
    assert midnight - 5 <= wait <= midnight + settings.ONEFOLD_RETRY_BASE_SECONDS + 5
    assert enquiry.status == "retry_scheduled"
    assert stats(hubspot)["records"] == 0


@pytest.mark.django_db
def test_a_reference_without_unique_values_is_refused_and_never_called(hubspot):
    hubspot.hubspot.set_config({"reference_unique": False})
    event = ingest("hs-refused")
    enquiry = op(event, "create_enquiry")
    assert operation_execute(operation_id=enquiry.pk) == "retryable"
    attempt = enquiry.attempts.get()
    assert "refused, not called" in attempt.error_message
    assert "hasUniqueValue=false" in attempt.error_message
    counts = stats(hubspot)
    assert (counts["contacts"], counts["records"], counts["calls"]["create_contact"]) == (0, 0, 0)
    assert not ReviewCase.objects.filter(operation=enquiry).exists()


@pytest.mark.django_db
def test_check_destinations_refuses_a_reference_hubspot_does_not_keep_unique(hubspot):
    out = io.StringIO()
    call_command("check_destinations", "crm", stdout=out, stderr=out)
    assert "crm\tunique_external_ref\tverified\tGET /crm/v3/properties/deals/onefold_ref" in (
        out.getvalue()
    )
    hubspot.hubspot.set_config({"reference_missing_on": ["tasks"]})
    out = io.StringIO()
    with pytest.raises(CommandError, match="refused: crm") as refused:
        call_command("check_destinations", "crm", stdout=out, stderr=out)
    assert refused.value.returncode == 1
    assert "crm\tunique_external_ref\trefused\t" in out.getvalue()
    assert "tasks/onefold_ref: 404, the property does not exist on tasks" in out.getvalue()
    assert TOKEN not in out.getvalue()


@pytest.mark.django_db
def test_reconciliation_lists_hubspot_deals_and_finds_one_archived(hubspot):
    events = [completed(f"hs-recon-{n}", contact_from_key=True) for n in range(3)]
    period = {
        "since": timezone.now() - timedelta(days=1),
        "until": timezone.now() + timedelta(minutes=1),
    }
    clean = run_summary(reconcile(**period))
    assert (clean["events"], clean["destination_records"]) == (3, 3)
    assert sum(clean["findings"].values()) == 0
    archived = op(events[0], "create_enquiry")
    hubspot.hubspot.archive("deals", archived.destination_ref)
    found = run_summary(reconcile(**period))
    assert found["destination_records"] == 2
    assert found["findings"]["removed"] == 1 and sum(found["findings"].values()) == 1
    case = ReviewCase.objects.get(kind="recon_removed")
    assert case.operation_id == archived.pk
