"""A verified delivery is never lost for its content (docs/senders.md).

Over Django's test client (the real view, the real database) and, where an effect
is counted, the steps run in this process against the sandbox:

- a delivery that passed its token or signature and parses, but maps to no valid
  submission, is kept under its own key with its raw body, answered 202
  `needs_review`, and opens an `unreadable_submission` case; its repeat is a repeat;
- a corrected map applied with `remap` turns it into an ordinary submission under
  its original key, once;
- a submission with a name or a phone but no email address is processed (record,
  task) and its confirmation skipped, visibly, without a case;
- for every preset's sample: without its email it is processed without a
  confirmation; with nothing to contact it is an `unreadable_submission`; never a 4xx.

test_unreadable_end_to_end.py proves the same on gunicorn, a worker
cluster and the sandbox.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django_q.models import OrmQ

from idempotency_core.execution.confirmations import NO_ADDRESS
from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.hooks import mapped_key_before_020, submission_from
from idempotency_core.intake.ingest import (
    RawDelivery,
    Unreadable,
    event_ingest,
    event_ingest_unreadable,
)
from idempotency_core.intake.remap import events_remap, kept_document
from idempotency_core.intake.senders.mapping import document_map
from idempotency_core.intake.senders.parsing import parse_body
from idempotency_core.intake.senders.profiles import PRESETS, profile_resolve
from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.keys import operation_key
from idempotency_core.models import (
    AuditEntry,
    ConfirmationAllowance,
    Delivery,
    Event,
    ReviewCase,
    Source,
)
from tests.factories import make_user, post, submission
from tests.support.processes import Sandbox
from tests.support.senders import (
    ANOTHER_FORMS_MAP,
    PROVIDERS,
    SAMPLES,
    TUTORING_MAP,
    Sample,
    jotform_captured_tutoring,
    jotform_tutoring,
    sample_without_contact,
    signed_headers,
)

pytestmark = pytest.mark.django_db

SECRET = "a-signing-secret-for-unreadable-deliveries-32+"


def hook_source(profile: str, *, name: str = "", overrides: dict | None = None):
    source, _ = source_get_or_create(name=name or f"{profile}-unreadable")
    path = source_hook_configure(source=source, profile=profile, secrets=[SECRET]).path
    if overrides is not None:
        source.profile_overrides = overrides
        source.save(update_fields=["profile_overrides"])
    return source, path


def deliver(client: Client, path: str, sample: Sample):
    headers = signed_headers(sample, SECRET, f"http://testserver{path}")
    content_type = headers.pop("Content-Type")
    return client.post(path, sample.body, content_type=content_type, headers=headers)


def run_steps(event: Event) -> dict[str, str]:
    """Each step of the event run once in order, here; step -> final status."""
    for operation in event.operations.order_by("position"):
        operation_execute(operation_id=operation.pk)
    return dict(event.operations.values_list("step", "status"))


def counts(sandbox: Sandbox) -> tuple[int, int, int]:
    stats = sandbox.stats()
    return stats["records"], stats["tasks"], stats["messages"]


def remap(source: Source, *args: str) -> str:
    out = StringIO()
    since = (timezone.now() - timedelta(days=1)).date().isoformat()
    call_command("remap", "--source", source.name, "--since", since, *args, stdout=out)
    return out.getvalue()


def assert_kept_unreadable(
    source: Source, response, sample: Sample, *, missing: str = "contact"
) -> Event:
    """202 needs_review; the event without operations, its raw body, its open case."""
    assert response.status_code == 202, response.content
    event = Event.objects.get(source=source)
    assert response.json() == {"event_id": str(event.pk), "status": "needs_review"}
    assert not event.operations.exists()
    (delivery,) = Delivery.objects.filter(source=source)
    assert (delivery.outcome, delivery.status_code, delivery.event_id) == (
        "unreadable",
        202,
        event.pk,
    )
    assert bytes(delivery.raw_body or b"") == sample.body
    case = ReviewCase.objects.get(event=event)
    assert (case.kind, case.status) == ("unreadable_submission", "open")
    assert any(line.startswith(missing) for line in case.evidence["missing"]), case.evidence
    assert case.evidence["profile"] == source.profile
    assert "name" in case.evidence["field_map"]
    return event


# -- the captured Jotform delivery ---------------------------------------------------


def test_the_tutoring_jotform_delivery_is_answered_2xx_and_kept_whatever_the_preset_reads():
    """Whatever the preset makes of it, never a 4xx: processed, or a case."""
    source, path = hook_source("jotform")
    response = deliver(Client(), path, jotform_tutoring())
    assert response.status_code in (200, 202), response.content
    event = Event.objects.get(source=source)
    if response.status_code == 202:
        assert ReviewCase.objects.filter(event=event, kind="unreadable_submission").exists()
    else:
        assert event.operations.count() == 3
        assert "email" not in event.payload["contact"]


def test_the_captured_tutoring_delivery_is_one_record_one_task_and_no_email(sandbox):
    """Jotform's real delivery of a form without an email field, under the preset: 200,
    processed, its confirmation "not sent: no address" on the submission page."""
    source, path = hook_source("jotform")
    client = Client()
    response = deliver(client, path, jotform_captured_tutoring())
    assert response.status_code == 200, response.content
    event = Event.objects.get(source=source)
    assert event.key == "jotform:243231271343446:6084250982513018472"
    assert event.payload["contact"] == {"name": "Niloth P"}
    assert event.payload["fields"]["Type of Tutoring"] == "Online Tutoring"
    assert run_steps(event) == {
        "create_enquiry": "succeeded",
        "assign_task": "succeeded",
        "send_confirmation": "cancelled",
    }
    assert counts(sandbox) == (1, 1, 0)
    assert not ReviewCase.objects.exists()
    reader = Client()
    reader.force_login(make_user("reader", groups=("Reviewers",)))
    page = reader.get(reverse("console:submission-detail", args=[event.pk])).content.decode()
    assert "not sent: no address" in page
    again = deliver(client, path, jotform_captured_tutoring())
    assert again.status_code == 200 and again.json() == {"event_id": str(event.pk)}
    assert counts(sandbox) == (1, 1, 0)


def test_the_tutoring_delivery_waits_in_a_case_and_its_repeat_is_a_repeat():
    sample = jotform_tutoring()
    source, path = hook_source("jotform", overrides=ANOTHER_FORMS_MAP)
    client = Client()
    event = assert_kept_unreadable(source, deliver(client, path, sample), sample)
    assert event.key == "jotform:251034567890123:6120418830113579246"  # the sender's own id
    case = ReviewCase.objects.get(event=event)
    assert "contact: No name, email address or phone number" in case.evidence["missing"][0]
    # What the case keeps of the delivery is names and rules, never a value.
    assert "Lovelace" not in str(case.evidence) and "Lovelace" not in case.summary

    again = deliver(client, path, sample)
    assert again.status_code == 200 and again.json() == {"event_id": str(event.pk)}
    assert Event.objects.filter(source=source).count() == 1
    assert ReviewCase.objects.filter(event=event).count() == 1
    assert list(Delivery.objects.filter(source=source).order_by("pk").values_list("outcome")) == [
        ("unreadable",),
        ("replayed",),
    ]


def test_a_corrected_map_turns_it_into_one_submission_under_its_original_key(sandbox):
    sample = jotform_tutoring()
    source, path = hook_source("jotform", overrides=ANOTHER_FORMS_MAP)
    event = assert_kept_unreadable(source, deliver(Client(), path, sample), sample)

    # A dry run says what would happen and changes nothing.
    source.profile_overrides = TUTORING_MAP
    source.save(update_fields=["profile_overrides"])
    assert "unreadable until now, would be processed" in remap(source, "--dry-run")
    assert not event.operations.exists()

    out = remap(source)
    assert f"{event.key}: unreadable until now, processed, first step queued" in out
    event.refresh_from_db()
    assert event.payload["contact"] == {"name": "Ada Lovelace"}
    assert event.payload["message"] == "She needs help with GCSE algebra before the May exams."
    operations = list(event.operations.order_by("position"))
    assert [o.step for o in operations] == ["create_enquiry", "assign_task", "send_confirmation"]
    # The keys are those the submission would have had on arrival: its original key's.
    assert [o.key for o in operations] == [
        operation_key(source_salt=source.key_salt, event_key=event.key, step=o.step)
        for o in operations
    ]
    first = operations[0]
    assert first.next_attempt_at is not None and first.enqueued_at is not None
    assert OrmQ.objects.count() == 1  # its task, queued with it
    case = ReviewCase.objects.get(event=event)
    assert (case.status, case.resolution_code) == ("resolved", "remapped")
    entry = AuditEntry.objects.get(case=case, action="remapped")
    assert entry.actor_label == "system:remap" and entry.details["admitted"] is True

    assert run_steps(event) == {
        "create_enquiry": "succeeded",
        "assign_task": "succeeded",
        "send_confirmation": "cancelled",
    }
    assert counts(sandbox) == (1, 1, 0)
    (record,) = sandbox.client.get(
        "/crm/records", params={"external_ref": operations[0].key}
    ).json()["results"]
    assert (record["name"], record["email"]) == ("Ada Lovelace", "")
    confirmation = event.operations.get(step="send_confirmation")
    assert confirmation.last_error == NO_ADDRESS

    # Applying it again changes nothing: no second pipeline, no entry, no effect.
    entries = AuditEntry.objects.count()
    assert "0 event(s) changed" in remap(source)
    assert event.operations.count() == 3 and AuditEntry.objects.count() == entries
    # The sender's repeat is still a repeat of the one event.
    again = deliver(Client(), path, sample)
    assert again.status_code == 200 and again.json() == {"event_id": str(event.pk)}
    assert Event.objects.filter(source=source).count() == 1
    assert counts(sandbox) == (1, 1, 0)


def test_a_map_that_still_cannot_read_it_leaves_it_waiting():
    sample = jotform_tutoring()
    source, path = hook_source("jotform", overrides=ANOTHER_FORMS_MAP)
    event = assert_kept_unreadable(source, deliver(Client(), path, sample), sample)
    out = remap(source)
    assert "cannot re-map (still unreadable: contact: No name" in out
    assert not event.operations.exists()
    assert ReviewCase.objects.get(event=event).status == "open"


def test_a_case_a_person_closed_is_not_processed_by_a_later_map():
    sample = jotform_tutoring()
    source, path = hook_source("jotform", overrides=ANOTHER_FORMS_MAP)
    event = assert_kept_unreadable(source, deliver(Client(), path, sample), sample)
    ReviewCase.objects.filter(event=event).update(status="closed", resolution_code="spam_or_test")
    source.profile_overrides = TUTORING_MAP
    source.save(update_fields=["profile_overrides"])
    assert list(events_remap(source=source, since=None, dry_run=False)) == []
    assert not event.operations.exists()


def test_only_the_waiting_ones_are_applied_when_asked_and_twice_is_once():
    """The console's "apply to the waiting deliveries" runs the same service."""
    sample = jotform_tutoring()
    source, path = hook_source("jotform", overrides=ANOTHER_FORMS_MAP)
    event = assert_kept_unreadable(source, deliver(Client(), path, sample), sample)
    source.profile_overrides = TUTORING_MAP
    source.save(update_fields=["profile_overrides"])
    (change,) = events_remap(source=source, since=None, dry_run=False, unreadable_only=True)
    assert change.admitted and change.event_id == str(event.pk)
    assert list(events_remap(source=source, since=None, dry_run=False, unreadable_only=True)) == []
    assert event.operations.count() == 3
    assert AuditEntry.objects.filter(action="remapped").count() == 1


