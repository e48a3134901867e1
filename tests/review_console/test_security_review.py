"""The outside security review's findings F3, F4, F8, F9 and F11.

Each test failed before its fix:

- F3: a NUL in a bulk replay's filter key was a 500 (PostgreSQL's jsonb cannot hold
  it, and its server log then quoted the failed INSERT, the filter's email with it);
  it is refused with 400 and nothing is stored.
- F4: a bulk replay filtered by a customer's email stored the filter as typed, so a
  Reviewer without contact rights read the address in the audit trail and its CSV;
  the stored filter masks it, and the replay still covers what it matched.
- F8: resolving an `assign_task` case accepted any task id, another customer's too;
  the task must be the one this submission made, under this submission's enquiry.
- F9: a name typed in the search box reached the access log in clear; it is
  redacted, as addresses are.
- F11: every Reviewer saw each signing secret's first 6 characters, and 8-character
  secrets were accepted; prefixes are shown only to those who manage sources (and
  only 4 characters), and a secret needs 32 characters (RFC 2104, section 3: a key
  shorter than the hash's output, 32 bytes for SHA-256, is strongly discouraged).
"""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import (
    InvalidProfileError,
    source_get_or_create,
    source_hook_configure,
    source_secret_add,
)
from idempotency_core.models import AuditEntry, Operation, ReviewCase
from idempotency_core.platform.logfilters import RedactSecrets
from idempotency_core.review.cases import case_mark_resolved
from idempotency_core.review.refusals import CaseActionRefusedError
from integrations.sandbox.adapter import SandboxCrm
from review_console.cases.bulk import bulk_replay_run
from review_console.models import BulkReplayJob
from tests.factories import ingest, op, permanent_case

pytestmark = pytest.mark.django_db

LONG_SECRET = "a-signing-secret-long-enough-for-hmac-sha256"


def client_as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# -- F3 ---------------------------------------------------------------------------------


def test_f3_a_nul_in_a_bulk_replay_filter_key_is_refused_400_and_nothing_is_stored(users):
    permanent_case("f3-1")
    client = client_as(users["replay_admin"])
    response = client.post(
        reverse("console:bulk-replay-new"),
        {
            "kind\x00evil": "permanent_failure",
            "q": "ada@example.com",
            "confirm": "yes",
            "reason": "CRM fixed",
        },
    )
    assert response.status_code == 400
    assert not BulkReplayJob.objects.exists()
    assert not AuditEntry.objects.filter(action="bulk_replay_requested").exists()
    value = client.post(
        reverse("console:bulk-replay-new"),
        {"q": "ada\x00@example.com", "confirm": "yes", "reason": "CRM fixed"},
    )
    assert value.status_code == 400 and not BulkReplayJob.objects.exists()
    api = client.post(
        "/console/api/bulk-replays/",
        {"filter": {"kind\u0000x": ["permanent_failure"]}, "reason": "CRM fixed"},
        content_type="application/json",
    )
    assert api.status_code == 400 and not BulkReplayJob.objects.exists()


# -- F4 ---------------------------------------------------------------------------------


def test_f4_a_bulk_replay_filtered_by_an_email_never_stores_the_address(users, sandbox):
    # A sender whose submission id is the customer's address: the queue's exact search
    # finds the case by it, and a bulk replay may be started from that search.
    case = permanent_case("grace@example.com")
    permanent_case("f4-other")
    admin = client_as(users["replay_admin"])
    admin.post(
        reverse("console:bulk-replay-new"),
        {"q": "grace@example.com", "confirm": "yes", "reason": "CRM fixed"},
    )
    job = BulkReplayJob.objects.get()
    while bulk_replay_run(job_id=job.pk, chunk_seconds=0.5) != "finished":
        pass
    job.refresh_from_db()
    # What it matched was replayed, that case only...
    assert list(job.items.values_list("case_id", flat=True)) == [case.pk]
    assert Operation.objects.get(pk=case.operation_id).status == "retry_scheduled"
    # ...and the address is nowhere a Reviewer reads: the audit trail, its CSV, the job.
    reviewer = client_as(users["reviewer"])
    entry = AuditEntry.objects.get(action="bulk_replay_requested")
    seen = [
        str(entry.details),
        reviewer.get(reverse("console:audit-list")).content.decode(),
        b"".join(reviewer.get(reverse("console:audit-export")).streaming_content).decode(),
        reviewer.get(reverse("console:bulk-replay-detail", args=[job.pk])).content.decode(),
        str(reviewer.get(f"/console/api/bulk-replays/{job.pk}/").json()),
        str(job.filter_params) + job.filter_description,
    ]
    for text in seen:
        assert "grace@example.com" not in text and "grace%40example.com" not in text
    assert "g***@example.com" in str(entry.details)


