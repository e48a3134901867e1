"""The customer journey page: every path of a configured form with its message and the
record and task it touches, rendered from the current version, masked for reviewers.

The submission is made the real way (ingested, its pipeline run against the sandbox),
the configuration applied through `config_apply` (tests/factories.py `configured`), and
the page read through Django's test client. The retry and replay rules come from the
sandbox's capabilities as it reports them, switched here as a CRM's would be.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from idempotency_core.models import AssigneeTurn, AuditEntry, Event, Operation, Source
from tests.factories import completed, configured, crm_without_recognition, ingest

pytestmark = pytest.mark.django_db

FORM = {
    "enquiry": {"fields": {"amount": "{{ fields.budget }}", "work": "{{ fields.work_email }}"}},
    "task": {
        "title": "Call {{ contact.name }} about {{ fields.budget }}",
        "assignee": "ana",
        "due_in_hours": 24,
    },
    "confirmation": {
        "subject": "Thanks {{ contact.first_name }}",
        "text": "We got your message: {{ message }}",
        "html": "<p>Hello {{ contact.name }}</p>",
    },
}
FIELDS = {"budget": "10k", "work_email": "ada@example.com"}


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def journey_url(form: str = "contact", source: str = "website") -> str:
    return reverse("console:journey", args=[source, form])


def paths_of(response) -> dict:
    assert response.status_code == 200, response.content[:500]
    return {path.slug: path for path in response.context["journey"].paths}


def text_of(side) -> str:
    return " ".join([side.summary, *(f"{k}: {v}" for k, v in side.lines), side.text, side.html])


def test_every_path_shows_its_message_and_what_the_crm_gets(users, sandbox):
    configured({"contact": FORM})
    event = completed("journey-1", fields=FIELDS)
    ref = event.operations.get(step="create_enquiry").destination_ref
    response = client_of(users["superuser"]).get(journey_url())
    paths = paths_of(response)
    assert list(paths) == [
        *("first", "retry", "replay", "send-again", "edit", "same-enquiry", "no-email")
    ]
    page = response.content.decode()
    for path in paths.values():
        assert f'id="path-{path.slug}"' in page and path.title in page

    first = paths["first"]
    assert first.customer.verb == "sent"
    assert ("To", "ada@example.com") in first.customer.lines
    assert ("Subject", "Thanks Ada") in first.customer.lines
    assert first.customer.text == "We got your message: Please quote for a kitchen refit."
    assert first.customer.html == "<p>Hello Ada Lovelace</p>"
    assert first.record.verb == "created" and ("Property amount", "10k") in first.record.lines
    assert first.task.verb == "created"
    assert ("Title", "Call Ada Lovelace about 10k") in first.task.lines
    assert ("Assignee", "ana (a fixed name)") in first.task.lines
    assert "24 hours after the first attempt" in dict(first.task.lines)["Due"]

    # The sandbox's defaults: a unique external reference on records and tasks; SMTP
    # recognises nothing.
    retry = paths["retry"]
    assert not (retry.customer.touched or retry.record.touched or retry.task.touched)
    assert "No second email" in retry.customer.summary
    assert "cannot recognise a resend" in retry.customer.summary
    assert "same mark of this submission" in retry.record.summary
    assert "same mark of this submission" in retry.task.summary

    replay = paths["replay"]
    assert ("Subject", "Thanks Ada") in replay.customer.lines
    assert "original mark (the same email, as the mailbox sees it)" in replay.customer.summary
    assert "checked that the first email did not arrive" in replay.customer.summary
    assert "configuration version 1" in replay.customer.summary
    assert "At most one record, under its original mark" in replay.record.summary
    assert "same mark of this submission" in replay.record.summary

    again = paths["send-again"]
    assert again.customer.verb == "sent" and ("Subject", "Thanks Ada") in again.customer.lines
    assert "new key of its own" in again.customer.summary
    assert not again.record.touched and not again.task.touched

    edit = paths["edit"]
    assert (
        edit.record.verb == "updated"
        and "record of the submission it revises" in edit.record.summary
    )
    assert ref not in edit.record.summary  # the CRM's number is no word for a person
    assert ("Property amount", "10k") in edit.record.lines
    assert not edit.customer.touched and not edit.task.touched
    assert "update the enquiry with the edited submission" in edit.customer.summary

    same = paths["same-enquiry"]
    assert same.record.verb == "linked" and "the CRM's record of the first" in same.record.summary
    assert ref not in same.record.summary
    assert not same.customer.touched and not same.task.touched
    assert "This source flags duplicates instead" in same.what  # the source's policy: flag

    no_email = paths["no-email"]
    assert no_email.customer.verb == "none"
    assert no_email.customer.summary == "No message (not sent: no address)."
    assert no_email.record.verb == "created" and ("Email", "") in no_email.record.lines
    assert ("Title", "Call Ada Lovelace about 10k") in no_email.task.lines

    for words in ("not sent: no address", "Thanks Ada", "The customer receives"):
        assert words in page


def test_a_new_version_is_what_is_rendered_and_a_replay_keeps_the_stored_content(users, sandbox):
    configured({"contact": FORM})
    completed("journey-2", fields=FIELDS)
    configured({"contact": {**FORM, "confirmation": {**FORM["confirmation"], "subject": "New"}}})
    Source.objects.filter(name="website").update(duplicates="hold")
    crm_without_recognition(sandbox)
    paths = paths_of(client_of(users["superuser"]).get(journey_url()))
    assert ("Subject", "New") in paths["first"].customer.lines
    assert ("Subject", "New") in paths["send-again"].customer.lines
    # The replay sends what the first attempt stored, under version 1.
    assert ("Subject", "Thanks Ada") in paths["replay"].customer.lines
    assert "the current version, 2, is not used" in paths["replay"].customer.summary
    # Nothing in this CRM recognises a repeat now: a person decides.
    assert "a case asks a person to look for the record" in paths["retry"].record.summary
    assert "A person checks the CRM first" in paths["replay"].record.summary
    assert "flags duplicates instead" not in paths["same-enquiry"].what


def test_a_reviewer_sees_the_paths_with_contact_details_masked(users, sandbox):
    configured({"contact": FORM})
    completed("journey-3", fields=FIELDS, message="Ada in Canada asks for a quote.")
    for name, shown, hidden in (
        ("superuser", ["ada@example.com", "Ada Lovelace"], []),
        ("reviewer", ["a***@example.com", "A. L."], ["ada@example.com", "Lovelace", "Ada"]),
    ):
        response = client_of(users[name]).get(journey_url())
        page = response.content.decode()
        paths = paths_of(response)
        for words in shown:
            assert words in page, (name, words)
        for words in hidden:
            assert words not in page, (name, words)
    first = paths["first"]
    assert ("To", "a***@example.com") in first.customer.lines
    assert ("Property work", "a***@example.com") in first.record.lines  # a field repeating it
    assert ("Subject", "Thanks A.") in first.customer.lines
    assert ("Subject", "Thanks A.") in paths["replay"].customer.lines  # stored, then masked
    # The message is masked before rendering ("A••• (31 characters)"), and a confirmation
    # shows no such value (the greeting rule): nothing of it reaches the page.
    assert first.customer.text == "We got your message: "
    assert "Contact details are masked" in page


def test_a_form_with_nothing_kept_shows_a_synthetic_example_and_takes_no_turn(users, sandbox):
    configured(
        {
            "newsletter": {
                "task": {
                    "title": "Welcome {{ fields.topic }}",
                    "assignee": {"round_robin": ["ana", "ben"]},
                }
            }
        }
    )
    before = AuditEntry.objects.count()
    response = client_of(users["reviewer"]).get(journey_url("newsletter"))
    paths = paths_of(response)
    page = response.content.decode()
    assert "Synthetic example" in page and "No submission of this form is kept" in page
    assert "alex@example.com" in page
    assert ("Title", "Welcome example topic") in paths["first"].task.lines
    assert ("Assignee", "ana (round robin: the name its next turn would give)") in (
        paths["first"].task.lines
    )
    assert paths["first"].customer.verb == "sent"  # the built-in confirmation
    assert ("Subject", "We received your enquiry") in paths["first"].customer.lines
    assert len(paths) == 7
    assert AssigneeTurn.objects.count() == 0 and AuditEntry.objects.count() == before
    assert not Event.objects.exists() and not Operation.objects.exists()


def test_the_picker_shows_another_kept_submission_of_the_form(users):
    configured({"contact": FORM, "quote": FORM})
    older = ingest("pick-1", message="The first message.", fields=FIELDS)
    ingest("pick-2", message="The second message.", fields=FIELDS)
    other_form = ingest("pick-3", form="quote", message="A quote.", fields=FIELDS)
    client = client_of(users["superuser"])
    newest = paths_of(client.get(journey_url()))
    assert "The second message." in newest["first"].customer.text
    picked = client.get(journey_url(), {"submission": str(older.pk)})
    assert "The first message." in paths_of(picked)["first"].customer.text
    assert picked.content.decode().count('<option value="') == 2
    for wrong in (str(other_form.pk), "not-a-uuid"):
        assert client.get(journey_url(), {"submission": wrong}).status_code == 404
    # "*": the forms without a block of their own, with Onefold's built-in content.
    careers = ingest("pick-4", form="careers", message="A job.", fields=FIELDS)
    rest = client.get(journey_url("*"))
    assert rest.context["journey"].event == careers
    assert ("Title", "Follow up careers enquiry") in paths_of(rest)["first"].task.lines


def test_the_source_page_links_each_forms_journey_and_only_staff_may_open_it(users):
    configured({"contact": FORM})
    source = Source.objects.get(name="website")
    page = client_of(users["reviewer"]).get(reverse("console:source-detail", args=[source.pk]))
    html = page.content.decode()
    assert f'href="{journey_url()}"' in html and f'href="{journey_url("*")}"' in html
    assert Client().get(journey_url()).status_code == 302  # to the login page
    assert client_of(users["nonstaff"]).get(journey_url()).status_code == 403
    assert client_of(users["reviewer"]).post(journey_url()).status_code == 405
    assert client_of(users["reviewer"]).get(journey_url(source="nope")).status_code == 404
