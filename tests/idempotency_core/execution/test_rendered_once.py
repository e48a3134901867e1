"""Rendered once: an operation's content is stored before its first call and sent as
stored by every retry, recovery and replay; "send again" is new and renders afresh.

Through the engine as a worker runs it (`operation_execute`, `operation_execute_chain`)
against the sandbox over loopback, with the configuration applied through its service
in between attempts, as a person would change it while a retry waits.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idempotency_core.configuration.versions import ConfigVersion, config_current
from idempotency_core.execution.content import content_preview
from idempotency_core.execution.engine import operation_execute, operation_execute_chain
from idempotency_core.models import AssigneeTurn, Event, Operation, ReviewCase
from idempotency_core.reconciliation.retention import payloads_purge
from idempotency_core.review.email_cases import email_send_again
from idempotency_core.review.replay import operation_replay
from tests.factories import completed, configured, ingest, make_user, op

pytestmark = pytest.mark.django_db


def subject(text: str) -> dict[str, object]:
    return {"*": {"confirmation": {"subject": text}}}


def run_now(operation: Operation) -> str | None:
    Operation.objects.filter(pk=operation.pk).update(next_attempt_at=timezone.now())
    return operation_execute(operation_id=operation.pk)


def ready_confirmation(key: str) -> Operation:
    event = ingest(key, contact_from_key=True)
    for step in ("create_enquiry", "assign_task"):
        assert operation_execute(operation_id=op(event, step).pk) == "succeeded"
    return op(event, "send_confirmation")


def subjects(sandbox) -> dict[str, str]:
    return {m["rcpt_to"][0]: m["subject"] for m in sandbox.messages()}


def test_a_retry_after_a_template_change_sends_the_original_and_a_new_one_the_new(sandbox):
    configured(subject("Original subject"))
    first = ready_confirmation("once-1")
    sandbox.fault("send_email", "http_503")  # SMTP 421 at RCPT: certainly not sent
    assert operation_execute(operation_id=first.pk) == "retryable"
    first.refresh_from_db()
    assert first.content["subject"] == "Original subject"  # stored before the call

    configured(subject("Changed subject"))
    assert run_now(first) == "succeeded"
    second = ready_confirmation("once-2")
    assert operation_execute(operation_id=second.pk) == "succeeded"

    assert subjects(sandbox) == {
        "once-1@example.com": "Original subject",
        "once-2@example.com": "Changed subject",
    }


def test_a_round_robin_turn_is_taken_once_however_often_the_task_is_tried(sandbox):
    configured({"*": {"task": {"assignee": {"round_robin": ["ana", "ben"]}}}})
    first = ingest("rr-1", contact_from_key=True)
    assert operation_execute(operation_id=op(first, "create_enquiry").pk) == "succeeded"
    task = op(first, "assign_task")
    sandbox.fault("create_task", "http_503", times=2)
    assert operation_execute(operation_id=task.pk) == "retryable"
    assert run_now(task) == "retryable"
    assert run_now(task) == "succeeded"
    second = ingest("rr-2", contact_from_key=True)
    assert operation_execute(operation_id=op(second, "create_enquiry").pk) == "succeeded"
    assert operation_execute(operation_id=op(second, "assign_task").pk) == "succeeded"

    assert AssigneeTurn.objects.get(scope="website/*").turns == 2
    assignees = {
        t["external_ref"]: t["assignee"] for r in sandbox.records() for t in sandbox.tasks(r["id"])
    }
    assert assignees == {op(first, "assign_task").key: "ana", op(second, "assign_task").key: "ben"}


def test_a_due_date_counts_from_the_first_attempt(sandbox):
    configured({"*": {"task": {"due_in_hours": 24}}})
    event = ingest("due-1")
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "succeeded"
    task = op(event, "assign_task")
    sandbox.fault("create_task", "http_503")
    before = timezone.now()
    assert operation_execute(operation_id=task.pk) == "retryable"
    assert run_now(task) == "succeeded"
    task.refresh_from_db()
    due = timezone.datetime.fromisoformat(task.content["due_at"])
    assert before + timedelta(hours=24) <= due <= timezone.now() + timedelta(hours=24)
    (record,) = sandbox.records()
    (sent,) = sandbox.tasks(record["id"])
    assert sent["due_at"] == due.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_the_chain_stores_later_steps_content_in_the_statements_it_already_runs(sandbox):
    configured(subject("Chained"))
    event = ingest("chain-1")
    first = op(event, "create_enquiry")
    with CaptureQueriesContext(connection) as queries:
        assert operation_execute_chain(operation_id=first.pk, seconds=60) == "succeeded"
    stores = [q for q in queries.captured_queries if 'SET "content" = ' in q["sql"]]
    assert len(stores) == 1  # the first step's own; the next two came with their claims
    contents = dict(event.operations.values_list("step", "content__kind"))
    assert contents == {
        "create_enquiry": "enquiry",
        "assign_task": "task",
        "send_confirmation": "confirmation",
    }
    assert [m["subject"] for m in sandbox.messages()] == ["Chained"]


def test_a_round_robin_task_in_a_chain_takes_its_turn_with_its_own_store(sandbox):
    configured({"*": {"task": {"assignee": {"round_robin": ["ana", "ben"]}}}})
    event = ingest("chain-rr")
    with CaptureQueriesContext(connection) as queries:
        operation_execute_chain(operation_id=op(event, "create_enquiry").pk, seconds=60)
    stores = [q for q in queries.captured_queries if 'SET "content" = ' in q["sql"]]
    assert len(stores) == 2  # the enquiry's, and the task's with its turn
    assert op(event, "assign_task").content["assignee"] == "ana"
    assert AssigneeTurn.objects.get(scope="website/*").turns == 1


def test_a_replay_sends_the_stored_content(sandbox):
    configured(subject("Before the replay"))
    confirmation = ready_confirmation("replay-1")
    sandbox.fault("send_email", "http_400")  # 550: refused, a case
    assert operation_execute(operation_id=confirmation.pk) == "permanent"
    configured(subject("After the change"))
    admin = make_user("replayer", groups=("Replay admins",))
    operation_replay(
        operation_id=confirmation.pk, actor=User.objects.get(pk=admin.pk), reason="fixed"
    )
    assert run_now(confirmation) == "succeeded"
    assert [m["subject"] for m in sandbox.messages()] == ["Before the replay"]


def test_send_again_is_a_new_operation_rendered_afresh(sandbox):
    configured(subject("First send"))
    confirmation = ready_confirmation("again-1")
    sandbox.fault("send_email", "drop_response_after_commit")
    operation_execute(operation_id=confirmation.pk)
    case = ReviewCase.objects.get(operation=confirmation, kind=ReviewCase.Kind.INTERRUPTED_SEND)
    configured(subject("Second send"))
    rita = make_user("rita", groups=("Reviewers",))
    again = email_send_again(case_id=case.pk, actor=rita, reason="not received")
    assert operation_execute(operation_id=again.pk) == "succeeded"
    assert [m["subject"] for m in sandbox.messages()] == ["First send", "Second send"]
    assert Operation.objects.get(pk=confirmation.pk).content["subject"] == "First send"


def test_the_content_is_purged_with_the_payload(sandbox, settings):
    event = ingest("purge-1")
    for operation in event.operations.order_by("position"):
        assert operation_execute(operation_id=operation.pk) == "succeeded"
    assert not event.operations.filter(content__isnull=True).exists()
    old = timezone.now() - timedelta(days=settings.ONEFOLD_PAYLOAD_RETENTION_DAYS + 1)
    Event.objects.filter(pk=event.pk).update(received_at=old)
    assert payloads_purge().purged == 1
    assert not event.operations.filter(content__isnull=False).exists()


def test_a_preview_renders_a_kept_submission_under_a_version_storing_nothing(sandbox):
    configured({"*": {"task": {"assignee": {"round_robin": ["ana", "ben"]}}}})
    event = completed("preview-1")
    draft = version_of({"*": {"confirmation": {"subject": "Draft for {{ contact.first_name }}"}}})
    preview = content_preview(event=event, step="send_confirmation", version=draft)
    assert preview is not None and preview["subject"] == "Draft for Ada"
    assert preview["text"].endswith("someone will be in touch.\n")
    assert op(event, "create_enquiry").destination_ref not in preview["text"]
    task = content_preview(event=event, step="assign_task", version=config_current())
    assert task is not None and task["assignee"] == "ben"  # the next turn, not taken
    assert AssigneeTurn.objects.get(scope="website/*").turns == 1
    assert op(event, "send_confirmation").content["subject"] == "We received your enquiry"


def version_of(forms: dict[str, object]) -> ConfigVersion:
    return ConfigVersion(99, {"sources": {"website": {"forms": forms}}})
