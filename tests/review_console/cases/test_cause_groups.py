"""Open cases grouped by cause, one decision for the group, a cause held.

Twenty submissions refused by the same 400 (the sandbox CRM's, for real, through the
engine) form one group in the queue with its count and first and last seen; one
decision closes all twenty, each by its own service with its own audit entry, and
leaves the other cases alone. Holding the cause keeps its new cases out of the list and
out of "Next case", attached to the group, until someone decides or the hold ends.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import unquote

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import AuditEntry, Operation, ReviewCase
from review_console.cases.bulk import bulk_replay_run
from review_console.cases.causes import Cause
from review_console.models import BulkReplayJob, CauseHold
from tests.factories import ingest, op, permanent_case

pytestmark = pytest.mark.django_db

LABEL = "Refused: it did not accept the details that were sent (Create the enquiry in the CRM)"


def refused(sandbox, key: str) -> ReviewCase:
    """A submission the sandbox CRM refuses with a 400, run by the engine."""
    event = ingest(key, contact_from_key=True, message=f"Message {key}")
    sandbox.fault("create_record", "http_400")
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "permanent"
    return ReviewCase.objects.get(event=event, kind="permanent_failure")


def client_as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def queue(client: Client) -> str:
    return client.get(reverse("console:case-list")).content.decode()


def group_token(html: str) -> str:
    """The first group's cause, as its link to the group's page carries it."""
    return unquote(html.split('href="?cause=', 1)[1].split('"', 1)[0])


def test_twenty_refused_by_the_same_400_are_one_group_settled_by_one_decision(users, sandbox):
    twenty = [refused(sandbox, f"g20-{i}") for i in range(20)]
    other = permanent_case("g20-other")  # refused too, but another cause (no reply text)
    ambiguous = ReviewCase.objects.create(
        kind="ambiguous_outcome", subject="x", summary="s", operation=op(other.event, "assign_task")
    )
    client = client_as(users["reviewer"])
    html = queue(client)
    assert "Several cases, one cause" in html
    assert f"<strong>20 cases</strong>: {LABEL}" in html
    assert html.count('class="card cause-group"') == 1  # the others share no cause
    assert "first <time" in html and "last <time" in html
    before = AuditEntry.objects.count()
    response = client.post(
        reverse("console:cause-settle"),
        {
            "cause": group_token(html),
            "seen_until": timezone.now().isoformat(),
            "preset": "not_fixable",
            "note": "the form sent a field the CRM does not have",
            "next": "/console/cases/",
        },
        follow=True,
    )
    assert "Closed 20 cases with the same cause." in response.content.decode()
    for case in twenty:
        case.refresh_from_db()
        assert (case.status, case.resolution_code) == ("closed", "not_fixable")
        assert Operation.objects.get(pk=case.operation_id).status == "cancelled"
    closes = AuditEntry.objects.filter(action="case_closed", case__in=twenty)
    assert closes.count() == 20 and len({e.case_id for e in closes}) == 20
    assert AuditEntry.objects.count() - before == 20  # one per case, nothing else
    assert {e.reason for e in closes} == {
        "Cannot be fixed (wrong details, or the CRM or mail service is no longer used): "
        "the form sent a field the CRM does not have"
    }
    for untouched in (other, ambiguous):
        untouched.refresh_from_db()
        assert untouched.status == "open"


def test_a_group_decision_closes_what_the_reviewer_saw_not_what_came_after(users, sandbox):
    seen = [refused(sandbox, f"gs-{i}") for i in range(3)]
    client = client_as(users["reviewer"])
    html = queue(client)
    token, shown_at = group_token(html), timezone.now()
    later = refused(sandbox, "gs-later")
    client.post(
        reverse("console:cause-settle"),
        {"cause": token, "seen_until": shown_at.isoformat(), "preset": "spam_or_test"},
    )
    assert {c.status for c in ReviewCase.objects.filter(pk__in=[c.pk for c in seen])} == {"closed"}
    later.refresh_from_db()
    assert later.status == "open"


def test_a_held_cause_keeps_its_new_cases_in_its_group_until_someone_decides(users, sandbox):
    first = [refused(sandbox, f"gh-{i}") for i in range(3)]
    unrelated = permanent_case("gh-unrelated")
    rita = users["reviewer"]
    client = client_as(rita)
    client.post(
        reverse("console:cause-settle"),
        {
            "cause": group_token(queue(client)),
            "seen_until": timezone.now().isoformat(),
            "preset": "spam_or_test",
            "hold_hours": "4",
        },
    )
    hold = CauseHold.objects.get()
    assert (hold.created_by, hold.resolution_code) == (rita, "spam_or_test")
    assert timedelta(hours=3, minutes=59) < hold.until - hold.created_at <= timedelta(hours=4)
    entry = AuditEntry.objects.get(action="cause_held")
    assert sorted(entry.details["closed"]) == sorted(c.pk for c in first)
    arrived = refused(sandbox, "gh-new")
    html = queue(client)
    # Not listed one by one, not given by "Next case": attached to the group, which says so.
    assert f'data-href="{reverse("console:case-detail", args=[arrived.pk])}"' not in html
    assert "1 new case since then waits here" in html and "Close this one too" in html
    assert "holds it for 4 hours, until" in html and "until <time" in html
    client.post(reverse("console:case-next"))
    unrelated.refresh_from_db()
    arrived.refresh_from_db()
    assert unrelated.owner == rita and arrived.owner is None and arrived.status == "open"
    assert (
        client.post(reverse("console:case-next"), follow=True)
        .content.decode()
        .count("Nothing waits for a person")
    )
    # "Show them" lists the cause's cases, the held one included.
    shown = client.get(reverse("console:case-list"), {"cause": group_token(html)})
    assert reverse("console:case-detail", args=[arrived.pk]) in shown.content.decode()
    # One click closes those the hold kept back, with the same category.
    client.post(
        reverse("console:cause-settle"),
        {
            "cause": group_token(html),
            "seen_until": timezone.now().isoformat(),
            "since": hold.created_at.isoformat(),
            "preset": hold.resolution_code,
        },
    )
    arrived.refresh_from_db()
    assert (arrived.status, arrived.resolution_code) == ("closed", "spam_or_test")
    assert AuditEntry.objects.filter(case=arrived, action="case_closed").count() == 1
    # When the hold is stopped, new cases of the cause are listed one by one again.
    client.post(reverse("console:cause-hold-stop", args=[hold.pk]))
    again = refused(sandbox, "gh-after")
    assert reverse("console:case-detail", args=[again.pk]) in queue(client)
    assert AuditEntry.objects.filter(action="cause_hold_stopped").count() == 1


def test_try_all_again_replays_each_case_of_the_group(users, sandbox):
    cases = [refused(sandbox, f"gr-{i}") for i in range(4)]
    permanent_case("gr-other")
    client = client_as(users["replay_admin"])
    token = group_token(queue(client))
    confirm = client.post(reverse("console:bulk-replay-new"), {"cause": token})
    assert "<strong>4 cases</strong>" in confirm.content.decode()
    client.post(
        reverse("console:bulk-replay-new"),
        {"cause": token, "confirm": "yes", "reason": "The CRM field exists now"},
    )
    job = BulkReplayJob.objects.get()
    while bulk_replay_run(job_id=job.pk, chunk_seconds=0.5) != "finished":
        pass
    replays = AuditEntry.objects.filter(action="replay", case__in=cases)
    assert replays.count() == 4
    assert set(
        Operation.objects.filter(pk__in=[c.operation_id for c in cases]).values_list(
            "status", flat=True
        )
    ) == {"retry_scheduled"}


@pytest.mark.parametrize(
    "token", ["", "not json", '["a"]', '["permanent_failure", "x\\u0000", 1, "", ""]']
)
def test_a_forged_group_is_refused_without_deciding_anything(users, sandbox, token):
    refused(sandbox, "gf-1")
    refused(sandbox, "gf-2")
    client = client_as(users["reviewer"])
    response = client.post(
        reverse("console:cause-settle"),
        {"cause": token, "seen_until": timezone.now().isoformat(), "preset": "spam_or_test"},
        follow=True,
    )
    assert response.status_code == 200
    assert "That group is not valid" in response.content.decode()
    assert not AuditEntry.objects.filter(action="case_closed").exists()
    listed = client.get(reverse("console:case-list"), {"cause": token})
    assert listed.status_code == 200


def test_a_cause_is_read_from_each_case_s_step_destination_and_answer(sandbox):
    case = refused(sandbox, "gc-1")
    cause = Cause.from_token(Cause("permanent_failure", "create_enquiry", 0, "", "").token())
    assert cause.kind == "permanent_failure" and cause.step == "create_enquiry"
    assert case.evidence["reply"] == "HTTP 400"  # what the group's status is read from
