"""Case services and the console flows that call them, against the real sandbox.

Outcomes are counted where the business cares: records in the CRM, operation
states, audit entries.
"""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.db import DatabaseError, transaction
from django.http import QueryDict
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import AuditEntry, Destination, Event, Operation, ReviewCase
from idempotency_core.review.cases import (
    case_close,
    case_mark_not_duplicate,
    case_mark_resolved,
    case_take_ownership,
)
from idempotency_core.review.lookup import operation_destination_lookup
from idempotency_core.review.merge import duplicate_merge_request
from idempotency_core.review.refusals import (
    CaseActionRefusedError,
    MergeRefusedError,
    ReplayRefusedError,
)
from idempotency_core.review.replay import operation_replay
from review_console.cases.bulk import bulk_replay_counts, bulk_replay_run, bulk_replay_start
from review_console.cases.dashboard import dashboard_summary
from review_console.models import BulkReplayJob
from tests.factories import duplicate_case, ingest, permanent_case

pytestmark = pytest.mark.django_db


def test_resolving_with_a_verified_reference_completes_the_operation(
    users, ambiguous_case, sandbox
):
    case = ambiguous_case()
    rita = users["reviewer"]
    lookup = operation_destination_lookup(operation_id=case.operation_id, actor=rita, case=case)
    # No lookup capability: the listing scan still finds the committed record.
    assert lookup.found is True and lookup.method == "listing"
    (ref,) = lookup.refs
    with pytest.raises(CaseActionRefusedError, match="no record"):
        case_mark_resolved(case_id=case.pk, actor=rita, destination_ref="rec_999999", reason="x")
    case_mark_resolved(case_id=case.pk, actor=rita, destination_ref=ref, reason="Found it")
    case.refresh_from_db()
    operation = Operation.objects.get(pk=case.operation_id)
    assert case.status == "resolved" and case.resolution_code == "verified_in_destination"
    assert (operation.status, operation.destination_ref) == ("succeeded", ref)
    # The pipeline carries on from the verified enquiry: the task step is released.
    task = operation.event.operations.get(step="assign_task")
    assert task.next_attempt_at is not None
    assert operation_execute(operation_id=task.pk) == "succeeded"
    assert sandbox.stats()["records"] == 1 and sandbox.stats()["tasks"] == 1
    assert AuditEntry.objects.filter(case=case, action="case_resolved").count() == 1


def test_closing_cancels_the_operation_and_the_steps_after_it(users):
    case = permanent_case()
    with pytest.raises(CaseActionRefusedError, match="reason"):
        case_close(case_id=case.pk, actor=users["reviewer"], resolution_code="other", reason=" ")
    case_close(
        case_id=case.pk,
        actor=users["reviewer"],
        resolution_code="spam_or_test",
        reason="Test submission",
    )
    statuses = set(case.event.operations.values_list("status", flat=True))
    assert statuses == {"cancelled"}
    with pytest.raises(CaseActionRefusedError, match="already closed"):
        case_close(case_id=case.pk, actor=users["reviewer"], resolution_code="other", reason="x")


def test_taking_ownership_never_silently_steals_a_case(users):
    rita, rex = users["reviewer"], users["replay_admin"]
    first, second = permanent_case("own-1"), permanent_case("own-2")
    assert case_take_ownership(case_ids=[first.pk], actor=rita).taken == [first.pk]
    result = case_take_ownership(case_ids=[first.pk, second.pk], actor=rex)
    assert (result.taken, result.skipped) == ([second.pk], [first.pk])
    assert case_take_ownership(case_ids=[first.pk], actor=rex, take_over=True).taken == [first.pk]
    first.refresh_from_db()
    assert (first.owner, first.status) == (rex, "in_progress")
    entry = AuditEntry.objects.filter(case=first, action="case_taken").order_by("-pk").first()
    assert entry.details == {"previous_owner": "rita"}


