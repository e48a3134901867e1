"""Every console page with data on it: cases of every kind and settled ones.

Moved from tests/review_console/test_glossary.py so the glossary test and the
browser tests (axe-core, phone width) open the same pages: cases of every kind (the
common ones made for real through the engine and the sandbox, the rest opened
through the service the engine and reconciliation use), settled ones with their
resolutions, a submission whose email was accepted, one without an address (its
confirmation skipped), and an unreadable delivery kept for a corrected map, with its
source's field-map editor and a preview. A Settings admin's pages are apart
(`settings_admin_pages`): their dashboard shows a card only they get.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.subjects import operation_subject
from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.models import Destination, Event, ReconciliationRun, ReviewCase
from idempotency_core.review.cases import (
    RESOLUTION_CODES,
    case_close,
    case_mark_not_duplicate,
    case_take_ownership,
)
from idempotency_core.review.email_cases import email_receipt_confirm
from idempotency_core.review.hand_on import case_hand_on
from idempotency_core.review.replay import operation_replay
from review_console import glossary
from review_console.cases.causes import case_cause
from review_console.models import BulkReplayJob
from tests.factories import (
    completed,
    configured,
    duplicate_case,
    ingest,
    make_user,
    op,
    permanent_case,
)
from tests.support.senders import ANOTHER_FORMS_MAP, jotform_tutoring


def open_case(kind: str, key: str, evidence: dict) -> ReviewCase:
    event = ingest(key, message=f"Message of {key}.")
    operation = op(event, "create_enquiry")
    case, _ = review_case_open(
        kind=kind,
        subject=operation_subject(operation.pk),
        summary=f"create_enquiry: {kind} found (HTTP 500 from the CRM); recovery lookup_first.",
        operation=operation,
        evidence=evidence,
        system="test",
    )
    return case


def interrupted_email(sandbox, key: str) -> ReviewCase:
    event = ingest(key, message=f"Message of {key}.")
    for step in ("create_enquiry", "assign_task"):
        assert operation_execute(operation_id=op(event, step).pk) == "succeeded"
    sandbox.fault("send_email", "drop_response_after_commit")
    operation_execute(operation_id=op(event, "send_confirmation").pk)
    return ReviewCase.objects.get(event=event, kind="interrupted_send")


def unreadable_delivery() -> ReviewCase:
    """The Jotform tutoring delivery, kept unreadable under another form's map."""
    source, _ = source_get_or_create(name="gl-tutoring")
    path = source_hook_configure(source=source, profile="jotform").path
    source.profile_overrides = ANOTHER_FORMS_MAP
    source.save(update_fields=["profile_overrides"])
    sample = jotform_tutoring()
    response = Client().post(path, sample.body, content_type=sample.content_type)
    assert response.status_code == 202, response.content
    return ReviewCase.objects.get(event__source=source, kind="unreadable_submission")


def without_address(key: str) -> Event:
    """A submission with a name and a phone but no email: processed, not confirmed."""
    event = ingest(key, contact={"name": "Ada Lovelace", "phone": "+44 20 7946 0000"})
    for operation in event.operations.order_by("position"):
        operation_execute(operation_id=operation.pk)
    return event


def seed(sandbox, ambiguous_case, users) -> dict:
    """Cases of every kind, settled ones of every resolution, a completed submission."""
    rex = users["replay_admin"]
    done = completed("gl-done")
    cases = {
        "ambiguous_outcome": ambiguous_case("gl-amb"),
        "suspected_duplicate": duplicate_case(sandbox, key_a="gl-dup-a", key_b="gl-dup-b"),
        "permanent_failure": permanent_case("gl-perm"),
    }
    cases["interrupted_send"] = interrupted_email(sandbox, "gl-mail")
    cases["unreadable_submission"] = unreadable_delivery()
    evidence = {
        "attempt": 3,
        "outcome": "ambiguous",
        "reply": "HTTP 500",
        "message": "HTTP 500 from the CRM",
        "held_operations": [{"id": 1, "step": "assign_task"}],
        "record_ids": ["rec_000001", "rec_000002"],
        "external_ref": "opk_0123456789abcdef0123",
    }
    for kind in glossary.CASE_KINDS:
        if kind not in cases:
            cases[kind] = open_case(kind, f"gl-{kind.replace('_', '-')}", evidence)
    # Settled: one of each way a case ends.
    replayed = permanent_case("gl-replayed")
    operation_replay(operation_id=replayed.operation_id, actor=rex, reason="CRM fixed")
    assert operation_execute(operation_id=replayed.operation_id) == "succeeded"
    for code in RESOLUTION_CODES:
        case_close(
            case_id=permanent_case(f"gl-close-{code.replace('_', '-')}").pk,
            actor=rex,
            resolution_code=code,
            reason="Closed after a call with the customer.",
        )
    other_duplicate = duplicate_case(sandbox, key_a="gl-nd-a", key_b="gl-nd-b", evidence="records")
    case_mark_not_duplicate(case_id=other_duplicate.pk, actor=rex, reason="two requests")
    received = interrupted_email(sandbox, "gl-mail-ok")
    email_receipt_confirm(case_id=received.pk, actor=rex, reason="she has it")
    return {"cases": cases, "done": done, "no_address": without_address("gl-no-address")}


