"""Manual replay: the original key, the same guards, never a second effect."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import AuditEntry, ReviewCase
from idempotency_core.review.refusals import ReplayRefusedError
from idempotency_core.review.replay import operation_replay
from tests.factories import ingest, op, run_pipeline
from tests.support.case_kinds import held_duplicate

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_user() -> User:
    user = User.objects.create_user("replayer", is_staff=True)
    user.groups.add(Group.objects.get(name="Replay admins"))
    return User.objects.get(pk=user.pk)


@pytest.fixture
def reviewer() -> User:
    user = User.objects.create_user("reviewer", is_staff=True)
    user.groups.add(Group.objects.get(name="Reviewers"))
    return User.objects.get(pk=user.pk)


def test_replay_refuses_a_succeeded_operation(sandbox, admin_user):
    event = ingest("done")
    run_pipeline(event)
    for operation in event.operations.all():
        with pytest.raises(ReplayRefusedError, match="already succeeded"):
            operation_replay(operation_id=operation.pk, actor=admin_user, reason="try")
    assert sandbox.stats()["records"] == 1


def test_replay_refuses_running_and_scheduled_operations(sandbox, admin_user):
    event = ingest("scheduled")
    with pytest.raises(ReplayRefusedError, match="already scheduled"):
        operation_replay(operation_id=op(event, "create_enquiry").pk, actor=admin_user, reason="x")
    op(event, "create_enquiry").__class__.objects.filter(pk=op(event, "create_enquiry").pk).update(
        status="running",
        claim_token="00000000-0000-0000-0000-000000000001",
        lease_expires_at="2030-01-01T00:00:00Z",
    )
    with pytest.raises(ReplayRefusedError, match="running"):
        operation_replay(operation_id=op(event, "create_enquiry").pk, actor=admin_user, reason="x")


def test_replay_needs_the_permission_and_a_reason(sandbox, admin_user):
    sandbox.fault("create_record", "http_400")
    event = ingest("perm")
    operation_execute(operation_id=op(event, "create_enquiry").pk)
    target = op(event, "create_enquiry").pk
    outsider = User.objects.create_user("outsider", is_staff=True)
    with pytest.raises(PermissionDenied):
        operation_replay(operation_id=target, actor=outsider, reason="please")
    with pytest.raises(ReplayRefusedError, match="reason"):
        operation_replay(operation_id=target, actor=admin_user, reason="  ")
    assert not AuditEntry.objects.filter(action="replay").exists()


def test_replay_after_a_permanent_failure_reuses_the_original_key(sandbox, admin_user):
    sandbox.fault("create_record", "http_400")
    event = ingest("fixed")
    enquiry = op(event, "create_enquiry")
    assert operation_execute(operation_id=enquiry.pk) == "permanent"
    case = ReviewCase.objects.get(operation=enquiry)
    operation_replay(operation_id=enquiry.pk, actor=admin_user, reason="CRM field fixed")
    case.refresh_from_db()
    # Queued is not done: the case waits in progress until the replayed attempt works.
    assert (case.status, case.resolution_code) == ("in_progress", "")
    run_pipeline_rest(event)
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "replayed")
    stats = sandbox.stats()
    assert stats["records_by_external_ref"] == {enquiry.key: 1}
    attempts = list(op(event, "create_enquiry").attempts.order_by("number"))
    # The timeline says who made each attempt due: the pipeline, then the admin's replay.
    assert [(a.trigger, a.triggered_by, a.outcome) for a in attempts] == [
        ("worker", None, "permanent"),
        ("replay", admin_user, "succeeded"),
    ]
    entry = AuditEntry.objects.get(action="replay")
    assert entry.actor == admin_user and entry.reason == "CRM field fixed"
    assert entry.details["operation_key"] == enquiry.key


def run_pipeline_rest(event) -> None:
    for operation in event.operations.order_by("position"):
        operation_execute(operation_id=operation.pk)


def test_replay_after_an_unrecognisable_ambiguity_needs_a_destination_check(sandbox, admin_user):
    sandbox.capabilities(idempotency_keys=False, unique_external_ref=False, lookup=False)
    sandbox.fault("create_record", "drop_response_after_commit")
    event = ingest("unclear")
    enquiry = op(event, "create_enquiry")
    assert operation_execute(operation_id=enquiry.pk) == "ambiguous"
    assert ReviewCase.objects.get(operation=enquiry).kind == "ambiguous_outcome"
    with pytest.raises(ReplayRefusedError, match="could be done twice"):
        operation_replay(operation_id=enquiry.pk, actor=admin_user, reason="retry")
    assert sandbox.stats()["records"] == 1


def test_replay_after_exhausted_ambiguity_looks_up_instead_of_creating(
    sandbox, admin_user, settings
):
    # Lookup only, no uniqueness: a blind repeat would create a second record.
    settings.ONEFOLD_MAX_ATTEMPTS = 1
    sandbox.capabilities(idempotency_keys=False, unique_external_ref=False, lookup=True)
    sandbox.fault("create_record", "drop_response_after_commit")
    event = ingest("exhausted")
    enquiry = op(event, "create_enquiry")
    assert operation_execute(operation_id=enquiry.pk) == "ambiguous"
    assert ReviewCase.objects.get(operation=enquiry).kind == "retries_exhausted"
    operation_replay(operation_id=enquiry.pk, actor=admin_user, reason="worker gave up")
    assert operation_execute(operation_id=enquiry.pk) == "succeeded"
    replayed = op(event, "create_enquiry").attempts.order_by("-number").first()
    assert replayed.adopted and replayed.recovery == "lookup_first"
    assert sandbox.stats()["records"] == 1


def test_replay_of_a_later_step_waits_for_the_earlier_one(sandbox, admin_user):
    sandbox.fault("create_record", "http_400")
    event = ingest("order")
    operation_execute(operation_id=op(event, "create_enquiry").pk)
    op(event, "assign_task").__class__.objects.filter(pk=op(event, "assign_task").pk).update(
        status="needs_review"
    )
    with pytest.raises(ReplayRefusedError, match="earlier step"):
        operation_replay(operation_id=op(event, "assign_task").pk, actor=admin_user, reason="x")


@pytest.mark.parametrize("who", ["admin_user", "reviewer"])
def test_replay_refuses_a_submission_held_as_a_possible_repeat(sandbox, request, who):
    """A held duplicate is decided by "Same enquiry" or "Separate enquiry": a replay,
    one or in bulk, by anyone, would write it without that decision."""
    case = held_duplicate("held-replay")
    actor = request.getfixturevalue(who)
    with pytest.raises(ReplayRefusedError, match="Same enquiry"):
        operation_replay(
            operation_id=case.operation_id, actor=actor, reason="try", destination_checked=True
        )
    assert sandbox.stats()["records"] == 1
    assert not AuditEntry.objects.filter(action="replay").exists()