@pytest.mark.parametrize("evidence", ["events", "records"])
def test_a_merge_is_an_operation_run_by_a_worker_and_leaves_one_record(users, sandbox, evidence):
    case = duplicate_case(sandbox, evidence=evidence)
    assert sandbox.stats()["records"] == 2
    survivor, duplicate = case.record_ids
    with pytest.raises(MergeRefusedError, match="only records it is about"):
        duplicate_merge_request(
            case_id=case.pk,
            survivor_ref=survivor,
            duplicate_ref="rec_777",
            actor=users["reviewer"],
            reason="x",
        )
    request = {
        "case_id": case.pk,
        "survivor_ref": survivor,
        "duplicate_ref": duplicate,
        "actor": users["reviewer"],
        "reason": "Same person, same message, two minutes apart",
    }
    operation = duplicate_merge_request(**request)
    assert duplicate_merge_request(**request) == operation  # a double click merges once
    assert operation.key.startswith("opk_merge_") and operation.status == "pending"
    assert sandbox.stats()["records"] == 2  # nothing happens in the request
    assert operation_execute(operation_id=operation.pk) == "succeeded"  # the worker's turn
    assert sandbox.stats()["records"] == 1
    attempt = operation.attempts.get()
    assert (attempt.trigger, attempt.triggered_by) == ("reviewer", users["reviewer"])
    actions = list(
        AuditEntry.objects.filter(case=case, action__in=["merge_requested", "merged"])
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert actions == ["merge_requested", "merged"]
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "merged")


def test_not_a_duplicate_is_a_resolution_and_only_for_duplicates(users, sandbox):
    case = duplicate_case(sandbox)
    case_mark_not_duplicate(case_id=case.pk, actor=users["reviewer"], reason="Two kitchens")
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "not_duplicate")
    assert sandbox.stats()["records"] == 2
    with pytest.raises(CaseActionRefusedError, match="suspected duplicate"):
        case_mark_not_duplicate(case_id=permanent_case().pk, actor=users["reviewer"], reason="x")


def test_the_merge_page_shows_both_records_with_differences(users, sandbox):
    case = duplicate_case(sandbox)
    client = Client()
    client.force_login(users["reviewer"])
    page = client.get(reverse("console:case-compare", args=[case.pk])).content.decode()
    for ref in case.record_ids:
        assert ref in page  # under Technical details
    # The same person and message twice: no row differs (Onefold's reference and the
    # time each was made are not the customer's data, so they are no rows of their own).
    assert 'class="diff"' not in page and ">differs<" not in page
    assert "made <time" in page  # each record's creation, local and relative
    assert "dup-a" in page and "dup-b" in page  # the originating events' keys, technical
    assert "a***@example.com" in page and "ada@example.com" not in page
    assert "A merge in the CRM cannot be undone." in page


def test_bulk_replay_replays_what_is_safe_and_lists_what_is_not(users, ambiguous_case):
    safe = [permanent_case(f"bulk-{i}") for i in range(3)]
    unsafe = ambiguous_case("bulk-amb")
    job = bulk_replay_start(
        actor=users["replay_admin"],
        params=QueryDict(""),
        reason="CRM credentials fixed",
    )
    while bulk_replay_run(job_id=job.pk, chunk_seconds=0.5) != "finished":
        pass
    job.refresh_from_db()
    counts = bulk_replay_counts(job)
    assert (job.status, job.total) == (BulkReplayJob.Status.FINISHED, 4)
    assert (counts["replayed"], counts["refused"]) == (3, 1)
    refused = job.items.get(status="refused")
    assert refused.operation_id == unsafe.operation_id
    assert "could be done twice" in refused.message
    for case in safe:
        assert Operation.objects.get(pk=case.operation_id).status == "retry_scheduled"
    client = Client()
    client.force_login(users["replay_admin"])
    page = client.get(reverse("console:bulk-replay-detail", args=[job.pk])).content.decode()
    assert "4 of 4 done" in page and "could be done twice" in page