# -- contacts without email ----------------------------------------------------------


@pytest.mark.parametrize("profile", sorted(SAMPLES))
def test_without_its_email_a_sample_is_processed_and_not_confirmed(profile, sandbox):
    sample = sample_without_contact(SAMPLES[profile], everything=False)
    source, path = hook_source(profile)
    response = deliver(Client(), path, sample)
    assert response.status_code == 200, response.content
    event = Event.objects.get(source=source)
    assert response.json() == {"event_id": str(event.pk)}
    assert "email" not in event.payload["contact"], event.payload
    assert not ReviewCase.objects.filter(event=event).exists()
    assert run_steps(event) == {
        "create_enquiry": "succeeded",
        "assign_task": "succeeded",
        "send_confirmation": "cancelled",
    }
    assert counts(sandbox) == (1, 1, 0)
    confirmation = event.operations.get(step="send_confirmation")
    assert confirmation.last_error == NO_ADDRESS
    assert list(confirmation.attempts.values_list("outcome", flat=True)) == ["skipped"]
    # Skipped before the limits counted it: nothing was allowed to go out.
    assert not ConfirmationAllowance.objects.exists()
    assert not ReviewCase.objects.exists()


@pytest.mark.parametrize("profile", sorted(SAMPLES))
def test_with_nothing_to_contact_a_sample_is_kept_as_an_unreadable_submission(profile):
    sample = sample_without_contact(SAMPLES[profile], everything=True)
    source, path = hook_source(profile)
    client = Client()
    event = assert_kept_unreadable(source, deliver(client, path, sample), sample)
    again = deliver(client, path, sample)
    assert again.status_code == 200, again.content
    assert again.json() == {"event_id": str(event.pk)}
    assert Event.objects.filter(source=source).count() == 1


