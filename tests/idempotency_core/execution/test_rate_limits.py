"""A destination's limits in the engine, against the sandbox over HTTP: a 429 is waited
for, not counted; recovery reads by reference before it creates again, and re-reads the
capability it relies on first."""

from __future__ import annotations

import pytest
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import Attempt, DestinationBudget, Operation, ReviewCase
from tests.factories import ingest, make_user, op

DECLARED = "unique_external_ref,lookup"


pytestmark = pytest.mark.usefixtures("fresh_verifications")


def _due(operation: Operation) -> None:
    """Makes a scheduled retry due now (the sweeper would, once its time comes)."""
    Operation.objects.filter(pk=operation.pk).update(next_attempt_at=timezone.now())


@pytest.mark.django_db
def test_429s_are_waited_for_and_never_spend_the_bounded_attempts(sandbox, settings):
    settings.ONEFOLD_MAX_ATTEMPTS = 2
    enquiry = op(ingest("limited", contact_from_key=True), "create_enquiry")
    sandbox.fault("create_record", "http_429", times=4, seconds=0)
    for _ in range(4):
        assert operation_execute(operation_id=enquiry.pk) == "waited"
        _due(enquiry)
    assert operation_execute(operation_id=enquiry.pk) == "succeeded"
    enquiry.refresh_from_db()
    assert (enquiry.attempt_count, enquiry.waits) == (5, 4)
    outcomes = list(enquiry.attempts.order_by("number").values_list("outcome", "http_status"))
    assert outcomes == [("waited", 429)] * 4 + [("succeeded", 201)]
    assert not ReviewCase.objects.exists()
    assert sandbox.stats()["records"] == 1


@pytest.mark.django_db
def test_a_429_pauses_the_destination_for_every_worker_until_its_retry_after(sandbox):
    first, second = (
        op(ingest(f"paused-{n}", contact_from_key=True), "create_enquiry") for n in range(2)
    )
    sandbox.fault("create_record", "http_429", times=1, seconds=30)
    before = timezone.now()
    assert operation_execute(operation_id=first.pk) == "waited"
    pause = DestinationBudget.objects.get(destination__name="crm")
    assert pause.pause_kind == DestinationBudget.Pause.WINDOW
    assert 29 <= (pause.paused_until - before).total_seconds() <= 31
    # The other step of that destination is not claimed before the pause ends.
    assert operation_execute(operation_id=second.pk) is None
    second.refresh_from_db()
    assert second.next_attempt_at == pause.paused_until and second.attempt_count == 0
    first.refresh_from_db()
    assert first.next_attempt_at >= pause.paused_until


@pytest.mark.django_db
def test_after_a_lost_answer_the_record_is_read_before_anything_is_created_again(sandbox):
    enquiry = op(ingest("lost", contact_from_key=True), "create_enquiry")
    sandbox.fault("create_record", "http_500_after_commit")
    assert operation_execute(operation_id=enquiry.pk) == "ambiguous"
    enquiry.refresh_from_db()
    assert enquiry.recovery == Operation.Recovery.REPEAT_UNIQUE_REF
    _due(enquiry)
    assert operation_execute(operation_id=enquiry.pk) == "succeeded"
    last = enquiry.attempts.order_by("number").last()
    assert last.adopted and last.destination_ref
    stats = sandbox.stats()
    # Found by its reference: the create was not sent again.
    assert stats["records"] == 1 and stats["calls"]["create_record"] == 1


@pytest.mark.django_db
def test_a_capability_that_no_longer_holds_when_recovery_relies_on_it_opens_a_case(
    sandbox, monkeypatch
):
    """The workers verified the unique reference; it is switched off after an unclear
    create. The recovery reads it again first: refused, so a person decides, naming it,
    and nothing is created a second time."""
    monkeypatch.setenv("SANDBOX_CAPABILITIES", DECLARED)
    enquiry = op(ingest("stale", contact_from_key=True), "create_enquiry")
    sandbox.fault("create_record", "http_500_after_commit")
    assert operation_execute(operation_id=enquiry.pk) == "ambiguous"  # verified, then sent
    sandbox.capabilities(unique_external_ref=False)  # within the verification's TTL
    _due(enquiry)
    assert operation_execute(operation_id=enquiry.pk) == "ambiguous"
    case = ReviewCase.objects.get(operation=enquiry)
    assert case.kind == ReviewCase.Kind.AMBIGUOUS
    assert "unique_external_ref: GET /_sandbox/capabilities: unique_external_ref=false" in (
        case.summary
    )
    last = enquiry.attempts.order_by("number").last()
    assert last.error_class == "CapabilityLost"
    stats = sandbox.stats()
    assert stats["records"] == 1 and stats["calls"]["create_record"] == 1
    assert Attempt.objects.filter(operation=enquiry).count() == 2


@pytest.mark.django_db
def test_a_pause_is_one_line_on_the_dashboard_and_one_gauge_in_metrics(sandbox, client, settings):
    """However many steps wait behind it, a paused destination is one line for a person
    and one sample for a monitor, and no case."""
    enquiries = [op(ingest(f"dash-{n}", contact_from_key=True), "create_enquiry") for n in range(3)]
    sandbox.fault("create_record", "http_429", times=1, seconds=600)
    assert operation_execute(operation_id=enquiries[0].pk) == "waited"
    client.force_login(make_user("rita", groups=("Reviewers",)))
    page = client.get("/console/").content.decode()
    assert "Sending to the CRM is paused until" in page
    assert "Destination crm." in page  # its configured name, under Technical details
    assert "it asked Onefold to slow down (its rate limit)" in page
    assert "3 steps wait and will continue by themselves" in page
    settings.ONEFOLD_METRICS_TOKEN = "metrics-token"
    scraped = client.get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-token").content.decode()
    gauge = [line for line in scraped.splitlines() if line.startswith("onefold_destination_paused")]
    assert len(gauge) == 1 and 'destination="crm"' in gauge[0] and 'reason="window"' in gauge[0]
    assert 590 <= float(gauge[0].rsplit(" ", 1)[1]) <= 600
    assert not ReviewCase.objects.exists()
