"""Reconciliation and Onefold's own merges: a record that a merge decided in the console
took away lives on in the record it was merged into, so no run reports it as removed or
changed; a record gone behind Onefold's back still is."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.subjects import operation_subject
from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import Event, ReconciliationFinding, ReviewCase
from idempotency_core.reconciliation.compare import reconcile, run_summary
from idempotency_core.review.merge import duplicate_merge_request
from tests.factories import duplicate_case, ingest, make_user, merge_operation, op

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("unhurried_chain")]


def period() -> dict:
    now = timezone.now()
    return {"since": now - timedelta(days=1), "until": now + timedelta(minutes=1)}


def open_cases() -> list[tuple[str, str]]:
    return list(
        ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES)
        .order_by("pk")
        .values_list("kind", "subject")
    )


def merged(case: ReviewCase, *, survivor: str, duplicate: str) -> None:
    """A Reviewer merges `duplicate` into `survivor` from the case; a worker does it."""
    reviewer = User.objects.filter(username="rita").first() or make_user(
        "rita", groups=("Reviewers",)
    )
    duplicate_merge_request(
        case_id=case.pk,
        survivor_ref=survivor,
        duplicate_ref=duplicate,
        actor=reviewer,
        reason="one enquiry",
    )
    assert operation_execute(operation_id=merge_operation(case).pk) == "succeeded"
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "merged")


def records_case(first: str, second: str, event: Event) -> ReviewCase:
    case, _ = review_case_open(
        kind=ReviewCase.Kind.SUSPECTED_DUPLICATE,
        subject=f"records:{first}+{second}",
        summary="Two enquiries from the same contact within minutes.",
        event=event,
        evidence={"external_ref": "", "record_ids": [first, second]},
        system="test",
    )
    return case


def test_a_suspected_duplicate_merged_in_the_console_stays_settled(sandbox):
    case = duplicate_case(sandbox)  # ingest's own case about the two submissions
    survivor, duplicate = case.record_ids
    merged(case, survivor=survivor, duplicate=duplicate)

    dry = reconcile(**period(), dry_run=True)
    assert sum(run_summary(dry)["findings"].values()) == 0
    for _ in range(2):  # a later run of the same period too
        run = reconcile(**period())
        assert sum(run.findings_total.values()) == 0
        assert open_cases() == []


def test_an_echo_case_opened_before_is_resolved_by_the_next_run(sandbox):
    """A removed case a run opened about a merge decided in the console (as runs did)
    is settled by the next run, which no longer finds it."""
    case = duplicate_case(sandbox)
    survivor, duplicate = case.record_ids
    merged(case, survivor=survivor, duplicate=duplicate)
    merge = merge_operation(case)
    enquiry = op(merge.event, "create_enquiry")
    echo, _ = review_case_open(
        kind=ReviewCase.Kind.RECON_REMOVED,
        subject=operation_subject(enquiry.pk),
        summary="Reconciliation run 1: no record with that id or this reference.",
        event=merge.event,
        operation=enquiry,
        evidence={},
        system="reconciliation",
    )

    reconcile(**period())

    echo.refresh_from_db()
    assert (echo.status, echo.resolution_code) == ("resolved", "cause_settled")
    assert open_cases() == []


def test_a_reconciliation_duplicate_merged_into_the_other_record_stays_settled(sandbox):
    event = ingest("dup-ref", message="A quote please.")
    enquiry = op(event, "create_enquiry")
    assert operation_execute(operation_id=enquiry.pk) == "succeeded"
    enquiry.refresh_from_db()
    ours = enquiry.destination_ref
    sandbox.capabilities(unique_external_ref=False)
    theirs = sandbox.client.post(
        "/crm/records", json={"external_ref": enquiry.key, "name": "Ada", "message": "again"}
    ).json()["id"]
    reconcile(**period())
    (case,) = ReviewCase.objects.filter(kind=ReviewCase.Kind.RECON_DUPLICATE, status="open")

    # The staff's record (it has their notes) stays; Onefold's goes into it.
    merged(case, survivor=theirs, duplicate=ours)

    assert sum(run_summary(reconcile(**period(), dry_run=True))["findings"].values()) == 0
    run = reconcile(**period())
    assert sum(run.findings_total.values()) == 0
    assert open_cases() == []


def test_a_record_merged_twice_is_followed_to_where_it_is_now(sandbox):
    """A merged into B, then B into C: both submissions' enquiries live in C."""
    a, b, c = (ingest(f"chain-{n}", message=f"Message {n}") for n in range(3))
    refs = []
    for event in (a, b, c):
        enquiry = op(event, "create_enquiry")
        assert operation_execute(operation_id=enquiry.pk) == "succeeded"
        enquiry.refresh_from_db()
        refs.append(enquiry.destination_ref)
    ref_a, ref_b, ref_c = refs
    merged(records_case(ref_a, ref_b, b), survivor=ref_b, duplicate=ref_a)
    merged(records_case(ref_b, ref_c, c), survivor=ref_c, duplicate=ref_b)

    run = reconcile(**period())

    assert sum(run.findings_total.values()) == 0
    assert open_cases() == []


def test_the_record_a_merge_kept_removed_by_hand_is_still_reported(sandbox):
    """Onefold's merge explains only where the record went: once the record it went
    into is deleted in the CRM, both submissions' enquiries are gone."""
    case = duplicate_case(sandbox)
    survivor, duplicate = case.record_ids
    merged(case, survivor=survivor, duplicate=duplicate)
    sandbox.client.delete(f"/crm/records/{survivor}").raise_for_status()

    run = reconcile(**period())

    removed = ReconciliationFinding.objects.filter(run=run, kind="removed")
    assert sorted(f.operation.destination_ref for f in removed) == sorted([survivor, duplicate])
    assert [kind for kind, _ in open_cases()] == ["recon_removed", "recon_removed"]
