"""`person erase --crm` against the HubSpot and Pipedrive emulators: the person is gone
there, deleted once, even when the deletion's answer is lost and the attempt repeated.

Real parts: PostgreSQL, the engine's attempts (the command runs them as a worker does),
each emulator over loopback as the default CRM, the sandbox's SMTP sink for email."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from django.utils import timezone

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.subjects import operation_subject
from idempotency_core.execution.destinations import adapter_for, verification_forget
from idempotency_core.models import AuditEntry, Destination, Event, Operation, ReviewCase
from idempotency_core.privacy.erasure import person_erase
from lab.emulators.dataverse import DataverseEmulator
from lab.emulators.hubspot import HubSpotEmulator
from lab.emulators.pipedrive import PipedriveEmulator
from lab.emulators.salesforce import SalesforceEmulator
from tests.factories import ingest, run_pipeline
from tests.support.vendor_specs import hubspot_contract, recording
from tests.support.vendors import configure, emulator_as_default, fault, stats

pytestmark = pytest.mark.django_db

ADA = {"name": "Ada Quillfeather", "email": "ada.quill@example.org", "phone": "+44 20 7946 0123"}
BOB = {"name": "Bob Marchetti", "email": "bob.marchetti@example.net", "phone": "+1 415 555 0199"}


@pytest.fixture
def hubspot(sandbox: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with HubSpotEmulator() as emulator:
        settings.ONEFOLD_CRM = "hubspot"
        for variable, value in emulator.adapter_env().items():
            monkeypatch.setenv(variable, value)
        verification_forget()
        yield emulator
        verification_forget()


@pytest.fixture
def pipedrive(sandbox: Any, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with (
        PipedriveEmulator() as emulator,
        emulator_as_default(
            emulator,
            setting="ONEFOLD_CRM",
            kind="pipedrive",
            settings=settings,
            monkeypatch=monkeypatch,
        ) as control,
    ):
        configure(control, search_lag_seconds=0)
        yield control


def two_people() -> tuple[Event, Event]:
    ada = ingest("ada-1", contact=ADA, message="Ada's walnut kitchen at Orchard Lane")
    bob = ingest("bob-1", contact=BOB, message="Bob's garden shed estimate")
    run_pipeline(ada)
    run_pipeline(bob)
    return ada, bob


def erase_at_crm() -> str:
    out = io.StringIO()
    call_command(
        "person",
        "erase",
        "--email",
        ADA["email"],
        "--reason",
        "Asked by email",
        "--crm",
        stdout=out,
    )
    return out.getvalue()


def erasure_of(event: Event) -> Operation:
    erasure = event.operations.get(step="erase_person")
    assert erasure.status == "succeeded"
    outcomes = list(erasure.attempts.order_by("number").values_list("outcome", flat=True))
    assert outcomes == ["ambiguous", "succeeded"]  # the lost answer, then its repeat
    return erasure


def test_hubspot_deletes_the_contact_once_through_a_lost_answer(hubspot: Any) -> None:
    ada, _ = two_people()
    before = hubspot.hubspot.stats()
    assert (before["contacts"], before["records"], before["tasks"]) == (2, 2, 2)
    hubspot.hubspot.add_fault(action="delete_contact", mode="drop_response_after_commit")

    summary = erase_at_crm()

    assert "succeeded" in summary
    erasure = erasure_of(ada)
    assert (
        erasure.key.startswith("opk_")
        and erasure.key != ada.operations.get(step="create_enquiry").key
    )
    after = hubspot.hubspot.stats()
    assert after["contacts_by_email"] == {BOB["email"]: 1}
    assert (after["contacts"], after["records"], after["tasks"]) == (1, 1, 1)
    # One GDPR delete, applied once: the repeat read the deal, which names no contact now.
    assert (after["calls"]["gdpr_delete"], after["contacts_gdpr_deleted"]) == (1, 1)
    # A second request finds the same operation, done: nothing is called again.
    erase_at_crm()
    assert hubspot.hubspot.stats()["calls"]["gdpr_delete"] == 1
    assert Operation.objects.filter(step="erase_person").count() == 1


def test_hubspot_erasure_calls_as_hubspots_client_models_them(hubspot: Any) -> None:
    """The adapter's own calls (the engine puts its budget gate around them), recorded and
    judged by hubspot-api-client's models; the repeat reads the deal and finds it gone."""
    ada, _ = two_people()
    enquiry, task = (ada.operations.get(step=s) for s in ("create_enquiry", "assign_task"))
    adapter = adapter_for(Destination.objects.get(name="crm"))
    with recording() as traffic:
        first = adapter.erase_person(
            record_id=enquiry.destination_ref, task_ids=(task.destination_ref,)
        )
        again = adapter.erase_person(
            record_id=enquiry.destination_ref, task_ids=(task.destination_ref,)
        )
    hubspot_contract().assert_kept(traffic)
    assert (first.adopted, again.adopted) == (False, True)
    assert [f"{r.request.method} {r.status_code}" for r in traffic] == [
        "GET 200",
        "POST 204",
        "DELETE 204",
        "DELETE 204",
        "GET 404",
    ]


