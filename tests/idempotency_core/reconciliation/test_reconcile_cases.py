"""Reconciliation and the cases already in review: a finding about a submission that a
person is already asked about is evidence on that case, never a second case; and a
reconciliation case whose cause is settled is resolved by Onefold."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_duplicates_set
from idempotency_core.models import AuditEntry, Event, Operation, ReviewCase, Source
from idempotency_core.reconciliation.compare import reconcile, run_summary
from idempotency_core.review.cases import case_close
from idempotency_core.review.held_duplicates import held_duplicate_link
from idempotency_core.tasks import operation_run, sweep
from tests.factories import duplicate_case, ingest, make_user, op

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("unhurried_chain")]

MESSAGE = "Please quote for a kitchen refit."


def period() -> dict:
    now = timezone.now()
    return {"since": now - timedelta(days=1), "until": now + timedelta(minutes=1)}


def refused(key: str, sandbox) -> Event:
    event = ingest(key, message=f"Please call me about {key}.")
    sandbox.fault("create_record", "http_400")
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "permanent"
    return event


def held_duplicate() -> Event:
    source = Source.objects.get_or_create(name="website")[0]
    source_duplicates_set(source=source, policy="hold")
    first = ingest("held-first", message=MESSAGE)
    assert operation_run(op(first, "create_enquiry").pk) == "succeeded"
    second = ingest("held-second", message=MESSAGE)
    assert operation_run(op(second, "create_enquiry").pk) is None  # held, unwritten
    return second


def open_cases() -> list[ReviewCase]:
    return list(ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES).order_by("pk"))


def test_findings_about_cases_in_review_are_their_evidence_and_settled_with_them(sandbox):
    events = [refused(f"refused-{n}", sandbox) for n in range(3)]
    events.append(held_duplicate())
    before = open_cases()
    assert len(before) == 4
    assert {case.event_id for case in before} == {event.pk for event in events}

    run = reconcile(**period())

    assert run_summary(run)["findings"]["missing"] == 0  # none new: all were in review
    assert open_cases() == before
    for case in open_cases():
        (finding,) = case.evidence["reconciliation"]
        assert (finding["kind"], finding["reconciliation_run"]) == ("missing", run.pk)
        assert AuditEntry.objects.filter(case=case, action="reconciliation_evidence_added").exists()
    # A second run adds no second entry and no case.
    reconcile(**period())
    assert [len(case.evidence["reconciliation"]) for case in open_cases()] == [1, 1, 1, 1]

    reviewer = make_user("rita", groups=("Reviewers",))
    for case in before[:3]:
        case_close(case_id=case.pk, actor=reviewer, resolution_code="spam_or_test", reason="a test")
    held_duplicate_link(case_id=before[3].pk, actor=reviewer, reason="double click")
    reconcile(**period())
    assert open_cases() == []
    assert not ReviewCase.objects.filter(kind__startswith="recon_").exists()


def test_a_finding_about_either_submission_of_a_pair_in_review_is_that_case_s_evidence(sandbox):
    """A suspected duplicate's case is about two submissions (the later one is its
    event, the earlier only in its subject): the earlier's record deleted in the CRM
    while the case is open is evidence on it, in a dry run's counts too."""
    case = duplicate_case(sandbox)
    earlier_ref, _ = case.record_ids
    sandbox.client.delete(f"/crm/records/{earlier_ref}").raise_for_status()

    dry = reconcile(**period(), dry_run=True)
    assert dry.findings_total["removed"] == 1
    assert run_summary(dry)["findings"]["removed"] == 0  # none new: the pair is in review
    run = reconcile(**period())

    assert open_cases() == [case]
    (finding,) = ReviewCase.objects.get(pk=case.pk).evidence["reconciliation"]
    assert (finding["kind"], finding["reconciliation_run"]) == ("removed", run.pk)
    assert run_summary(run)["findings"] == run_summary(dry)["findings"]


def test_a_reconciliation_case_whose_step_was_cancelled_since_is_resolved_by_onefold(sandbox):
    """A finding opened as a case of its own (no case asked about its step then); the
    step is later cancelled by a decision about its submission elsewhere (as a held
    duplicate settled as "same enquiry" does): the sweeper resolves the case, saying
    why. (A step that works since settles its cases itself, as it succeeds.)"""
    event = ingest("later", message="Later.")
    enquiry = op(event, "create_enquiry")
    Operation.objects.filter(pk=enquiry.pk).update(status=Operation.Status.NEEDS_REVIEW)
    reconcile(**period())
    (case,) = ReviewCase.objects.filter(kind=ReviewCase.Kind.RECON_MISSING)
    assert case.status == "open"

    Operation.objects.filter(event=event).update(status=Operation.Status.CANCELLED)
    assert sweep()["reconciliation_cases_settled"] == 1

    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "cause_settled")
    assert "cancelled" in case.resolution_note
    entry = AuditEntry.objects.get(case=case, action="case_resolved")
    assert entry.actor_label == "system:reconciliation" and entry.actor is None
    assert sweep()["reconciliation_cases_settled"] == 0
    assert reconcile(**period()).findings_total["missing"] == 0


def test_a_case_page_never_asks_for_a_try_it_says_is_impossible(sandbox):
    """Until the sweeper settles it, a reconciliation case whose step was cancelled
    says there is nothing to try, to a Reviewer and to a Replay admin alike."""
    event = ingest("cancelled", message="Cancelled.")
    enquiry = op(event, "create_enquiry")
    Operation.objects.filter(pk=enquiry.pk).update(status=Operation.Status.NEEDS_REVIEW)
    reconcile(**period())
    (case,) = ReviewCase.objects.filter(kind=ReviewCase.Kind.RECON_MISSING)
    Operation.objects.filter(event=event).update(status=Operation.Status.CANCELLED)
    for groups in (("Reviewers",), ("Reviewers", "Replay admins")):
        client = Client()
        client.force_login(make_user("-".join(groups).lower().replace(" ", "_"), groups=groups))
        page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
        assert "Nothing is left to try" in page, groups
        assert "try it again" not in page and "ask a Replay admin" not in page, groups
