"""Email cases settled with what a person can know, counted in the sandbox's SMTP sink.

The cut-off send is made for real: the sink stores the message and drops the
answer, so Onefold cannot know it went out and opens an interrupted-send case.
The reviewer then says "the customer confirms receipt" (no made-up reference) or
"not received: send again" (a new send operation with its own key and Message-ID,
run by the engine: claim, attempt, outcome).
"""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import AuditEntry, Operation, ReviewCase
from tests.factories import ingest, make_user, op
from tests.support.processes import wait_for


def interrupted_email(sandbox, key: str) -> ReviewCase:
    event = ingest(key, message=f"Call me ({key}).")
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "succeeded"
    assert operation_execute(operation_id=op(event, "assign_task").pk) == "succeeded"
    sandbox.fault("send_email", "drop_response_after_commit")
    operation_execute(operation_id=op(event, "send_confirmation").pk)
    case = ReviewCase.objects.get(event=event, kind=ReviewCase.Kind.INTERRUPTED_SEND)
    assert sandbox.stats()["messages"] == 1  # it did go out; Onefold cannot know
    return case


def settle(client: Client, case: ReviewCase, outcome: str, reason: str = "Phoned her."):
    return client.post(
        reverse("console:case-email", args=[case.pk]),
        {"confirm": "yes", "outcome": outcome, "reason": reason},
    )


@pytest.fixture
def rita_client(db) -> Client:
    client = Client()
    client.force_login(make_user("rita", groups=("Reviewers",)))
    return client


@pytest.mark.django_db
def test_the_case_page_offers_the_customer_s_answers_not_a_reference(sandbox, rita_client):
    case = interrupted_email(sandbox, "mail-page")
    page = rita_client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert ">Customer has it<" in page and "Not received: send again…" in page
    assert reverse("console:case-resolve", args=[case.pk]) not in page
    # Step one of the confirmation: the reviewer's choice carried, a reason asked for.
    ask = rita_client.post(
        reverse("console:case-email", args=[case.pk]), {"outcome": "send_again"}
    ).content.decode()
    (chosen,) = re.findall(r'<input type="radio" name="outcome"[^>]*checked>', ask)
    assert 'value="send_again"' in chosen
    assert 'name="reason"' in ask


@pytest.mark.django_db
def test_customer_confirms_receipt_resolves_without_a_reference(sandbox, rita_client):
    case = interrupted_email(sandbox, "mail-ok")
    send = Operation.objects.get(pk=case.operation_id)
    response = settle(rita_client, case, "received", "She has it, checked by phone.")
    assert response.status_code == 302
    case.refresh_from_db()
    send.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "customer_confirmed_receipt")
    assert (send.status, send.destination_ref) == ("succeeded", "")
    entry = AuditEntry.objects.get(action="email_receipt_confirmed", case=case)
    assert entry.reason == "She has it, checked by phone."
    assert sandbox.stats()["messages"] == 1  # nothing sent again


@pytest.mark.django_db
def test_a_typed_reference_is_refused_for_an_email(sandbox, rita_client):
    case = interrupted_email(sandbox, "mail-ref")
    response = rita_client.post(
        reverse("console:case-resolve", args=[case.pk]),
        {"confirm": "yes", "destination_ref": "confirmed by phone", "reason": "x"},
    )
    assert "An email has no reference to verify" in response.content.decode()
    case.refresh_from_db()
    assert case.status == "open"
    assert Operation.objects.get(pk=case.operation_id).destination_ref == ""


@pytest.mark.django_db
def test_send_again_is_a_new_operation_with_its_own_key_run_by_the_engine(sandbox, rita_client):
    case = interrupted_email(sandbox, "mail-again")
    first = Operation.objects.get(pk=case.operation_id)
    assert settle(rita_client, case, "send_again", "Not in her inbox or spam.").status_code == 302
    again = Operation.objects.get(event=first.event, step="send_confirmation:2")
    assert again.key != first.key and again.key.startswith("opk_")
    assert again.arguments == {"settles_case_ids": [case.pk], "sends_again": first.pk}
    first.refresh_from_db()
    case.refresh_from_db()
    assert first.status == "cancelled" and first.attempts.count() == 1  # its try kept
    assert case.status == "in_progress"  # queued is not sent
    entry = AuditEntry.objects.get(action="email_send_again", case=case)
    assert entry.details["new_key"] == again.key and entry.details["original_key"] == first.key
    # A second click does not send a third: the first send is no longer waiting.
    refused = settle(rita_client, case, "send_again").content.decode()
    assert "no longer waiting for a decision" in refused
    assert Operation.objects.filter(event=first.event).count() == 4

    assert operation_execute(operation_id=again.pk) == "succeeded"  # claim, attempt, outcome
    assert operation_execute(operation_id=again.pk) is None  # done: nothing to claim
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "sent_again")
    messages = sandbox.messages()
    assert len(messages) == 2
    assert len({m["message_id"] for m in messages}) == 2  # its own Message-ID