def test_pipedrive_deletes_the_person_once_through_a_lost_answer(pipedrive: httpx.Client) -> None:
    ada, _ = two_people()
    before = stats(pipedrive)
    assert (before["persons"], before["records"], before["tasks"]) == (2, 2, 2)
    fault(pipedrive, "delete_person", "drop_response_after_commit")

    summary = erase_at_crm()

    assert "succeeded" in summary
    erasure_of(ada)
    after = stats(pipedrive)
    assert (after["persons"], after["persons_deleted"]) == (1, 1)
    assert (after["records"], after["tasks"]) == (1, 1)
    # One delete call: the repeat read the lead's person first and found it deleted.
    assert after["calls"]["delete_person"] == 1
    search = pipedrive.get(
        "/api/v2/persons/search",
        params={"term": ADA["email"], "fields": "email", "exact_match": "true"},
        headers={"x-api-token": pipedrive_token(pipedrive)},
    )
    assert search.json()["data"]["items"] == []


def pipedrive_token(control: httpx.Client) -> str:
    return str(control.get("/_sandbox/config").json()["api_token"])


def test_the_sandbox_deletes_the_record_and_its_tasks_after_a_plain_erasure(sandbox: Any) -> None:
    """The data erased first, the CRM asked later: the earlier erasure's entry names the
    events, so `--crm` still finds the records though nothing else of the person is left."""
    ada, bob = two_people()
    assert sandbox.stats()["records"] == 2
    call_command(
        "person", "erase", "--email", ADA["email"], "--reason", "Asked", stdout=io.StringIO()
    )
    assert sandbox.stats()["records"] == 2

    assert "succeeded" in erase_at_crm()

    refs = [r["external_ref"] for r in sandbox.records()]
    assert refs == [bob.operations.get(step="create_enquiry").key]
    assert ada.operations.get(step="erase_person").attempts.count() == 1


