"""The console's personal data requests: only for `erase_personal_data`, POST-only, the
export a download, the erasure behind a confirmation that shows what would go, each
audited under the person's digest with the user who asked; the address kept nowhere
by the console itself (no URL, no message in the session)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse

from idempotency_core.models import AuditEntry, Event, Operation
from idempotency_core.privacy.person import person_digest
from tests.factories import ingest, make_user, permanent_case

pytestmark = pytest.mark.django_db

ADA = {"name": "Ada Quillfeather", "email": "ada.quill@example.org", "phone": "+44 20 7946 0123"}


def officer() -> User:
    user = make_user("olga", groups=("Reviewers",))
    user.user_permissions.add(Permission.objects.get(codename="erase_personal_data"))
    return user


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_only_holders_of_the_permission_reach_it() -> None:
    reviewer = signed_in(make_user("rita", groups=("Reviewers",)))
    assert reviewer.get(reverse("console:privacy")).status_code == 403
    assert reviewer.post(reverse("console:privacy-export"), {"email": "a@b.org"}).status_code == 403
    assert "Personal data" not in reviewer.get(reverse("console:dashboard")).text
    anonymous = Client().get(reverse("console:privacy"))
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    client = signed_in(officer())
    assert client.get(reverse("console:privacy")).status_code == 200
    assert "Personal data" in client.get(reverse("console:dashboard")).text
    for name in ("console:privacy-export", "console:privacy-erase"):
        assert client.get(reverse(name)).status_code == 405


def test_the_export_is_a_download_audited_by_digest() -> None:
    ingest("ada-1", contact=ADA, message="Ada's walnut kitchen")
    ingest("bob-1", contact={"name": "Bob", "email": "bob@example.net"}, message="Bob's shed")
    client = signed_in(officer())

    response = client.post(reverse("console:privacy-export"), {"email": ADA["email"].upper()})

    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="personal-data-')
    document = json.loads(response.content)
    assert [s["key"] for s in document["submissions"]] == ["ada-1"]
    assert "bob" not in response.content.decode().lower()
    entry = AuditEntry.objects.get(action="person_exported")
    assert (entry.actor_label, entry.details["digest"]) == (
        "user:olga",
        person_digest(ADA["email"]),
    )
    nothing = client.post(reverse("console:privacy-export"), {"email": "nobody@example.org"})
    assert "Onefold holds nothing about that address." in nothing.text


def test_the_erasure_shows_what_would_go_then_erases_with_the_reason() -> None:
    event = ingest("ada-1", contact=ADA, message="Ada's walnut kitchen")
    client = signed_in(officer())
    form = {"email": ADA["email"], "reason": "Asked by phone on 7 December", "crm": ""}

    page = client.post(reverse("console:privacy-erase"), form)

    assert page.status_code == 200 and "1 submission as Onefold read it" in page.text
    assert Event.objects.get(pk=event.pk).payload is not None
    assert not AuditEntry.objects.filter(action="person_erased").exists()

    done = client.post(reverse("console:privacy-erase"), {**form, "confirm": "yes"})

    assert done.status_code == 302 and done["Location"] == reverse("console:privacy")
    assert Event.objects.get(pk=event.pk).payload is None
    entry = AuditEntry.objects.get(action="person_erased")
    assert (entry.actor_label, entry.reason) == ("user:olga", "Asked by phone on 7 December")
    message = client.get(reverse("console:privacy")).text
    assert "Erased the personal data of 1 submission " in message
    for session in Session.objects.all():
        assert ADA["email"] not in json.dumps(session.get_decoded())


def test_a_case_the_erasure_closes_says_so_on_its_page_and_stays_closed() -> None:
    case = permanent_case("erase-case")
    address = case.operation.event.payload["contact"]["email"]
    form = {"email": address, "reason": "Asked by phone on 7 December", "crm": ""}
    client = signed_in(officer())
    client.post(reverse("console:privacy-erase"), {**form, "confirm": "yes"})

    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("closed", "person_erased")
    erasure = AuditEntry.objects.get(action="person_erased")
    closed = AuditEntry.objects.get(case=case, action="case_closed")
    assert (closed.actor_label, closed.reason) == ("user:olga", "Asked by phone on 7 December")
    assert closed.details["erasure_entry"] == erasure.pk
    assert closed.operation_id == case.operation_id
    reviewer = signed_in(make_user("rita", groups=("Reviewers",)))
    page = reviewer.get(reverse("console:case-detail", args=[case.pk])).text
    assert "Asked by phone on 7 December" in page
    assert reverse("console:case-reopen", args=[case.pk]) not in page
    assert "It cannot be reopened: The person&#x27;s data was erased" in page

    reopen = reviewer.post(
        reverse("console:case-reopen", args=[case.pk]), {"confirm": "yes", "reason": "oops"}
    )
    assert reopen.status_code in (200, 302)
    case.refresh_from_db()
    assert case.status == "closed"
    assert Operation.objects.get(pk=case.operation_id).status == "cancelled"
    assert not AuditEntry.objects.filter(case=case, action="case_reopened").exists()


def test_an_erasure_without_a_reason_is_refused() -> None:
    event = ingest("ada-1", contact=ADA, message="Ada's walnut kitchen")
    client = signed_in(officer())
    page = client.post(
        reverse("console:privacy-erase"), {"email": ADA["email"], "reason": "", "confirm": "yes"}
    )
    assert page.status_code == 200 and "This field is required" in page.text
    assert Event.objects.get(pk=event.pk).payload is not None
