"""Whose data a request finds (docs/operations.md, "Whose data"): an event is a person's
by its own contact; only an event with none is looked for in its raw deliveries, and
there by the whole address. A delivery refused because its key names another person's
submission is its sender's: exported to them and erased for them, and it makes the
other submission nobody else's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from idempotency_core.models import AuditEntry, Delivery, Event
from idempotency_core.privacy.erasure import PersonNotFoundError, person_erase
from idempotency_core.privacy.export import person_export
from idempotency_core.privacy.person import person_find
from review_console.models import BulkReplayJob
from tests.factories import make_user
from tests.support.senders import Sample, deliver, hook_source, sign_t_v1

pytestmark = pytest.mark.django_db

ADA = {"name": "Ada Quillfeather", "email": "ada.quill@example.org"}
ADA_MESSAGE = "Ada wants a walnut kitchen at Orchard Lane"
BOB = {"name": "Bob Marchetti", "email": "bob.marchetti@example.net"}
BOB_MESSAGE = "Bob wants a garden shed estimate"


def hook(key: str, *, contact: dict[str, str], message: str, **fields: str) -> Sample:
    document: dict[str, Any] = {"form": "contact", "contact": contact, "message": message}
    if fields:
        document["fields"] = fields
    return Sample(
        "generic",
        json.dumps(document).encode(),
        "application/json",
        ("", "", ""),
        sign=sign_t_v1("Onefold-Signature"),
        extra_headers=(("Idempotency-Key", key),),
    )


def send(sample: Sample) -> int:
    _, path = hook_source("generic", name="website-hooks")
    return int(deliver(Client(), path, sample).status_code)


def exported(address: str) -> tuple[dict[str, Any], str]:
    document = person_export(address=address, system="test")
    assert document is not None
    return document, json.dumps(document, default=str).lower()


def bobs_with_adas_refused_repeat() -> tuple[Event, Delivery]:
    """Bob's submission, then Ada's under the same submission id: refused (422) and
    kept with its raw body on Bob's event."""
    assert send(hook("sub-17", contact=BOB, message=BOB_MESSAGE)) == 200
    bob = Event.objects.get(key__endswith=":sub-17")
    assert send(hook("sub-17", contact=ADA, message=ADA_MESSAGE)) == 422
    refused = Delivery.objects.get(event=bob, outcome="key_reused")
    assert refused.raw_body is not None
    return bob, refused


def test_a_refused_repeat_is_its_senders_and_never_makes_the_event_theirs() -> None:
    bob, _ = bobs_with_adas_refused_repeat()

    ada_document, ada_text = exported(ADA["email"])
    assert ada_document["submissions"] == []
    [delivery] = ada_document["refused_deliveries"]
    assert ADA_MESSAGE in delivery["raw_body"] and delivery["status_code"] == 422
    for value in (BOB["email"], BOB["name"], BOB_MESSAGE, str(bob.pk)):
        assert value.lower() not in ada_text, value

    bob_document, bob_text = exported(BOB["email"])
    assert [s["event_id"] for s in bob_document["submissions"]] == [str(bob.pk)]
    assert bob_document["refused_deliveries"] == []
    assert [d["outcome"] for d in bob_document["submissions"][0]["deliveries"]] == ["accepted"]
    for value in (ADA["email"], ADA["name"], ADA_MESSAGE):
        assert value.lower() not in bob_text, value


def test_a_refused_repeat_naming_someone_else_is_still_its_senders() -> None:
    """Whose a refused delivery is comes from the contact its sender's map read (kept as
    its digest at ingest), not from an address its message mentions."""
    carol = {"name": "Carol Ashdown", "email": "carol.ash@example.com"}
    assert send(hook("sub-18", contact=carol, message="Carol's porch")) == 200
    mention = f"Please copy my architect {BOB['email']} on the quote"
    assert send(hook("sub-18", contact=ADA, message=mention)) == 422
    refused = Delivery.objects.get(outcome="key_reused")
    assert refused.sender_digest and BOB["email"] in bytes(refused.raw_body or b"").decode()

    ada_document, _ = exported(ADA["email"])
    assert [d["status_code"] for d in ada_document["refused_deliveries"]] == [422]
    with pytest.raises(PersonNotFoundError):
        person_erase(address=BOB["email"], reason="asked", system="test")
    refused.refresh_from_db()
    assert refused.raw_body is not None


