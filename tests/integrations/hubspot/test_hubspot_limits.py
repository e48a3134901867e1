"""HubSpot as it really is: no unique task property, 100 requests per 10
seconds, search behind writes. Real gunicorn, a real django-q2 cluster and sweeper, the
emulator over loopback; each scenario ends by counting what HubSpot holds."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from django.utils import timezone

from idempotency_core.execution.destinations import verification_forget
from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import DestinationBudget, Event, Operation, ReviewCase
from lab.emulators.hubspot import HubSpotEmulator
from tests.factories import ingest, op, submission
from tests.support.processes import check_destinations, wait_for
from tests.support.vendors import all_settled, deliver_at_once

PEOPLE = 30
RETURNING = 10  # of them send a second, different enquiry
STORM = 20  # identical deliveries of one more submission, at once


def _submissions() -> list[tuple[str, dict[str, Any]]]:
    """(key, body) of each genuine submission: every person once, some twice."""
    people = [
        (f"person-{n}", {"name": f"Person {n}", "email": f"person{n}@example.com"})
        for n in range(PEOPLE)
    ]
    firsts = [(f"{key}-a", submission(contact=c, message=f"Kitchen, {key}")) for key, c in people]
    seconds = [
        (f"{key}-b", submission(contact=c, message=f"And the garden, {key}"))
        for key, c in people[:RETURNING]
    ]
    return firsts + seconds


@pytest.mark.slow
@pytest.mark.paced  # a storm through gunicorn and a cluster, at HubSpot's 100 requests in 10 s
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
@pytest.mark.parametrize("clash_status", [409, 400])
def test_lost_answers_and_storms_at_hubspots_own_limits_give_one_of_each_and_no_case(
    sandbox, web_server, qcluster_factory, clash_status
):
    """20 lost deal answers, 10 502s after commit on deals and tasks, 10 people twice and
    a storm of 20, under HubSpot's default limits and lagging search: one contact per
    email, one deal and one task per submission, no case, nothing lost. The same with
    a unique-value clash answered 400 instead of 409."""
    with HubSpotEmulator() as emulator:
        control = emulator.hubspot
        control.set_config({"unique_clash_status": clash_status})
        env = {"ONEFOLD_CRM": "hubspot", **emulator.adapter_env()}
        checked = check_destinations(sandbox, **env)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "lookup through the deal's associations" in checked.stdout
        control.add_fault(action="create_record", mode="drop_response_after_commit", times=20)
        control.add_fault(action="create_record", mode="http_502_after_commit", times=5)
        control.add_fault(action="create_task", mode="http_502_after_commit", times=5)
        qcluster_factory("qcluster", **env)
        qcluster_factory.sweeper("sweeper", **env)
        _, _, key = source_create_with_key(name="website")
        with ThreadPoolExecutor(max_workers=STORM) as pool:
            for event_key, body in _submissions():
                assert deliver_at_once(
                    pool, web_server.url, key, event_key, body, deliveries=1
                ) == [202]
            storm_body = submission(
                contact={"name": "Stormy", "email": "storm@example.com"}, message="Roof"
            )
            codes = deliver_at_once(
                pool,
                web_server.url,
                key,
                f"storm-{uuid.uuid4().hex[:6]}",
                storm_body,
                deliveries=STORM,
            )
            assert sorted(codes) == [200] * (STORM - 1) + [202]
        events = PEOPLE + RETURNING + 1
        wait_for(lambda: all_settled(events * 3), timeout=300, interval=0.5, what="every step")
        counted = control.stats()

    cases = [
        f"{kind}: {summary}" for kind, summary in ReviewCase.objects.values_list("kind", "summary")
    ]
    assert not cases, "\n".join(cases)
    assert set(Operation.objects.values_list("status", flat=True)) == {"succeeded"}
    assert Event.objects.count() == events
    deal_keys = Operation.objects.filter(step="create_enquiry").values_list("key", flat=True)
    task_keys = Operation.objects.filter(step="assign_task").values_list("key", flat=True)
    assert counted["records_by_external_ref"] == dict.fromkeys(deal_keys, 1)
    assert counted["tasks_by_external_ref"] == dict.fromkeys(task_keys, 1)
    assert (counted["records"], counted["tasks"]) == (events, events)
    assert counted["contacts"] == PEOPLE + 1
    assert set(counted["contacts_by_email"].values()) == {1}
    assert len(sandbox.messages()) == events
    # The budget kept Onefold under the limit that the emulator enforces: any 429 was
    # waited for, never counted as a failed attempt.
    assert not Operation.objects.filter(attempts__outcome="retryable").exists()


@pytest.mark.django_db
def test_a_reference_that_loses_its_uniqueness_before_recovery_leads_to_review_not_a_copy(
    sandbox, settings, monkeypatch
):
    """The workers verified the deal's unique reference; an administrator re-creates the
    property without unique values; a deal's answer had been lost. The recovery reads
    the capability again first: a case naming it, and still one deal."""
    with HubSpotEmulator() as emulator:
        settings.ONEFOLD_CRM = "hubspot"
        for variable, value in emulator.adapter_env().items():
            monkeypatch.setenv(variable, value)
        verification_forget()
        emulator.hubspot.add_fault(action="create_record", mode="http_502_after_commit")
        enquiry = op(ingest("hs-stale", contact_from_key=True), "create_enquiry")
        assert operation_execute(operation_id=enquiry.pk) == "ambiguous"
        emulator.hubspot.set_config({"reference_unique": False})
        Operation.objects.filter(pk=enquiry.pk).update(next_attempt_at=timezone.now())
        assert operation_execute(operation_id=enquiry.pk) == "ambiguous"
        counted = emulator.hubspot.stats()
    verification_forget()
    case = ReviewCase.objects.get(operation=enquiry)
    assert case.kind == ReviewCase.Kind.AMBIGUOUS
    assert "unique_external_ref" in case.summary and "hasUniqueValue=false" in case.summary
    assert (counted["records"], counted["calls"]["create_record"]) == (1, 1)


@pytest.mark.slow
@pytest.mark.paced
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_daily_limit_parks_the_work_visibly_and_it_resumes_after_the_reset(
    sandbox, web_server, qcluster_factory, client
):
    """The account's day runs out part-way: the rest waits, shown once on the dashboard
    and in /metrics, without a case per submission; after midnight it all goes through."""
    submissions = 12
    with HubSpotEmulator() as emulator:
        control = emulator.hubspot
        control.set_config({"rate_limits": {"daily": 20}})  # spent part-way
        env = {"ONEFOLD_CRM": "hubspot", **emulator.adapter_env(), "ONEFOLD_METRICS_TOKEN": "t"}
        qcluster_factory("qcluster", **env)
        qcluster_factory.sweeper("sweeper", **env)
        _, _, key = source_create_with_key(name="website")
        for n in range(submissions):
            body = submission(contact={"name": f"P {n}", "email": f"p{n}@example.com"})
            response = httpx.post(
                f"{web_server.url}/api/v1/submissions/",
                json=body,
                headers={"Authorization": f"Api-Key {key}", "Idempotency-Key": f"daily-{n}"},
                timeout=30,
            )
            assert response.status_code == 202
        pause = wait_for(
            lambda: DestinationBudget.objects.filter(pause_kind="daily").first(),
            timeout=120,
            what="the daily limit's pause",
        )
        assert pause.paused_until > timezone.now()
        metrics = httpx.get(
            f"{web_server.url}/metrics", headers={"Authorization": "Bearer t"}, timeout=30
        ).text
        assert 'onefold_destination_paused_seconds{destination="crm",reason="daily"}' in metrics
        client.force_login(_reviewer())
        assert "its requests for the day are used up" in client.get("/console/").content.decode()
        assert not ReviewCase.objects.exists()
        assert control.stats()["records"] < submissions
        # Midnight in the account's zone: HubSpot's allowance is whole, and the pause is
        # over (once the attempts that met the limit have written what they met).
        wait_for(
            lambda: not Operation.objects.filter(status="running").exists(),
            timeout=60,
            what="no attempt in flight",
        )
        time.sleep(1)
        control.set_config({"rate_limits": {"daily": 250000}})  # enough for the rest
        control.new_day()
        DestinationBudget.objects.update(paused_until=timezone.now())
        Operation.objects.filter(
            status__in=Operation.CLAIMABLE, next_attempt_at__isnull=False
        ).update(next_attempt_at=timezone.now())
        wait_for(lambda: all_settled(submissions * 3), timeout=120, what="the rest, after it")
        counted = control.stats()
    assert set(Operation.objects.values_list("status", flat=True)) == {"succeeded"}
    assert (counted["records"], counted["tasks"]) == (submissions, submissions)
    assert not ReviewCase.objects.exists()


def _reviewer():
    from tests.factories import make_user

    return make_user("rita", groups=("Reviewers",))


@pytest.mark.django_db
def test_a_verification_refused_by_the_rate_limit_is_a_wait_not_a_refusal(
    sandbox, settings, monkeypatch
):
    """An account on a smaller budget than Onefold assumed, its window already spent by
    someone else: HubSpot's 429 to the verification's own read pauses the work for the
    window; it is neither a refusal of the destination nor a spent attempt. The limit
    is learned from HubSpot's headers, and the enquiry is made once."""
    with HubSpotEmulator() as emulator:
        emulator.hubspot.set_config({"rate_limits": {"ten_secondly": 8}})
        settings.ONEFOLD_CRM = "hubspot"
        settings.ONEFOLD_MAX_ATTEMPTS = 1
        env = emulator.adapter_env()
        for variable, value in env.items():
            monkeypatch.setenv(variable, value)
        verification_forget()
        enquiry = op(ingest("hs-small-tier", contact_from_key=True), "create_enquiry")
        spend = {"Authorization": f"Bearer {env['HUBSPOT_TOKEN']}"}
        for _ in range(8):  # another integration of the same account spends the window
            httpx.get(f"{emulator.http_url}/crm/v3/pipelines/deals", headers=spend, timeout=10)
        assert operation_execute(operation_id=enquiry.pk) == "waited"
        pause = DestinationBudget.objects.get(destination__name="crm")
        assert pause.pause_kind == DestinationBudget.Pause.WINDOW, pause.pause_reason
        assert "429" in enquiry.attempts.get().error_message
        time.sleep(10)  # HubSpot's rolling window passes
        outcomes = []
        for _ in range(6):
            Operation.objects.filter(pk=enquiry.pk).update(next_attempt_at=timezone.now())
            outcomes.append(operation_execute(operation_id=enquiry.pk))
            if outcomes[-1] == "succeeded":
                break
            time.sleep(3)
        counted = emulator.hubspot.stats()
    verification_forget()
    assert outcomes[-1] == "succeeded" and set(outcomes[:-1]) <= {"waited"}, outcomes
    assert not ReviewCase.objects.exists()
    assert counted["records"] == 1
    learned = DestinationBudget.objects.get(destination__name="crm")
    assert (learned.requests, learned.per_seconds, learned.origin) == (8, 10.0, "learned")