# -- F8 ---------------------------------------------------------------------------------


def _refused_task(sandbox, key: str) -> ReviewCase:
    event = ingest(key, contact_from_key=True, message=f"Task {key}")
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "succeeded"
    sandbox.fault("create_task", "http_400")
    assert operation_execute(operation_id=op(event, "assign_task").pk) == "permanent"
    return ReviewCase.objects.get(event=event, kind="permanent_failure")


def test_f8_a_task_case_is_resolved_only_with_this_submission_s_own_task(users, sandbox):
    mine = _refused_task(sandbox, "f8-mine")
    other = ingest("f8-other", contact_from_key=True, message="Another customer")
    for step in ("create_enquiry", "assign_task"):
        assert operation_execute(operation_id=op(other, step).pk) == "succeeded"
    someone_elses_task = op(other, "assign_task").destination_ref
    rita = users["reviewer"]
    with pytest.raises(CaseActionRefusedError, match="not the task this submission made"):
        case_mark_resolved(
            case_id=mine.pk, actor=rita, destination_ref=someone_elses_task, reason="found it"
        )
    mine.refresh_from_db()
    assert mine.status == "open"
    assert Operation.objects.get(pk=mine.operation_id).status == "needs_review"
    # Staff made the task by hand in the CRM, with this step's reference: that one settles.
    task = op(mine.event, "assign_task")
    made = SandboxCrm(sandbox.url, timeout=5).create_task(
        record_id=op(mine.event, "create_enquiry").destination_ref,
        external_ref=task.key,
        title="Call back",
        assignee="ana",
    )
    resolved = case_mark_resolved(
        case_id=mine.pk, actor=rita, destination_ref=made.ref, reason="made it by hand"
    )
    assert resolved.status == "resolved"
    entry = AuditEntry.objects.get(case=mine, action="case_resolved")
    assert entry.details["verification"] == "task_of_this_enquiry"


def test_f8_a_typed_task_id_that_does_not_exist_is_refused(users, sandbox):
    case = _refused_task(sandbox, "f8-none")
    with pytest.raises(CaseActionRefusedError, match="not the task this submission made"):
        case_mark_resolved(
            case_id=case.pk, actor=users["reviewer"], destination_ref="task_999999", reason="x"
        )


# -- F9 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        '"GET /console/search/?q=Grace+Hopper HTTP/1.1" 200 5120',
        '"GET /console/search/?q=Grace%20Hopper&page=2 HTTP/1.1" 200 5120',
        '127.0.0.1 - rita "GET /console/cases/?q=Grace+Hopper HTTP/1.1" 200',
    ],
)
def test_f9_a_name_searched_for_never_reaches_the_access_log(line):
    record = logging.LogRecord("django.server", logging.INFO, __file__, 1, "%s", (line,), None)
    RedactSecrets().filter(record)
    message = record.getMessage()
    assert "Grace" not in message and "Hopper" not in message
    assert "/console/" in message and "HTTP/1.1" in message  # the line is still useful


# -- F11 --------------------------------------------------------------------------------


def test_f11_a_short_signing_secret_is_refused(db):
    source, _ = source_get_or_create(name="f11-short")
    for short in ("12345678", "x" * 31):
        with pytest.raises(InvalidProfileError, match="32 characters"):
            source_secret_add(source=source, secret=short)
    assert source_secret_add(source=source, secret="y" * 32).prefix


def test_f11_only_those_who_manage_sources_see_a_secret_s_first_characters(users):
    source, _ = source_get_or_create(name="f11-page")
    source_hook_configure(source=source, profile="typeform", secrets=[LONG_SECRET])
    url = reverse("console:source-detail", args=[source.pk])
    reviewer = client_as(users["reviewer"]).get(url).content.decode()
    assert LONG_SECRET[:4] not in reviewer and "1 signing secret" in reviewer
    manager = users["replay_admin"]
    manager.user_permissions.add(Permission.objects.get(codename="change_source"))
    shown = client_as(manager).get(url).content.decode()
    assert f"{LONG_SECRET[:4]}…" in shown  # four characters shown (the form keeps its prefix)
    # The audit trail names a secret by its prefix only to them too.
    client_as(manager).post(
        reverse("console:source-secret-add", args=[source.pk]),
        {"confirm": "yes", "secret": "z" * 40, "reason": "rotation"},
    )
    trail = client_as(users["reviewer"]).get(reverse("console:audit-list")).content.decode()
    csv = b"".join(
        client_as(users["reviewer"]).get(reverse("console:audit-export")).streaming_content
    ).decode()
    assert "zzzz" not in trail and "zzzz" not in csv
    assert "zzzz" in client_as(manager).get(reverse("console:audit-list")).content.decode()