def test_bulk_replay_progress_is_polled_as_a_fragment_until_the_job_finishes(users):
    permanent_case("bulk-poll")
    job = bulk_replay_start(actor=users["replay_admin"], params=QueryDict(""), reason="fixed")
    client = Client()
    client.force_login(users["reviewer"])
    url = reverse("console:bulk-replay-detail", args=[job.pk])

    full = client.get(url).content.decode()
    assert "<html" in full and "htmx-2.0.11.min.js" in full
    assert '<meta http-equiv="refresh"' in full  # inside <noscript>, for browsers without JS

    running = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in running and 'id="bulk-progress"' in running
    assert 'hx-trigger="every 2s"' in running and "Waiting for a worker" in running

    while bulk_replay_run(job_id=job.pk, chunk_seconds=0.5) != "finished":
        pass
    finished = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "1 of 1 done" in finished
    assert "hx-trigger" not in finished  # the finished fragment stops the polling


def test_a_lookup_by_htmx_answers_in_place_with_the_audit_trail(users, ambiguous_case):
    case = ambiguous_case("htmx-lookup")
    client = Client()
    client.force_login(users["reviewer"])
    url = reverse("console:case-lookup", args=[case.pk])

    response = client.post(url, headers={"HX-Request": "true"})
    assert response.status_code == 200
    fragment = response.content.decode()
    assert "<html" not in fragment
    assert 'id="lookup-result"' in fragment and "it is <strong>there</strong>" in fragment
    assert 'id="case-audit" hx-swap-oob="true"' in fragment
    assert "destination_lookup" in fragment
    # The answer is on the page already: no flash message is left for the next one.
    page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert "Looked up in the CRM: " not in page

    # Without JavaScript the same POST redirects back to the case, with a message.
    plain = client.post(url, follow=True)
    assert plain.redirect_chain[-1][1] == 302
    assert "Looked up in the CRM: it is there." in plain.content.decode()
    assert AuditEntry.objects.filter(case=case, action="destination_lookup").count() == 2


def test_a_bulk_runner_that_dies_mid_item_leaves_it_pending(users, monkeypatch):
    case = permanent_case("bulk-dies")
    job = bulk_replay_start(actor=users["replay_admin"], params=QueryDict(""), reason="fixed")

    def die(**kwargs):
        # What a worker killed inside the replay looks like to the database:
        # the transaction never commits.
        raise KeyboardInterrupt

    monkeypatch.setattr("review_console.cases.bulk.operation_replay", die)
    with pytest.raises(KeyboardInterrupt):
        bulk_replay_run(job_id=job.pk)
    assert job.items.get().status == "pending"
    assert Operation.objects.get(pk=case.operation_id).status == "needs_review"
    monkeypatch.undo()
    while bulk_replay_run(job_id=job.pk, chunk_seconds=0.5) != "finished":
        pass
    assert job.items.get().status == "replayed"
    assert Operation.objects.get(pk=case.operation_id).status == "retry_scheduled"


def test_bulk_replay_through_the_console_needs_a_reason_and_confirmation(users):
    permanent_case("bulk-view")
    client = Client()
    client.force_login(users["replay_admin"])
    url = reverse("console:bulk-replay-new")
    confirm = client.post(url, {"kind": "permanent_failure"})
    assert confirm.status_code == 200 and b"1 case" in confirm.content
    assert BulkReplayJob.objects.count() == 0
    started = client.post(url, {"kind": "permanent_failure", "confirm": "yes", "reason": "fixed"})
    job = BulkReplayJob.objects.get()
    assert started["Location"] == reverse("console:bulk-replay-detail", args=[job.pk])
    assert job.filter_params == {"kind": ["permanent_failure"]}


def test_the_queue_filters_and_pages_by_keyset(users):
    cases = [permanent_case(f"queue-{i:02d}") for i in range(55)]
    client = Client()
    client.force_login(users["reviewer"])
    url = reverse("console:case-list")
    first = client.get(url)
    page = first.context["page"]
    assert page.total == 55 and len(page.items) == 50 and page.next_cursor
    second = client.get(url, {"after": page.next_cursor}).context["page"]
    assert [c.pk for c in second.items] == [c.pk for c in cases[50:]]
    back = client.get(url, {"before": second.prev_cursor}).context["page"]
    assert [c.pk for c in back.items] == [c.pk for c in cases[:50]]
    newest = client.get(url, {"sort": "newest"}).context["page"]
    assert newest.items[0].pk == cases[-1].pk
    found = client.get(url, {"q": "queue-07"}).context["page"]
    assert [c.pk for c in found.items] == [cases[7].pk]
    case_take_ownership(case_ids=[cases[3].pk], actor=users["reviewer"])
    mine = client.get(url, {"owner": "me"}).context["page"]
    assert [c.pk for c in mine.items] == [cases[3].pk]
    assert client.get(url, {"kind": "ambiguous_outcome"}).context["page"].total == 0
    assert client.get(url, {"step": "create_enquiry"}).context["page"].total == 55
    assert client.get(url, {"status": "closed"}).context["page"].total == 0


