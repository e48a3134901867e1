"""One sentence, then the decision, as the server renders it.

Every case page of every kind, open and settled, as a superuser (every button) and as
a Reviewer (masked contact, no replay), opens with what happened and what to do, in
plain words, and says nothing technical outside "Technical details": the scan of
tests/support/jargon.py over the main text finds no code, key, id, exception class,
protocol, status code, actor id, "operation", "idempotency", "ambiguous" or
"retryable". The same cases after a lookup, while a replay runs, and after a
failed replay are scanned too. The browser test (cases/test_reviewer_day_browser.py)
repeats the scan on the live page.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import ReviewCase
from idempotency_core.review.lookup import operation_destination_lookup
from idempotency_core.review.replay import operation_replay
from review_console import glossary
from tests.factories import permanent_case
from tests.support.console_pages import ROUTED_CARD, page_urls, seed, settings_admin_pages
from tests.support.jargon import jargon_in, main_text, stored_keys

pytestmark = pytest.mark.django_db


def _scan(client: Client, urls: list[str]) -> dict[str, list[str]]:
    keys = stored_keys()
    found = {}
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        text = main_text(response.content.decode())
        assert "What to do:" in text or "/compare/" in url, url
        problems = jargon_in(text, keys)
        if problems:
            found[url] = sorted(set(problems))
    return found


def test_no_case_page_says_anything_technical_outside_its_details(sandbox, ambiguous_case, users):
    seeded = seed(sandbox, ambiguous_case, users)
    assert {c.kind for c in ReviewCase.objects.all()} == set(glossary.CASE_KINDS)
    rex = users["replay_admin"]
    # A lookup's answer on the page, a replay under way, and a replay that failed again.
    looked = seeded["cases"]["ambiguous_outcome"]
    operation_destination_lookup(operation_id=looked.operation_id, actor=rex, case=looked)
    running = permanent_case("pw-running")
    operation_replay(operation_id=running.operation_id, actor=rex, reason="CRM fixed")
    failed = permanent_case("pw-failed")
    operation_replay(operation_id=failed.operation_id, actor=rex, reason="CRM fixed")
    sandbox.fault("create_record", "http_400")
    operation_execute(operation_id=failed.operation_id)
    failed.refresh_from_db()
    assert (failed.status, failed.owner_id) == ("open", None)  # back in the queue
    client = Client()
    client.force_login(users["reviewer"])
    text = main_text(client.get(reverse("console:case-detail", args=[failed.pk])).content.decode())
    assert "It was tried again, and that failed too, so it is back in the queue." in text
    urls = [reverse("console:case-detail", args=[c.pk]) for c in ReviewCase.objects.all()]
    urls.append(reverse("console:case-compare", args=[seeded["cases"]["suspected_duplicate"].pk]))
    for role in ("superuser", "reviewer", "replay_admin"):
        client = Client()
        client.force_login(users[role])
        found = _scan(client, urls)
        assert not found, role + "\n" + "\n".join(f"{u}: {p}" for u, p in found.items())


def test_the_scan_can_fail(sandbox, ambiguous_case, users):
    """The same page with its disclosures opened holds every kind of jargon."""
    case = ambiguous_case("pw-can-fail")
    client = Client()
    client.force_login(users["superuser"])
    html = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    opened = html.replace('class="technical"', 'class="opened"')
    found = " ".join(jargon_in(main_text(opened), stored_keys()))
    for kind in ("code:", "key:", "operation:", "exception class:", "ambiguous:"):
        assert kind in found, kind


def test_a_case_page_opens_with_what_happened_and_what_to_do(users):
    case = permanent_case("pw-sentence")
    client = Client()
    client.force_login(users["reviewer"])
    text = main_text(client.get(reverse("console:case-detail", args=[case.pk])).content.decode())
    assert "The CRM refused the enquiry for A. L.: it did not accept the details" in text
    assert "What to do: Correct the cause" in text
    assert "then try it again" in text  # a refusal: a Reviewer may try again
    # People are named as people, times as "... ago" with the exact time in a title.
    assert "Onefold" in text and "user:" not in text and "system:" not in text


def test_no_decision_page_or_queue_says_anything_technical(sandbox, ambiguous_case, users):
    """The confirmations a decision opens (one case's, *Hand on* among them, or a whole
    filter's), the queue and the dashboard: the same scan. And a Settings admin's
    dashboard once a case was handed on to their group, with its *Next case* card."""
    seeded = seed(sandbox, ambiguous_case, users)
    admin, admin_pages = settings_admin_pages(seeded, users["reviewer"])
    clients = {"superuser": Client(), "settings admin": Client()}
    clients["superuser"].force_login(users["superuser"])
    clients["settings admin"].force_login(admin)
    keys = stored_keys()
    found = {}
    pages = [
        ("superuser", method, url, data)
        for method, url, data in page_urls(seeded, clients["superuser"])
        if "/cases/" in url or url == reverse("console:dashboard")
    ]
    # Trying a whole filter again: the queue's choices are technical details there.
    pages.append(
        ("superuser", "post", reverse("console:bulk-replay-new"), {"kind": "permanent_failure"})
    )
    pages += [("settings admin", method, url, data) for method, url, data in admin_pages]
    texts = {}
    for role, method, url, data in pages:
        response = getattr(clients[role], method)(url, data or {})
        assert response.status_code == 200, (role, url)
        text = texts[f"{role} {method} {url}"] = main_text(response.content.decode())
        problems = jargon_in(text, keys)
        if problems:
            found[f"{role} {method} {url}"] = sorted(set(problems))
    # The pages meant were scanned: the card only a Settings admin gets, the hand on's.
    dashboard = texts[f"settings admin get {reverse('console:dashboard')}"]
    assert ROUTED_CARD in dashboard, dashboard[:300]
    hand_on = reverse("console:case-hand-on", args=[seeded["cases"]["permanent_failure"].pk])
    assert f"superuser post {hand_on}" in texts, "no Hand on confirmation was scanned"
    assert "hand it on to Replay admins" in texts[f"superuser post {hand_on}"]
    assert not found, "\n".join(f"{u}: {p}" for u, p in found.items())


def test_no_submission_page_says_anything_technical(sandbox, ambiguous_case, users):
    """A submission's page: what Onefold did, its CRM numbers and keys under Technical
    details."""
    seeded = seed(sandbox, ambiguous_case, users)
    client = Client()
    client.force_login(users["reviewer"])
    keys = stored_keys()
    found = {}
    for method, url, _ in page_urls(seeded, client):
        if method == "get" and "/submissions/" in url:
            text = main_text(client.get(url).content.decode())
            problems = jargon_in(text, keys)
            if problems:
                found[url] = sorted(set(problems))
    assert not found, "\n".join(f"{u}: {p}" for u, p in found.items())