# A form's configured effects, so that the settings pages show each part.
FORMS = {
    "contact": {
        "confirmation": {"subject": "Thanks, {{ contact.name }}", "send": True},
        "task": {"title": "Call {{ contact.name }}"},
    }
}


def _group_and_settings_urls() -> list[tuple[str, str, dict | None]]:
    """The queue narrowed to a cause's group (a second refusal like the seeded one makes
    it), and the settings pages of a configured form."""
    cause, count = case_cause(permanent_case("gl-perm-again")) or (None, 0)
    assert cause is not None and count >= 2
    configured(FORMS)
    return [
        ("get", reverse("console:case-list") + "?" + urlencode({"cause": cause.token()}), None),
        ("get", reverse("console:settings"), None),
        ("get", reverse("console:settings-form", args=["website", "contact"]), None),
        ("get", reverse("console:settings-section", args=["website", "contact", "task"]), None),
        ("get", reverse("console:settings-versions"), None),
        ("get", reverse("console:settings-version", args=[1]), None),
        ("get", reverse("console:journey", args=["website", "contact"]), None),
    ]


def page_urls(seeded: dict, client: Client) -> list[tuple[str, str, dict | None]]:
    """(method, url, data) of every console page: GET pages and confirmation steps."""
    urls = _group_and_settings_urls()
    now = timezone.now()
    run = ReconciliationRun.objects.create(
        destination=Destination.objects.get(name="crm"),
        since=now - timedelta(days=1),
        until=now,
        as_of=now,
        listing_since=now - timedelta(days=1),
        listing_until=now,
    )
    job = BulkReplayJob.objects.create(created_by=User.objects.get(username="rex"), reason="x")
    source = Event.objects.filter(key="gl-done").values_list("source_id", flat=True).get()
    urls += [
        ("get", reverse("console:dashboard"), None),
        ("get", reverse("console:case-list"), None),
        ("get", reverse("console:case-list") + "?status=resolved&status=closed", None),
        ("get", reverse("console:audit-list"), None),
        ("get", reverse("console:search") + "?q=ada@example.com", None),
        ("get", reverse("console:bulk-replay-list"), None),
        ("get", reverse("console:notifications"), None),
        ("get", reverse("console:settings-review"), None),
        ("get", reverse("console:bulk-replay-detail", args=[job.pk]), None),
        ("get", reverse("console:reconciliation-runs"), None),
        ("get", reverse("console:reconciliation-run", args=[run.pk]), None),
        ("get", reverse("console:source-list"), None),
        ("get", reverse("console:source-detail", args=[source]), None),
        ("get", reverse("console:submission-detail", args=[seeded["done"].pk]), None),
        ("get", reverse("console:submission-detail", args=[seeded["no_address"].pk]), None),
    ]
    tutoring = seeded["cases"]["unreadable_submission"].event.source_id
    # Written as the editor's choices are (compact JSON paths), single values only: the
    # accessibility test posts them without encoding.
    picks = {
        "name_first": '["q3_studentsName","first"]',
        "name_last": '["q3_studentsName","last"]',
        "extras": '["q4_subject"]',
    }
    urls += [
        ("get", reverse("console:source-detail", args=[tutoring]), None),
        ("get", reverse("console:source-field-map", args=[tutoring]), None),
        ("post", reverse("console:source-field-map-preview", args=[tutoring]), picks),
        ("post", reverse("console:source-field-map-apply", args=[tutoring]), {}),
    ]
    for case in ReviewCase.objects.all():
        urls.append(("get", reverse("console:case-detail", args=[case.pk]), None))
        if case.event_id:
            urls.append(("get", reverse("console:submission-detail", args=[case.event_id]), None))
    duplicate = seeded["cases"]["suspected_duplicate"]
    urls.append(("get", reverse("console:case-compare", args=[duplicate.pk]), None))
    for name, kind in (
        ("console:case-replay", "permanent_failure"),
        ("console:case-resolve", "ambiguous_outcome"),
        ("console:case-close", "recon_stuck"),
        ("console:case-not-duplicate", "suspected_duplicate"),
        ("console:case-email", "interrupted_send"),
        ("console:case-hand-on", "permanent_failure"),
    ):
        urls.append(("post", reverse(name, args=[seeded["cases"][kind].pk]), {}))
    return urls


# What the *Next case* card of a Settings admin's dashboard says (dashboard.html, shown
# to those who fix cases without taking them): the scans check it is on the page they
# opened, or a dashboard without the card would pass for one with it.
ROUTED_CARD = "sent to you or your group wait"


def settings_admin_pages(seeded: dict, reviewer: User) -> tuple[User, list[tuple[str, str, dict]]]:
    """A Settings admin, and what they open once a Reviewer could not read the seeded
    unreadable submission and handed it on to their group: the dashboard, whose *Next
    case* card links to that case, and the case's page. Pages of this user alone: a
    superuser takes cases, so their dashboard never has the card."""
    admin = make_user("sian", groups=("Settings admins",))
    case = seeded["cases"]["unreadable_submission"]
    case_take_ownership(case_ids=[case.pk], actor=reviewer)
    case_hand_on(case_id=case.pk, actor=reviewer, reason="I cannot change how a form is read.")
    return admin, [
        ("get", reverse("console:dashboard"), {}),
        ("get", reverse("console:case-detail", args=[case.pk]), {}),
    ]