def test_a_browser_posting_an_unreadable_form_still_lands_on_the_thank_you_page():
    sample = sample_without_contact(SAMPLES["html"], everything=True)
    source, _ = source_get_or_create(name="html-thanks")
    path = source_hook_configure(
        source=source, profile="html", thank_you_url="https://www.example.com/thanks/"
    ).path
    response = Client().post(
        path, sample.body, content_type=sample.content_type, headers={"Accept": "text/html"}
    )
    assert response.status_code == 303
    assert response["Location"] == "https://www.example.com/thanks/"
    case = ReviewCase.objects.get(event__source=source)
    assert case.kind == "unreadable_submission"


def test_two_different_unreadable_forms_without_an_id_are_two_events():
    """No sender id: the key is the document's fingerprint, not the blanks the map
    made of it, so two people's unreadable submissions are never one "repeat"."""
    source, path = hook_source("cf7")
    client = Client()
    for text in ("first enquiry", "second enquiry"):
        body = f'{{"your-subject":"{text}"}}'.encode()
        response = client.post(path, body, content_type="application/json")
        assert response.status_code == 202, response.content
    assert Event.objects.filter(source=source).count() == 2
    assert ReviewCase.objects.filter(kind="unreadable_submission").count() == 2


def test_a_nul_character_in_an_unreadable_form_is_kept_not_a_500():
    source, path = hook_source("html")
    body = b"comments=hello%00there&submission_id=nul-1"
    response = Client().post(path, body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 202, response.content
    event = Event.objects.get(source=source)
    assert event.payload["message"] == "hello\ufffdthere"
    assert bytes(Delivery.objects.get(event=event).raw_body or b"") == body


def test_the_json_api_keeps_400_for_a_submission_without_email(api):
    """A program reads the API's answer: it is told, and nothing is kept."""
    response = post(api, submission(contact={"name": "Ada Lovelace"}))
    assert response.status_code == 400
    assert "email" in response.json()["errors"]["contact"]
    assert not Event.objects.exists()


def test_a_broken_field_map_keeps_the_delivery_for_a_fixed_one():
    """The source's map is at fault, not the delivery: still never a 4xx or a 500."""
    sample = SAMPLES["wpforms"]
    source, path = hook_source("wpforms", overrides={"field_map": {"name": {"bogus": 1}}})
    response = deliver(Client(), path, sample)
    event = assert_kept_unreadable(source, response, sample, missing="field_map")
    (line,) = ReviewCase.objects.get(event=event).evidence["missing"]
    assert line.startswith("field_map: The source's field map cannot be applied")


@pytest.mark.parametrize("name", sorted(path.stem for path in PROVIDERS.glob("*.json")))
def test_every_published_provider_sample_is_never_a_4xx(name):
    """The providers' own published samples (some from their docs, with no
    contact fields at all): as they are, without the email, with nothing to contact:
    processed or kept as unreadable, never refused."""
    signing = SAMPLES[name]
    body = (PROVIDERS / f"{name}.json").read_bytes()
    # The name as the preset reads it, for "nothing to contact" to remove.
    mapped = document_map(PRESETS[name].field_map, json.loads(body))
    as_is = Sample(
        name,
        body,
        "application/json",
        (mapped.name, mapped.email, mapped.message),
        sign=signing.sign,
        signs_timestamp=signing.signs_timestamp,
    )
    for number, sample in enumerate(
        (
            as_is,
            sample_without_contact(as_is, everything=False),
            sample_without_contact(as_is, everything=True),
        )
    ):
        source, path = hook_source(name, name=f"{name}-published-{number}")
        response = deliver(Client(), path, sample)
        assert response.status_code in (200, 202), (number, response.content)
        event = Event.objects.get(source=source)
        unreadable = ReviewCase.objects.filter(event=event, kind="unreadable_submission")
        assert event.operations.exists() != unreadable.exists()
        if number == 2:
            assert response.status_code == 202 and unreadable.exists()


# -- the key of a delivery without an id does not depend on the map ------------------


def html_without_id() -> Sample:
    body, _, _ = SAMPLES["html"].body.partition(b"&submission_id=")
    return dataclasses.replace(SAMPLES["html"], body=body)


def test_without_an_id_the_same_delivery_has_one_key_whatever_its_map_reads():
    """Kept unreadable under a wrong map, then posted again once the map reads it: a
    repeat of the kept event (its answer, no second event), never a new submission."""
    sample = html_without_id()
    source, path = hook_source("html", overrides=ANOTHER_FORMS_MAP)
    event = assert_kept_unreadable(source, deliver(Client(), path, sample), sample)
    source.profile_overrides = {}
    source.save(update_fields=["profile_overrides"])
    again = deliver(Client(), path, sample)
    assert (again.status_code, again.json()) == (200, {"event_id": str(event.pk)})
    assert Event.objects.filter(source=source).count() == 1
    assert not event.operations.exists()  # the case still waits for the map's apply
    (change,) = events_remap(source=source, since=None, dry_run=False, unreadable_only=True)
    assert change.admitted and change.event_id == str(event.pk)
    third = deliver(Client(), path, sample)
    assert (third.status_code, third.json()) == (200, {"event_id": str(event.pk)})
    assert Event.objects.filter(source=source).count() == 1


def test_a_map_changed_after_processing_leaves_a_repeat_a_repeat():
    """The same bytes again after the map changed what it reads: the same submission
    (200, its event), not a reused key (422)."""
    sample = html_without_id()
    source, path = hook_source("html")
    first = deliver(Client(), path, sample)
    assert first.status_code == 200, first.content
    source.profile_overrides = {"field_map": {"message": "comments", "name": "name"}}
    source.save(update_fields=["profile_overrides"])
    again = deliver(Client(), path, sample)
    assert (again.status_code, again.json()) == (200, first.json())
    assert Event.objects.filter(source=source).count() == 1


def test_admission_finds_the_same_delivery_kept_under_its_earlier_key():
    """A database from before 0.2.0 may hold the re-post of an unreadable delivery as
    an event of its own, keyed by its mapped content. Applying the map then settles
    the unreadable case as a repeat of it, linked and audited, and creates nothing."""
    sample = html_without_id()
    source, path = hook_source("html", overrides=ANOTHER_FORMS_MAP)
    event = assert_kept_unreadable(source, deliver(Client(), path, sample), sample)
    source.profile_overrides = {}
    source.save(update_fields=["profile_overrides"])
    profile = profile_resolve(source.profile, source.profile_overrides)
    document = kept_document(event, profile)
    assert isinstance(document, dict)
    _, payload, errors = submission_from(source, profile, document, {})
    assert not errors
    earlier = event_ingest(
        source=source, key=mapped_key_before_020(profile, document, payload), payload=payload
    ).event
    (change,) = events_remap(source=source, since=None, dry_run=False, unreadable_only=True)
    assert (change.admitted, change.repeat_of) == (False, str(earlier.pk))
    assert not event.operations.exists()
    case = ReviewCase.objects.get(event=event)
    assert (case.status, case.resolution_code) == ("resolved", "repeat")
    entry = AuditEntry.objects.get(action="settled_as_repeat")
    assert entry.details["repeat_of"] == str(earlier.pk)
    assert list(events_remap(source=source, since=None, dry_run=False, unreadable_only=True)) == []
    # Its re-post is a repeat of the earlier event, not a third one.
    again = deliver(Client(), path, sample)
    assert again.status_code == 200, again.content
    assert Event.objects.filter(source=source).count() == 2


# -- a delivery kept under its pre-0.2.0 key, after the map changed ------------------

CHANGED_MAP = {"field_map": {"message": "comments", "name": "name"}}


def event_before_020(source: Source, sample: Sample) -> Event:
    """The event Onefold made of `sample` before 0.2.0: keyed by what the map in force
    made of it, its raw delivery kept."""
    profile = profile_resolve(source.profile, source.profile_overrides)
    document = parse_body(
        sample.body,
        content_type=sample.content_type,
        parser=profile.parser,
        json_field=profile.json_field,
    )
    _, payload, errors = submission_from(source, profile, document, {})
    assert not errors
    raw = RawDelivery(body=sample.body, content_type=sample.content_type, verification="ok")
    key = mapped_key_before_020(profile, document, payload)
    return event_ingest(source=source, key=key, payload=payload, raw=raw).event


def test_a_delivery_from_before_0_2_0_sent_again_after_its_map_changed_is_a_repeat(
    sandbox: Sandbox,
):
    """Today's map no longer makes of the delivery what made its key then: it is found
    by its bytes, answered from its event, and nothing reaches the CRM or the mailbox
    twice, also after `remap` rewrote the event's content."""
    sample = html_without_id()
    source, path = hook_source("html")
    earlier = event_before_020(source, sample)
    run_steps(earlier)
    assert counts(sandbox) == (1, 1, 1)
    source.profile_overrides = CHANGED_MAP
    source.save(update_fields=["profile_overrides"])
    again = deliver(Client(), path, sample)
    assert (again.status_code, again.json()) == (200, {"event_id": str(earlier.pk)})
    list(events_remap(source=source, since=None, dry_run=False))
    third = deliver(Client(), path, sample)
    assert (third.status_code, third.json()) == (200, {"event_id": str(earlier.pk)})
    assert Event.objects.filter(source=source).count() == 1
    for event in Event.objects.filter(source=source):
        run_steps(event)
    assert counts(sandbox) == (1, 1, 1)


def test_its_copy_kept_unreadable_settles_as_its_repeat_whatever_the_fixed_map_reads():
    """The same delivery kept unreadable (under today's key) while its pre-0.2.0 event
    exists, then a map that reads it, but not as the first map did: the case settles
    as a repeat of that event, and no second pipeline is made."""
    sample = html_without_id()
    source, path = hook_source("html")
    earlier = event_before_020(source, sample)
    source.profile_overrides = ANOTHER_FORMS_MAP
    source.save(update_fields=["profile_overrides"])
    kept = deliver(Client(), path, sample)
    # Found by its bytes: a repeat of the earlier event, not a new unreadable one.
    assert (kept.status_code, kept.json()) == (200, {"event_id": str(earlier.pk)})
    assert not ReviewCase.objects.filter(kind="unreadable_submission").exists()
    unreadable = event_ingest_unreadable(
        source=source,
        key="fp:" + "0" * 64,
        payload={},
        raw=RawDelivery(body=sample.body, content_type=sample.content_type, verification="ok"),
        unreadable=Unreadable(missing=["contact"], profile="html", field_map={}),
    ).event
    source.profile_overrides = CHANGED_MAP
    source.save(update_fields=["profile_overrides"])
    changes = list(events_remap(source=source, since=None, dry_run=False, unreadable_only=True))
    assert [(c.event_id, c.admitted, c.repeat_of) for c in changes] == [
        (str(unreadable.pk), False, str(earlier.pk))
    ]
    assert not unreadable.operations.exists()


def test_two_unreadable_copies_of_one_delivery_make_one_submission():
    """Two events kept unreadable from the same bytes under two keys (a key rule that
    changed between them): applying the map admits the first and settles the second as
    its repeat. Neither may settle as the other's, which would leave nothing to run."""
    sample = html_without_id()
    source, _ = hook_source("html")
    raw = RawDelivery(body=sample.body, content_type=sample.content_type, verification="ok")
    copies = [
        event_ingest_unreadable(
            source=source,
            key=f"fp:{digit * 64}",
            payload={},
            raw=raw,
            unreadable=Unreadable(missing=["contact"], profile="html", field_map={}),
        ).event
        for digit in "12"
    ]
    changes = list(events_remap(source=source, since=None, dry_run=False, unreadable_only=True))
    assert [(c.event_id, c.admitted, c.repeat_of) for c in changes] == [
        (str(copies[0].pk), True, ""),
        (str(copies[1].pk), False, str(copies[0].pk)),
    ]
    assert [event.operations.count() for event in copies] == [3, 0]