def test_the_queue_filters_by_source_destination_and_opening_date(users):
    old, partner_case, email_case = (permanent_case(f"filters-{n}") for n in range(3))
    partner, _ = source_get_or_create(name="partner-site")
    Event.objects.filter(pk=partner_case.event_id).update(source=partner)
    email_step = Operation.objects.get(event_id=email_case.event_id, step="send_confirmation")
    ReviewCase.objects.filter(pk=email_case.pk).update(operation=email_step)
    ReviewCase.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=10))
    client = Client()
    client.force_login(users["reviewer"])

    def listed(**params) -> list[int]:
        page = client.get(reverse("console:case-list"), params).context["page"]
        return sorted(c.pk for c in page.items)

    assert listed(source=partner.pk) == [partner_case.pk]
    email = Destination.objects.get(name="email")
    assert listed(destination=email.pk) == [email_case.pk]
    crm = Destination.objects.get(name="crm")
    assert listed(destination=crm.pk) == sorted([old.pk, partner_case.pk])
    cut = (timezone.now() - timedelta(days=5)).date().isoformat()
    assert listed(opened_before=cut) == [old.pk]
    assert listed(opened_after=cut) == sorted([partner_case.pk, email_case.pk])
    assert listed(opened_after=cut, source=partner.pk, destination=crm.pk) == [partner_case.pk]


def test_the_dashboard_counts_open_cases_operations_and_failures_per_destination(users, sandbox):
    for key in ("dash-1", "dash-2"):
        enquiry = ingest(key, message=f"Message {key}").operations.get(step="create_enquiry")
        assert operation_execute(operation_id=enquiry.pk) == "succeeded"
    sandbox.fault("create_record", "http_400")
    refused = ingest("dash-3", message="Message 3").operations.get(step="create_enquiry")
    assert operation_execute(operation_id=refused.pk) == "permanent"
    stale = permanent_case("dash-old")
    ReviewCase.objects.filter(pk=stale.pk).update(created_at=timezone.now() - timedelta(days=3))

    summary = dashboard_summary()
    assert (summary["open_total"], summary["unowned_total"]) == (2, 2)
    (row,) = summary["by_kind"]
    assert (row["kind"], row["total"]) == ("permanent_failure", 2)
    assert row["ages"] == [1, 0, 1, 0]  # under 1 h, 1-24 h, 1-7 days, older
    assert summary["oldest"].pk == stale.pk
    statuses = {value: n for value, _label, n in summary["operations"]}
    # Each enquiry in review holds its task and confirmation: 2 x (1 + 2 held).
    assert statuses["succeeded"] == 2 and statuses["needs_review"] == 6
    assert summary["held_total"] == 4
    (crm,) = summary["throughput"]  # only the CRM had attempts
    assert (crm["name"], crm["succeeded"], crm["failed"]) == ("crm", 2, 1)
    assert round(crm["failure_rate"], 1) == 33.3

    client = Client()
    client.force_login(users["reviewer"])
    page = client.get(reverse("console:dashboard")).content.decode()
    assert "<svg" in page and "33.3" in page


