"""Finding a customer's submission, its page, and the console's own pages around them.

Submissions are made the real way (ingest, the engine against the sandbox); the
console is driven through Django's test client, as a browser would post.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from idempotency_core.models import Event, Operation
from tests.factories import completed, ingest, make_user, permanent_case

pytestmark = pytest.mark.django_db


def client_as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def rita():
    """A reviewer: contact details masked."""
    return make_user("rita", groups=("Reviewers",))


@pytest.fixture
def sue():
    """A superuser: sees contact details."""
    from django.contrib.auth.models import User

    return User.objects.create_superuser("sue", password="x")


def person(key: str, name: str, email: str, message: str = "") -> Event:
    return ingest(
        key,
        contact={"name": name, "email": email, "phone": "+44 20 7946 0001"},
        message=message or f"Quote please ({key}).",
    )


def search(client: Client, query: str):
    return client.get(reverse("console:search"), {"q": query})


def test_one_email_match_lands_on_the_submission_page(rita):
    event = person("s-1", "Grace Hopper", "grace@example.com")
    person("s-2", "Alan Turing", "alan@example.com")
    response = search(client_as(rita), "  Grace@Example.COM ")
    assert response.status_code == 302
    assert response["Location"] == reverse("console:submission-detail", args=[event.pk])


def test_the_email_is_matched_through_its_digest_and_never_sent_to_the_database(rita):
    person("s-3", "Grace Hopper", "grace@example.com")
    with CaptureQueriesContext(connection) as queries:
        search(client_as(rita), "grace@example.com")
        search(client_as(rita), "nobody-here@example.com")
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    assert "contact_digest" in sql
    # Neither address, matched or not, reaches a query: only its HMAC does.
    assert "grace@example.com" not in sql and "nobody-here" not in sql


def test_several_matches_list_masked_for_a_reviewer(rita):
    person("s-4", "Grace Hopper", "grace@example.com", "first")
    person("s-5", "Grace Hopper", "grace@example.com", "second")
    page = search(client_as(rita), "grace@example.com").content.decode()
    assert "2 submissions" in page and "matched by email address" in page
    assert "G. H." in page and "g***@example.com" in page
    assert "Grace Hopper" not in page and "grace@example.com</" not in page


def test_a_masked_name_search_matches_whole_words_and_shows_them_masked(rita, sue):
    event = person("s-6", "Grace Hopper", "grace@example.com")
    person("s-7", "Alan Turing", "alan@example.com")
    person("s-8", "Grace Brewster", "gb@example.com")
    found = search(client_as(sue), "hopp")
    assert found["Location"] == reverse("console:submission-detail", args=[event.pk])
    # A reviewer who may not see names finds a name they know, by whole words: the
    # result masked, and no name spelled out by trying its first letters.
    found = search(client_as(rita), "Hopper")
    assert found["Location"] == reverse("console:submission-detail", args=[event.pk])
    page = client_as(rita).get(found["Location"]).content.decode()
    assert "G. H." in page and "Grace Hopper" not in page
    several = search(client_as(rita), "grace").content.decode()
    assert "2 submissions" in several and "G. H." in several and "G. B." in several
    assert "Grace" not in several.split("<main")[1].split("</main>")[0].replace('value="grace"', "")
    partial = search(client_as(rita), "hopp").content.decode()
    assert "0 submissions" in partial and "whole words" in partial


@pytest.mark.parametrize("what", ["event key", "operation key", "reference", "id"])
def test_keys_and_references_find_their_submission(sandbox, rita, what):
    event = completed("ref-1")
    enquiry = Operation.objects.get(event=event, step="create_enquiry")
    query = {
        "event key": event.key,
        "operation key": enquiry.key,
        "reference": enquiry.destination_ref,
        "id": str(event.pk),
    }[what]
    response = search(client_as(rita), query)
    assert response["Location"] == reverse("console:submission-detail", args=[event.pk])


def test_a_case_number_opens_the_case(rita):
    case = permanent_case("num-1")
    response = search(client_as(rita), f"#{case.pk}")
    assert response["Location"] == reverse("console:case-detail", args=[case.pk])


def test_no_match_says_so(rita):
    page = search(client_as(rita), "no-such-key").content.decode()
    assert "No submission matches" in page


def test_the_search_box_is_on_every_console_page(rita):
    case = permanent_case("box-1")
    client = client_as(rita)
    for url in (
        reverse("console:dashboard"),
        reverse("console:case-list"),
        reverse("console:case-detail", args=[case.pk]),
        reverse("console:submission-detail", args=[case.event_id]),
        reverse("console:source-list"),
        reverse("console:reconciliation-runs"),
        reverse("console:bulk-replay-list"),
    ):
        page = client.get(url).content.decode()
        assert f'action="{reverse("console:search")}"' in page, url
        assert 'role="search"' in page, url


def test_a_submission_without_a_case_has_its_page_and_timeline(sandbox, sue):
    event = completed("page-1")
    assert not event.review_cases.exists()
    page = client_as(sue).get(reverse("console:submission-detail", args=[event.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    for text in (
        "Create the enquiry in the CRM",
        "Assign a follow-up task in the CRM",
        "Send the confirmation email",
        "Received (first time)",
        "try 1, worked",
        "Accepted by the mail server",
        "nothing about this submission needed a person",
        "Ada Lovelace",
    ):
        assert text in html, text
    record = Operation.objects.get(event=event, step="create_enquiry").destination_ref
    assert f"{sandbox.url}/crm/records/{record}" in html  # the link to the CRM record


def test_the_submission_page_lists_every_case_and_decision(sandbox, rita):
    case = permanent_case("page-2")
    client = client_as(rita)
    client.post(
        reverse("console:case-close", args=[case.pk]),
        {"confirm": "yes", "resolution_code": "spam_or_test", "reason": "A test from Bob."},
    )
    html = client.get(reverse("console:submission-detail", args=[case.event_id])).content.decode()
    assert f"Case #{case.pk} opened: Refused" in html
    assert "Closed (rita)" in html and "A test from Bob." in html
    assert "Spam or test" in html
    assert "A. L." in html and "Ada Lovelace" not in html  # masked for a reviewer


def test_an_unknown_submission_is_a_styled_404(rita):
    response = client_as(rita).get("/console/submissions/00000000-0000-0000-0000-000000000000/")
    assert response.status_code == 404
    assert "This page does not exist" in response.content.decode()


def test_the_root_leads_to_the_console(rita):
    response = Client().get("/")
    assert response.status_code == 302 and response["Location"] == reverse("console:dashboard")


def test_error_pages_are_styled(rita, settings):
    settings.DEBUG = False
    client = client_as(rita)
    missing = client.get("/console/nowhere/")
    assert missing.status_code == 404 and "This page does not exist" in missing.content.decode()
    wrong = client.get(reverse("console:case-close", args=[permanent_case("m-1").pk]))
    assert wrong.status_code == 405 and wrong["Allow"] == "POST"
    assert "does not take that kind of request" in wrong.content.decode()
    nora = make_user("nora", groups=("Reviewers",), staff=False)
    refused = client_as(nora).get(reverse("console:dashboard"))
    assert refused.status_code == 403 and "You are not allowed" in refused.content.decode()
    assert 'href="/console/"' in refused.content.decode()


def test_the_menu_names_reconciliation_bulk_replays_and_sources(rita):
    page = client_as(rita).get(reverse("console:dashboard")).content.decode()
    for name, url in (
        ("Reconciliation", reverse("console:reconciliation-runs")),
        ("Bulk replays", reverse("console:bulk-replay-list")),
        ("Sources", reverse("console:source-list")),
    ):
        assert f'href="{url}"' in page and name in page


def test_a_name_is_looked_for_among_the_newest_submissions_only(sue, monkeypatch):
    from review_console.submissions import selectors

    monkeypatch.setattr(selectors, "NAME_SEARCH_SCOPE", 2)
    person("old-1", "Grace Hopper", "grace@example.com")
    newer = [person(f"new-{n}", "Alan Turing", f"alan{n}@example.com") for n in range(2)]
    page = search(client_as(sue), "hopper").content.decode()
    assert "0 submissions" in page and "among the 2 most recent submissions" in page
    listed = search(client_as(sue), "turing").content.decode()
    assert "2 submissions" in listed
    assert all(reverse("console:submission-detail", args=[e.pk]) in listed for e in newer)
