"""A person's requests from outside (docs/operations.md, "Personal data requests"): `person
export` gives all their submissions and nothing of anyone else's; `person erase` leaves
nothing of them in a pg_dump of the whole database, keeps the other person's data,
audits `person_erased` by a digest, and a repeat of their first key creates nothing.

Transactional (real commits): pg_dump reads the database from another connection."""

from __future__ import annotations

import io
import json
import os
import subprocess
import uuid
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.test import Client
from django.utils import timezone

from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import AuditEntry, Delivery, Event, Operation, ReviewCase
from idempotency_core.privacy.person import person_digest
from idempotency_core.review.cases import case_reopen
from idempotency_core.review.refusals import CaseActionRefusedError
from tests.factories import make_user, op, post, run_pipeline, submission
from tests.support.senders import Sample, deliver, hook_source, sign_t_v1

ADA = {"name": "Ada Quillfeather", "email": "Ada.Quill@example.org", "phone": "+44 20 7946 0123"}
ADA_FIRST = "Please quote for a walnut kitchen at Orchard Lane"
ADA_COMPANY = "Quillfeather Looms Ltd"
ADA_SECOND = "Second request: a bathroom in marble tiles"
BOB = {"name": "Bob Marchetti", "email": "bob.marchetti@example.net", "phone": "+1 415 555 0199"}
BOB_MESSAGE = "Bob wants a garden shed estimate"


def ada_first() -> dict[str, Any]:
    return submission(contact=ADA, message=ADA_FIRST, fields={"company": ADA_COMPANY})


def ada_second_by_hook() -> Sample:
    """A signed delivery of the generic profile: its raw body is kept (a hook's)."""
    body = json.dumps(
        {
            "form": "contact",
            "contact": {**ADA, "email": ADA["email"].upper()},
            "message": ADA_SECOND,
        }
    ).encode()
    return Sample(
        "generic",
        body,
        "application/json",
        ("", "", ""),
        sign=sign_t_v1("Onefold-Signature"),
        extra_headers=(("Idempotency-Key", "ada-second"),),
    )


def ada_values() -> list[str]:
    return [*ADA.values(), ADA["email"].lower(), ADA_FIRST, ADA_COMPANY, ADA_SECOND]


def people(api, sandbox) -> tuple[Event, Event, Event]:
    """Ada's first submission processed, her second (by a hook) in a case, and Bob's."""
    assert post(api, ada_first(), key="ada-first").status_code == 202
    first = Event.objects.get(key="ada-first")
    run_pipeline(first)
    _, path = hook_source("generic", name="website-hooks")
    assert deliver(Client(), path, ada_second_by_hook()).status_code == 200
    second = Event.objects.get(key__endswith=":ada-second")
    sandbox.fault("create_record", "http_400")
    assert operation_execute(operation_id=op(second, "create_enquiry").pk) == "permanent"
    # What a reviewer's look at the CRM leaves in the audit trail: the record's words.
    audit_record(
        action="destination_lookup",
        system="test",
        event=second,
        details={"record": {"name": ADA["name"], "email": ADA["email"]}},
    )
    body = submission(contact=BOB, message=BOB_MESSAGE, fields={"company": "Marchetti Sheds"})
    assert post(api, body, key="bob-1").status_code == 202
    bob = Event.objects.get(key="bob-1")
    run_pipeline(bob)
    return first, second, bob


def pg_dump() -> str:
    db = settings.DATABASES["default"]
    command = ["pg_dump", "-h", str(db["HOST"]), "-p", str(db["PORT"]), "-U", str(db["USER"])]
    env = {**os.environ, "PGPASSWORD": str(db.get("PASSWORD") or "")}
    dump = subprocess.run([*command, str(db["NAME"])], capture_output=True, env=env, check=True)
    return dump.stdout.decode().lower()