@pytest.mark.parametrize("vendor", ["dataverse", "salesforce"])
def test_dataverse_and_salesforce_delete_the_record_and_its_tasks(
    vendor: str, sandbox: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator = {"dataverse": DataverseEmulator, "salesforce": SalesforceEmulator}[vendor]()
    with (
        emulator,
        emulator_as_default(
            emulator, setting="ONEFOLD_CRM", kind=vendor, settings=settings, monkeypatch=monkeypatch
        ) as control,
    ):
        ada, bob = two_people()
        assert (stats(control)["records"], stats(control)["tasks"]) == (2, 2)

        assert "succeeded" in erase_at_crm()

        after = stats(control)
        bob_keys = {
            step: bob.operations.get(step=step).key for step in ("create_enquiry", "assign_task")
        }
        assert after["records_by_external_ref"] == {bob_keys["create_enquiry"]: 1}
        assert after["tasks_by_external_ref"] == {bob_keys["assign_task"]: 1}
        assert ada.operations.get(step="erase_person").status == "succeeded"


def test_a_dry_run_with_crm_says_what_it_would_ask_and_calls_nothing(sandbox: Any) -> None:
    two_people()
    out = io.StringIO()
    call_command(
        "person",
        "erase",
        "--email",
        ADA["email"],
        "--reason",
        "Asked",
        "--crm",
        "--dry-run",
        stdout=out,
    )
    assert "would ask the CRM to delete the person (1 enquiries)" in out.getvalue()
    assert sandbox.stats()["records"] == 2
    assert not Operation.objects.filter(step="erase_person").exists()


def erase_quietly(*extra: str) -> str:
    out = io.StringIO()
    call_command(
        "person", "erase", "--email", ADA["email"], "--reason", "Asked again", *extra, stdout=out
    )
    return out.getvalue()


def test_a_later_request_leaves_the_crm_deletion_of_an_earlier_one_to_run(sandbox: Any) -> None:
    """The console queues the deletion for the workers; the request made again from the
    command line before a worker takes it runs that deletion, never cancelled."""
    _, bob = two_people()
    first = person_erase(address=ADA["email"], reason="Asked by email", system="console", crm=True)
    [erasure_id] = first.crm_operations
    assert Operation.objects.get(pk=erasure_id).status == "pending"

    assert f"CRM deletion (operation {erasure_id}): succeeded" in erase_quietly("--crm")

    assert Operation.objects.get(pk=erasure_id).status == "succeeded"
    refs = [r["external_ref"] for r in sandbox.records()]
    assert refs == [bob.operations.get(step="create_enquiry").key]
    assert not AuditEntry.objects.filter(action="crm_erasure_resumed").exists()


def test_a_crm_deletion_an_earlier_erasure_cancelled_runs_again_on_request(sandbox: Any) -> None:
    """A database where a second erasure cancelled the deletion (as erasures once did):
    `--crm` makes the same operation due again, under its own key, and audits it."""
    _, bob = two_people()
    first = person_erase(address=ADA["email"], reason="Asked by email", system="console", crm=True)
    [erasure_id] = first.crm_operations
    Operation.objects.filter(pk=erasure_id).update(
        status="cancelled", next_attempt_at=None, completed_at=timezone.now()
    )
    key = Operation.objects.get(pk=erasure_id).key
    assert len(sandbox.records()) == 2

    assert f"CRM deletion (operation {erasure_id}): succeeded" in erase_quietly("--crm")

    erasure = Operation.objects.get(pk=erasure_id)
    assert (erasure.status, erasure.key) == ("succeeded", key)
    assert Operation.objects.filter(step="erase_person").count() == 1
    refs = [r["external_ref"] for r in sandbox.records()]
    assert refs == [bob.operations.get(step="create_enquiry").key]
    resumed = AuditEntry.objects.get(action="crm_erasure_resumed")
    assert resumed.operation_id == erasure_id
    assert resumed.actor_label.startswith("system:person erase")
    # Done once: a further request finds it succeeded and asks nothing again.
    erase_quietly("--crm")
    assert AuditEntry.objects.filter(action="crm_erasure_resumed").count() == 1
    assert erasure.attempts.count() == 1


def test_a_crm_deletion_in_review_keeps_its_case_through_a_later_erasure(sandbox: Any) -> None:
    """The deletion came back unclear and waits for a person: a request made again
    leaves the step and its case to that person (no second try behind their back)."""
    ada, _ = two_people()
    first = person_erase(address=ADA["email"], reason="Asked by email", system="console", crm=True)
    [erasure_id] = first.crm_operations
    Operation.objects.filter(pk=erasure_id).update(status="needs_review", next_attempt_at=None)
    erasure = Operation.objects.get(pk=erasure_id)
    case, _ = review_case_open(
        kind=ReviewCase.Kind.AMBIGUOUS,
        subject=operation_subject(erasure_id),
        summary="The CRM's answer to the deletion was lost.",
        event=ada,
        operation=erasure,
        system="test",
    )

    erase_quietly("--crm")

    case.refresh_from_db()
    assert case.status in ReviewCase.OPEN_STATUSES
    assert Operation.objects.get(pk=erasure_id).status == "needs_review"
    assert len(sandbox.records()) == 2
