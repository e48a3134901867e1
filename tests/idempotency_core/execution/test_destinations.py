"""Destinations: adapters chosen by kind, capabilities verified against the live sandbox.

`check_destinations` runs as a real process on the test database against the
real sandbox; the workers' refusal is shown through the engine in this process
and through a real worker cluster.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from idempotency_core.execution import destinations
from idempotency_core.execution.destinations import (
    AdapterUnavailableError,
    DestinationRefusedError,
    adapter_for,
    destination_checks,
    destination_ready,
    kind_of,
)
from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import Attempt, Destination, DestinationBudget, Operation, ReviewCase
from integrations.sandbox.adapter import SandboxCrm
from integrations.smtp.adapter import SmtpSender
from tests.factories import ingest, op
from tests.support.processes import REPO, check_destinations, free_port, wait_for

DECLARED = "unique_external_ref,lookup"


pytestmark = pytest.mark.usefixtures("fresh_verifications")


@pytest.mark.django_db
def test_check_destinations_prints_each_capability_verified(sandbox):
    result = check_destinations(sandbox)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "crm\tlookup\tverified\tGET /_sandbox/capabilities: lookup=true" in lines
    assert (
        "crm\tunique_external_ref\tverified\tGET /_sandbox/capabilities: unique_external_ref=true"
        in lines
    )
    assert "email\t-\tverified\tsmtp: declares no recovery capability" in lines
    assert len(lines) == 3


@pytest.mark.django_db
def test_a_capability_switched_off_after_declaration_is_refused_by_the_command(sandbox):
    sandbox.capabilities(unique_external_ref=False)
    result = check_destinations(sandbox, SANDBOX_CAPABILITIES=DECLARED)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert (
        "crm\tunique_external_ref\trefused\tGET /_sandbox/capabilities: unique_external_ref=false"
        in lines
    )
    assert "crm\tlookup\tverified\tGET /_sandbox/capabilities: lookup=true" in lines
    assert "refused: crm" in result.stderr
    # The same declaration, honoured again: exit 0.
    sandbox.capabilities(unique_external_ref=True)
    assert check_destinations(sandbox, SANDBOX_CAPABILITIES=DECLARED).returncode == 0


@pytest.mark.django_db
def test_an_unreachable_destination_is_refused_with_the_reason(sandbox):
    result = check_destinations(sandbox, DESTINATION_URL=f"http://127.0.0.1:{free_port()}")
    assert result.returncode == 1
    refused = [line for line in result.stdout.splitlines() if line.startswith("crm\t")]
    assert len(refused) == 1 and refused[0].startswith("crm\treachable\trefused\tConnectError")
    assert "refused: crm" in result.stderr


@pytest.mark.django_db
def test_a_refused_destination_is_never_called_and_its_work_waits_without_a_case(
    sandbox, settings, monkeypatch, caplog
):
    """A refused destination parks its work once, visibly (one pause on the dashboard),
    instead of spending each submission's attempts into a case of its own; the work
    resumes when the destination verifies again."""
    monkeypatch.setenv("SANDBOX_CAPABILITIES", DECLARED)
    sandbox.capabilities(unique_external_ref=False)
    settings.ONEFOLD_MAX_ATTEMPTS = 2
    enquiries = [
        op(ingest(f"refused-{n}", contact_from_key=True), "create_enquiry") for n in range(3)
    ]
    with caplog.at_level(logging.WARNING, logger="idempotency_core.execution.destinations"):
        assert operation_execute(operation_id=enquiries[0].pk) == "waited"
    assert "destination crm refused: unique_external_ref" in caplog.text
    attempt = Attempt.objects.get(operation=enquiries[0])
    assert attempt.outcome == Attempt.Outcome.WAITED
    assert attempt.error_class == "DestinationRefusedError"
    assert attempt.error_message == (
        "destination crm refused, not called: unique_external_ref: "
        "GET /_sandbox/capabilities: unique_external_ref=false"
    )
    pause = DestinationBudget.objects.get(destination__name="crm")
    assert pause.pause_kind == DestinationBudget.Pause.REFUSED
    assert "unique_external_ref=false" in pause.pause_reason
    # Every due step of the destination waits for the pause's end: nothing is claimed.
    for enquiry in enquiries:
        enquiry.refresh_from_db()
        assert enquiry.next_attempt_at >= pause.paused_until
        assert enquiry.waits == (1 if enquiry == enquiries[0] else 0)
    assert operation_execute(operation_id=enquiries[1].pk) is None
    # Past many pauses, still no case: waits are not attempts.
    for _ in range(3):
        Operation.objects.filter(pk=enquiries[0].pk).update(next_attempt_at=timezone.now())
        assert operation_execute(operation_id=enquiries[0].pk) == "waited"
    assert not ReviewCase.objects.exists()
    stats = sandbox.stats()
    assert stats["records"] == 0 and stats["calls"].get("create_record", 0) == 0
    # Verified again: the pause ends and the work is done.
    sandbox.capabilities(unique_external_ref=True)
    destinations.verification_forget()  # as when the refusal's retry time has passed
    Operation.objects.filter(pk__in=[e.pk for e in enquiries]).update(
        next_attempt_at=timezone.now()
    )
    assert [operation_execute(operation_id=e.pk) for e in enquiries] == ["succeeded"] * 3
    assert DestinationBudget.objects.get(destination__name="crm").paused_until is None
    assert sandbox.stats()["records"] == 3


@pytest.mark.django_db
def test_a_verification_is_kept_for_its_ttl_then_asked_again(sandbox, settings, monkeypatch):
    monkeypatch.setenv("SANDBOX_CAPABILITIES", DECLARED)
    settings.ONEFOLD_VERIFY_TTL_SECONDS = 60
    crm = Destination.objects.get(name="crm")
    destination_ready(crm, now=1000.0)  # verified
    sandbox.capabilities(lookup=False)
    destination_ready(crm, now=1059.0)  # still within the TTL: not asked
    with pytest.raises(DestinationRefusedError, match="lookup=false"):
        destination_ready(crm, now=1061.0)
    sandbox.capabilities(lookup=True)
    with pytest.raises(DestinationRefusedError):  # a refusal is kept for the TTL too
        destination_ready(crm, now=1100.0)
    destination_ready(crm, now=1122.0)


@pytest.mark.django_db
def test_a_verification_holds_until_a_variable_its_adapter_read_changes(
    sandbox, settings, monkeypatch
):
    """A variable the adapter never read changes nothing; one it read, unset then
    included, makes a new configuration, asked again."""
    monkeypatch.delenv("SANDBOX_LOOKUP_SETTLE_SECONDS", raising=False)
    monkeypatch.setenv("SANDBOX_CAPABILITIES", DECLARED)
    settings.ONEFOLD_VERIFY_TTL_SECONDS = 60
    crm = Destination.objects.get(name="crm")
    destination_ready(crm, now=1000.0)  # verified
    sandbox.capabilities(lookup=False)
    monkeypatch.setenv("SANDBOX_READ_BY_NO_ADAPTER", "1")
    destination_ready(crm, now=1001.0)  # not asked
    monkeypatch.setenv("SANDBOX_LOOKUP_SETTLE_SECONDS", "2")
    with pytest.raises(DestinationRefusedError, match="lookup=false"):
        destination_ready(crm, now=1002.0)
    sandbox.capabilities(lookup=True)
    monkeypatch.setenv("SANDBOX_CAPABILITIES", "lookup")
    destination_ready(crm, now=1003.0)
    monkeypatch.setenv("SANDBOX_CAPABILITIES", DECLARED)  # the refused configuration again
    with pytest.raises(DestinationRefusedError, match="lookup=false"):
        destination_ready(crm, now=1004.0)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the cluster commits
def test_a_real_worker_cluster_parks_a_refused_destinations_work_then_resumes_it(
    sandbox, qcluster_factory
):
    """Twenty submissions to a destination whose declaration does not hold: no call, no
    case, one pause; once it holds again, every submission is done once."""
    sandbox.capabilities(lookup=False)
    timings = {
        "ONEFOLD_MAX_ATTEMPTS": "2",
        "ONEFOLD_RETRY_BASE_SECONDS": "0.05",
        "ONEFOLD_RETRY_MAX_SECONDS": "0.1",
        "ONEFOLD_SWEEP_SECONDS": "0.2",
        "ONEFOLD_VERIFY_RETRY_SECONDS": "2",
    }
    cluster = qcluster_factory(SANDBOX_CAPABILITIES=DECLARED, **timings)
    qcluster_factory.sweeper(SANDBOX_CAPABILITIES=DECLARED, **timings)  # makes retries due
    # Each worker verified the destinations in use as it started.
    wait_for(
        lambda: "destination crm refused: lookup" in cluster.log(),
        timeout=30,
        what="the workers' verification at start",
    )
    enquiries = [
        op(ingest(f"cluster-refused-{n}", contact_from_key=True), "create_enquiry")
        for n in range(20)
    ]
    pause = wait_for(
        lambda: DestinationBudget.objects.filter(
            destination__name="crm", pause_kind=DestinationBudget.Pause.REFUSED
        ).first(),
        timeout=30,
        what="the pause",
    )
    assert "lookup=false" in pause.pause_reason
    time.sleep(5)  # two pauses' worth: nothing is called, no case opens
    assert list(ReviewCase.objects.values_list("kind", "summary")) == []
    assert sandbox.stats()["records"] == 0
    # An attempt still in progress (a worker's verification in flight) has no outcome
    # yet; every attempt that ended was a wait.
    ended = Attempt.objects.filter(outcome__isnull=False)
    assert not ended.exclude(outcome=Attempt.Outcome.WAITED).exists()
    sandbox.capabilities(lookup=True)
    wait_for(
        lambda: all(
            Operation.objects.get(pk=e.pk).status == Operation.Status.SUCCEEDED for e in enquiries
        ),
        timeout=60,
        what="every enquiry created once the destination holds again",
    )
    assert sandbox.stats()["records"] == 20
    assert not ReviewCase.objects.exists()
    assert not DestinationBudget.objects.filter(paused_until__gt=timezone.now()).exists()


@pytest.mark.django_db
def test_onefold_crm_and_email_choose_the_default_destinations_adapters(settings, sandbox):
    crm = Destination.objects.get(name="crm")
    email = Destination.objects.get(name="email")
    assert (kind_of(crm), kind_of(email)) == ("crm_http", "smtp")
    assert isinstance(adapter_for(crm), SandboxCrm)
    assert isinstance(adapter_for(email), SmtpSender)
    settings.ONEFOLD_CRM = "pipedrive"
    settings.ONEFOLD_EMAIL = "resend"
    assert (kind_of(crm), kind_of(email)) == ("pipedrive", "resend")
    # A source's own destination keeps the kind stored on its row.
    own = Destination.objects.create(name="own-crm", kind="crm_http", base_url=sandbox.url)
    assert kind_of(own) == "crm_http" and isinstance(adapter_for(own), SandboxCrm)


def test_an_unknown_onefold_crm_stops_the_process_with_a_clear_message():
    result = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "check"],
        cwd=REPO,
        env={**os.environ, "ONEFOLD_CRM": "zoho"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "ONEFOLD_CRM must be one of sandbox, hubspot, salesforce, pipedrive, dataverse" in (
        result.stderr
    )


@pytest.mark.django_db
def test_a_kind_whose_adapter_is_absent_is_refused_not_a_traceback(sandbox, monkeypatch):
    monkeypatch.setitem(
        destinations.FACTORIES, "hubspot", "integrations.absent_vendor.adapter:adapter_from_env"
    )
    crm = Destination.objects.create(name="absent", kind="hubspot")
    with pytest.raises(AdapterUnavailableError, match="not installed"):
        adapter_for(crm)
    [check] = destination_checks(crm)
    assert (check.capability, check.verified) == ("reachable", False)
    assert "the hubspot adapter is not installed" in check.how
    with pytest.raises(DestinationRefusedError, match="not installed"):
        destination_ready(crm)


@pytest.mark.django_db
def test_the_sandbox_capabilities_are_read_when_recovery_is_decided(sandbox):
    crm = Destination.objects.get(name="crm")
    assert destinations.capabilities_of(crm).unique_external_ref is True
    sandbox.capabilities(unique_external_ref=False, idempotency_keys=True)
    read = destinations.capabilities_of(crm)
    assert (read.unique_external_ref, read.idempotency_keys) == (False, True)
    assert read.key_retention == timedelta(hours=24)


@pytest.mark.django_db
def test_a_sandbox_that_does_not_answer_offers_nothing(settings):
    settings.DESTINATION_URL = f"http://127.0.0.1:{free_port()}"
    read = destinations.capabilities_of(Destination.objects.get(name="crm"))
    assert (read.idempotency_keys, read.unique_external_ref, read.lookup) == (False, False, False)