def person(*args: str) -> str:
    out = io.StringIO()
    call_command("person", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_export_gives_both_submissions_and_erase_leaves_nothing_of_the_person(api, sandbox):
    first, second, _ = people(api, sandbox)
    assert ReviewCase.objects.filter(event=second, status="open").exists()
    assert Delivery.objects.filter(event=second, raw_body__isnull=False).exists()

    exported = person("export", "--email", " ada.quill@EXAMPLE.org ")
    document = json.loads(exported)
    assert [s["key"] for s in document["submissions"]] == ["ada-first", second.key]
    assert document["submissions"][0]["payload"]["message"] == ADA_FIRST
    assert ADA_SECOND in document["submissions"][1]["deliveries"][0]["raw_body"]
    assert document["submissions"][1]["cases"][0]["kind"] == "permanent_failure"
    for value in (*BOB.values(), BOB_MESSAGE, "bob-1"):
        assert value.lower() not in exported.lower()
    dump = pg_dump()
    assert all(value.lower() in dump for value in ada_values())

    summary = person("erase", "--email", ADA["email"], "--reason", "Erasure request by email")
    assert "2 submissions of the person" in summary
    assert "removed 2 payloads" in summary and "removed 1 raw deliveries" in summary

    dump = pg_dump()
    for value in ada_values():
        assert value.lower() not in dump, value
    assert ADA["email"].lower().encode().hex() not in dump  # nor inside a bytea
    assert "quillfeather" not in dump and "442079460123" not in dump
    for value in (*BOB.values(), BOB_MESSAGE, "marchetti sheds"):
        assert value.lower() in dump, value

    entry = AuditEntry.objects.get(action="person_erased")
    assert entry.details["digest"] == person_digest(ADA["email"])
    assert sorted(entry.details["events"]) == sorted([str(first.pk), str(second.pk)])
    assert ADA["email"].lower() not in json.dumps(entry.details).lower()
    lookup = AuditEntry.objects.get(action="destination_lookup")
    assert lookup.details["record"] == {"name": "[erased]", "email": "[erased]"}
    assert lookup.details["personal_data_erased_by"] == entry.pk
    # Keys, fingerprints and decisions stay; what waited for a person is settled.
    first.refresh_from_db()
    assert (first.key, first.payload, first.contact_digest) == ("ada-first", None, "")
    assert op(first, "create_enquiry").status == "succeeded"
    case = ReviewCase.objects.get(event=second)
    assert (case.status, case.resolution_code) == ("closed", "person_erased")
    assert op(second, "create_enquiry").status == "cancelled"
    # The case's own trail says who closed it and why; it cannot be reopened.
    closed = AuditEntry.objects.get(case=case, action="case_closed")
    assert closed.actor_label.startswith("system:person erase")
    assert closed.reason == "Erasure request by email"
    assert closed.details == {"resolution_code": "person_erased", "erasure_entry": entry.pk}
    with pytest.raises(CaseActionRefusedError, match="erased"):
        case_reopen(case_id=case.pk, actor=make_user("rita", groups=("Reviewers",)), reason="r")

    records, events, operations = (
        sandbox.stats()["records"],
        Event.objects.count(),
        Operation.objects.count(),
    )
    again = post(api, ada_first(), key="ada-first")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["event_id"] == str(first.pk)
    _, path = hook_source("generic", name="website-hooks")
    assert deliver(Client(), path, ada_second_by_hook()).status_code == 200
    changed = post(api, {**ada_first(), "message": "Something else"}, key="ada-first")
    assert changed.status_code == 422  # the fingerprint still tells another payload apart
    assert (Event.objects.count(), Operation.objects.count()) == (events, operations)
    assert sandbox.stats()["records"] == records
    assert "ada.quill" not in pg_dump()


@pytest.mark.django_db
def test_a_person_onefold_does_not_know_is_no_data(source):
    for action in (["export"], ["erase", "--reason", "asked"]):
        with pytest.raises(CommandError, match="no data"):
            person(*action[:1], "--email", "nobody@example.org", *action[1:])
    assert not AuditEntry.objects.filter(action="person_erased").exists()


@pytest.mark.django_db
def test_a_dry_run_counts_and_changes_nothing(api):
    assert post(api, ada_first(), key="ada-first").status_code == 202
    summary = person("erase", "--email", ADA["email"], "--reason", "asked", "--dry-run")
    assert "would remove 1 payloads" in summary
    assert Event.objects.get(key="ada-first").payload is not None
    assert not AuditEntry.objects.filter(action="person_erased").exists()


TABLE = "idempotency_core_auditentry"


def refused(sql: str, params: list[Any], *, erasure: int | None = None) -> None:
    """`sql` is refused by the audit guard (in a savepoint, which undoes the setting)."""
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        if erasure is not None:
            cursor.execute("SELECT set_config('onefold.erasure', %s, true)", [str(erasure)])
        cursor.execute(sql, params)


@pytest.mark.django_db
def test_the_audit_trail_refuses_every_change_but_an_erasures(source):
    entry = audit_record(action="case_taken", system="test", reason="Ada Quillfeather took it")
    other = audit_record(action="case_closed", system="test")
    erasure = audit_record(action="person_erased", system="test")
    rewrite = f"UPDATE {TABLE} SET reason = 'x', details = %s::jsonb WHERE id = %s"
    mark = json.dumps({"personal_data_erased_by": erasure.pk})
    refused(f"UPDATE {TABLE} SET reason = 'x' WHERE id = %s", [entry.pk])
    refused(f"DELETE FROM {TABLE} WHERE id = %s", [entry.pk], erasure=erasure.pk)
    # The setting must name a person_erased entry, and the row must be marked with it.
    other_mark = json.dumps({"personal_data_erased_by": other.pk})
    refused(rewrite, [other_mark, entry.pk], erasure=other.pk)
    refused(rewrite, ["{}", entry.pk], erasure=erasure.pk)
    # Only reason and details; never the erasure's own entry.
    refused(
        f"UPDATE {TABLE} SET action = 'x', details = %s::jsonb WHERE id = %s",
        [mark, entry.pk],
        erasure=erasure.pk,
    )
    refused(rewrite, [mark, erasure.pk], erasure=erasure.pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('onefold.erasure', %s, true)", [str(erasure.pk)])
        cursor.execute(
            f"UPDATE {TABLE} SET reason = '[erased] took it', details = %s::jsonb WHERE id = %s",
            [mark, entry.pk],
        )
    entry.refresh_from_db()
    assert (entry.reason, entry.action) == ("[erased] took it", "case_taken")


@pytest.mark.django_db
def test_a_delivery_naming_the_address_only_in_its_raw_body_is_theirs(source) -> None:
    """No contact address (so no digest): the hook's raw body still names them."""
    body = json.dumps(
        {
            "form": "contact",
            "contact": {"name": ADA["name"]},
            "message": ADA_SECOND,
            "fields": {"reply_to": ADA["email"]},
        }
    ).encode()
    sample = Sample(
        "generic",
        body,
        "application/json",
        ("", "", ""),
        sign=sign_t_v1("Onefold-Signature"),
        extra_headers=(("Idempotency-Key", "ada-no-contact"),),
    )
    _, path = hook_source("generic", name="website-hooks")
    assert deliver(Client(), path, sample).status_code in (200, 202)
    event = Event.objects.get(key__endswith=":ada-no-contact")
    assert event.contact_digest == ""

    document = json.loads(person("export", "--email", ADA["email"]))
    assert [s["key"] for s in document["submissions"]] == [event.key]
    person("erase", "--email", ADA["email"], "--reason", "Asked")

    event.refresh_from_db()
    assert event.payload is None
    assert not Delivery.objects.filter(event=event, raw_body__isnull=False).exists()


@pytest.mark.django_db
def test_an_erasure_waits_for_an_attempt_in_flight(api) -> None:
    """A step being attempted now may still send what it read: refused, nothing changed."""
    assert post(api, ada_first(), key="ada-first").status_code == 202
    event = Event.objects.get(key="ada-first")
    Operation.objects.filter(pk=op(event, "create_enquiry").pk).update(
        status="running", claim_token=uuid.uuid4(), lease_expires_at=timezone.now()
    )
    with pytest.raises(CommandError, match="being attempted now"):
        person("erase", "--email", ADA["email"], "--reason", "Asked")
    assert Event.objects.get(pk=event.pk).payload is not None
    assert not AuditEntry.objects.filter(action="person_erased").exists()