def test_the_audit_trail_filters_exports_and_cannot_be_changed(users):
    case = permanent_case()
    case_take_ownership(case_ids=[case.pk], actor=users["reviewer"], reason="mine")
    client = Client()
    client.force_login(users["reviewer"])
    page = client.get(reverse("console:audit-list"), {"action": "case_taken"})
    assert [e.action for e in page.context["page"].items] == ["case_taken"]
    export = client.get(reverse("console:audit-export"), {"case": case.pk})
    rows = list(csv.reader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert rows[0][:3] == ["at", "actor", "action"]
    assert {r[2] for r in rows[1:]} == {"case_opened", "case_taken"}
    entry = AuditEntry.objects.filter(case=case).first()
    for attempt in (
        lambda: AuditEntry.objects.filter(pk=entry.pk).update(reason="rewritten"),
        lambda: AuditEntry.objects.filter(pk=entry.pk).delete(),
    ):
        with pytest.raises(DatabaseError), transaction.atomic():
            attempt()


def test_an_action_without_a_reason_is_not_done(users):
    case = permanent_case()
    client = Client()
    client.force_login(users["reviewer"])
    url = reverse("console:case-close", args=[case.pk])
    response = client.post(url, {"confirm": "yes", "resolution_code": "other", "reason": ""})
    assert response.status_code == 200 and b"This field is required" in response.content
    case.refresh_from_db()
    assert case.status == ReviewCase.Status.OPEN
    done = client.post(url, {"confirm": "yes", "resolution_code": "other", "reason": "Phoned"})
    assert done.status_code == 302
    case.refresh_from_db()
    assert case.status == ReviewCase.Status.CLOSED


# -- replay where the destination cannot recognise a repeat -----------------------


def replay(case: ReviewCase, actor, **kwargs) -> Operation:
    return operation_replay(
        operation_id=case.operation_id, actor=actor, reason="Customer chased us", **kwargs
    )


def test_a_replay_the_destination_could_not_recognise_needs_a_recorded_lookup_first(
    users, ambiguous_case, sandbox
):
    case = ambiguous_case("replay-unlooked", mode="fail_before_commit")
    rex = users["replay_admin"]
    # The reviewer's word alone is not enough where the CRM can be asked.
    with pytest.raises(ReplayRefusedError, match="could be done twice"):
        replay(case, rex, destination_checked=True)
    lookup = operation_destination_lookup(operation_id=case.operation_id, actor=rex, case=case)
    assert lookup.found is False
    with pytest.raises(ReplayRefusedError, match="confirm it is absent"):
        replay(case, rex)  # looked up, but not confirmed
    replay(case, rex, destination_checked=True)
    assert operation_execute(operation_id=case.operation_id) == "succeeded"
    assert sandbox.stats()["records"] == 1


def test_a_replay_is_refused_when_the_lookup_found_the_effect(users, ambiguous_case, sandbox):
    case = ambiguous_case("replay-found", mode="drop_response_after_commit")
    rex = users["replay_admin"]
    lookup = operation_destination_lookup(operation_id=case.operation_id, actor=rex, case=case)
    assert lookup.found is True
    with pytest.raises(ReplayRefusedError, match=r"found the effect .*mark the case resolved"):
        replay(case, rex, destination_checked=True)  # a wrong attestation changes nothing
    assert Operation.objects.get(pk=case.operation_id).status == "needs_review"
    assert sandbox.stats()["records"] == 1


def test_a_lookup_from_before_the_last_attempt_does_not_count(users, ambiguous_case, sandbox):
    case = ambiguous_case("replay-stale", mode="fail_before_commit")
    rex = users["replay_admin"]
    operation_destination_lookup(operation_id=case.operation_id, actor=rex, case=case)
    replay(case, rex, destination_checked=True)
    # The replayed attempt commits the record and loses the answer: ambiguous again.
    sandbox.fault("create_record", "drop_response_after_commit")
    assert operation_execute(operation_id=case.operation_id) == "ambiguous"
    # The replay did not work: the same case, back in the queue (open, nobody's), with the
    # new attempt, and the audit trail says so.
    second = ReviewCase.objects.get(operation_id=case.operation_id)
    assert (second.pk, second.status, second.owner_id) == (case.pk, "open", None)
    assert AuditEntry.objects.filter(case=case, action="replay_failed").count() == 1
    assert second.evidence["attempt"] == 2
    with pytest.raises(ReplayRefusedError, match="could be done twice"):
        replay(second, rex, destination_checked=True)  # the old "absent" is out of date
    operation_destination_lookup(operation_id=case.operation_id, actor=rex, case=second)
    with pytest.raises(ReplayRefusedError, match="found the effect"):
        replay(second, rex, destination_checked=True)
    assert sandbox.stats()["records"] == 1