def test_erasing_the_refused_sender_erases_their_delivery_and_nothing_of_the_other() -> None:
    bob, refused = bobs_with_adas_refused_repeat()
    quote = BulkReplayJob.objects.create(
        created_by=make_user("rita"), reason=f"replaying {BOB['email']}: {BOB_MESSAGE}"
    )

    report = person_erase(address=ADA["email"], reason="asked", system="test")

    assert report.events == 0 and report.removed["raw deliveries"] == 1
    refused.refresh_from_db()
    assert refused.raw_body is None
    bob.refresh_from_db()
    assert bob.payload is not None and bob.payload["message"] == BOB_MESSAGE
    accepted = Delivery.objects.get(event=bob, outcome="accepted")
    assert BOB_MESSAGE in bytes(accepted.raw_body or b"").decode()
    assert not bob.operations.filter(status="cancelled").exists()
    quote.refresh_from_db()
    assert quote.reason == f"replaying {BOB['email']}: {BOB_MESSAGE}"
    entry = AuditEntry.objects.get(action="person_erased")
    assert entry.details["events"] == [] and entry.details["refused_deliveries"] == [refused.pk]
    # Nothing of Ada is left to find; Bob is still all there.
    with pytest.raises(PersonNotFoundError):
        person_erase(address=ADA["email"], reason="asked again", system="test")
    _, bob_text = exported(BOB["email"])
    assert BOB_MESSAGE.lower() in bob_text


def test_an_address_inside_a_longer_one_is_another_person() -> None:
    joan = {"name": "Joan Whitcombe", "email": "joan@example.org"}
    assert send(hook("j-1", contact=joan, message="Joan's private message")) == 200
    an = {"name": "An Nguyen", "email": "an@example.org"}
    assert send(hook("a-1", contact=an, message="An's own message")) == 200

    document, text = exported("AN@example.org")
    assert [s["key"] for s in document["submissions"]] == [
        Event.objects.get(key__endswith=":a-1").key
    ]
    assert "joan" not in text
    person_erase(address="an@example.org", reason="asked", system="test")
    joan_event = Event.objects.get(key__endswith=":j-1")
    assert joan_event.payload is not None
    assert Delivery.objects.filter(event=joan_event, raw_body__isnull=False).exists()


def test_a_submission_naming_an_address_in_its_message_is_its_senders() -> None:
    note = f"My architect is {ADA['email']}, please copy her"
    assert send(hook("b-1", contact=BOB, message=note)) == 200
    bob = Event.objects.get(key__endswith=":b-1")

    assert person_export(address=ADA["email"], system="test") is None
    with pytest.raises(PersonNotFoundError):
        person_erase(address=ADA["email"], reason="asked", system="test")
    bob.refresh_from_db()
    assert bob.payload is not None and bob.payload["message"] == note


def test_an_unreadable_submission_is_found_by_the_whole_address_only() -> None:
    """No contact address could be read: its raw delivery decides, by the address as a
    whole (another address that merely ends with it finds nothing)."""
    nameless = {"name": "Joan Whitcombe"}
    assert send(hook("u-1", contact=nameless, message="Joan's", reply_to="joan@example.org")) in (
        200,
        202,
    )
    event = Event.objects.get(key__endswith=":u-1")
    assert event.contact_digest == ""

    assert person_export(address="an@example.org", system="test") is None
    document, _ = exported("Joan@Example.org")
    assert [s["key"] for s in document["submissions"]] == [event.key]


def test_the_values_to_erase_are_the_persons_own() -> None:
    """A refused repeat someone else sent under the person's key adds nothing of theirs
    to what the person's erasure looks for."""
    assert send(hook("sub-9", contact=ADA, message=ADA_MESSAGE)) == 200
    assert send(hook("sub-9", contact=BOB, message=BOB_MESSAGE, company="Marchetti Sheds")) == 422

    person = person_find(ADA["email"])
    erased = " ".join(person.values + person.own_values + person.words).lower()
    assert ADA_MESSAGE.lower() in erased
    for value in (BOB["email"], BOB_MESSAGE, "marchetti"):
        assert value.lower() not in erased, value