@pytest.mark.django_db
def test_a_send_again_cut_off_too_opens_its_own_case_linked_both_ways(sandbox, rita_client):
    case = interrupted_email(sandbox, "mail-twice")
    settle(rita_client, case, "send_again")
    again = Operation.objects.get(event=case.event, step="send_confirmation:2")
    sandbox.fault("send_email", "drop_response_after_commit")
    operation_execute(operation_id=again.pk)
    second = ReviewCase.objects.get(operation=again)
    assert second.kind == "interrupted_send"
    first_page = rita_client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    second_page = rita_client.get(reverse("console:case-detail", args=[second.pk])).content.decode()
    assert f'href="{reverse("console:case-detail", args=[second.pk])}"' in first_page
    assert f'href="{reverse("console:case-detail", args=[case.pk])}"' in second_page
    # The customer then confirms: both cases are answered.
    settle(rita_client, second, "received", "Both arrived in the end.")
    case.refresh_from_db()
    second.refresh_from_db()
    assert {case.status, second.status} == {"resolved"}
    assert sandbox.stats()["messages"] == 2


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_send_again_end_to_end_with_a_worker_cluster(sandbox, qcluster_factory):
    """The console's request, a real django-q2 cluster, the SMTP sink: one more message,
    and the case resolved by the worker's success, not by the request."""
    case = interrupted_email(sandbox, "mail-cluster")
    client = Client()
    client.force_login(make_user("rita", groups=("Reviewers",)))
    qcluster_factory()
    assert settle(client, case, "send_again", "Not received.").status_code == 302
    wait_for(
        lambda: ReviewCase.objects.get(pk=case.pk).status == "resolved",
        timeout=60,
        what="the worker to send again and settle the case",
    )
    assert sandbox.stats()["messages"] == 2
    again = Operation.objects.get(event=case.event, step="send_confirmation:2")
    (attempt,) = again.attempts.all()
    assert (attempt.outcome, attempt.smtp_code, attempt.trigger) == ("succeeded", 250, "reviewer")
    settled = AuditEntry.objects.get(action="case_settled_by_success", case=case)
    assert settled.actor_label.startswith("system:")


@pytest.mark.django_db
def test_a_refused_email_is_tried_again_not_asked_about(sandbox, rita_client):
    """A 550 certainly sent nothing: the case offers a replay, not the customer's answers."""
    event = ingest("mail-550", message="Call me (mail-550).")
    for step in ("create_enquiry", "assign_task"):
        assert operation_execute(operation_id=op(event, step).pk) == "succeeded"
    sandbox.fault("send_email", "http_400")  # the sink answers 550 5.1.1
    assert operation_execute(operation_id=op(event, "send_confirmation").pk) == "permanent"
    case = ReviewCase.objects.get(event=event)
    assert case.kind == "permanent_failure"
    page = rita_client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert "Customer confirms receipt…" not in page
    assert "Mark resolved…" not in page  # an email has no reference to type
    assert settle(rita_client, case, "send_again").status_code == 404
    assert sandbox.stats()["messages"] == 0


@pytest.mark.django_db
def test_a_send_again_refused_by_the_server_can_itself_be_replayed(sandbox, rita_client):
    from idempotency_core.review.replay import operation_replay

    case = interrupted_email(sandbox, "mail-again-550")
    settle(rita_client, case, "send_again")
    again = Operation.objects.get(event=case.event, step="send_confirmation:2")
    sandbox.fault("send_email", "http_400")
    assert operation_execute(operation_id=again.pk) == "permanent"
    # The cancelled first send is what this one replaces, not an unfinished earlier step.
    rex = make_user("rex", groups=("Replay admins",))
    operation_replay(operation_id=again.pk, actor=rex, reason="mailbox fixed")
    assert operation_execute(operation_id=again.pk) == "succeeded"
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "sent_again")
    assert sandbox.stats()["messages"] == 2
