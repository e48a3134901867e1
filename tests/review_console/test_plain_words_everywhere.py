"""Every other console page a Reviewer or a Settings admin opens, scanned as the case
pages are (test_plain_words.py): the audit list, the sources and a source's page, the
field-map editor and its preview, the reconciliation pages, the settings pages (each
section's editor, the history, a version, who receives a case), the customer
journey, and My notifications. Nothing technical in the main text: codes, keys,
record ids, "operation", "destination", "delivery", "field map", "audit trail"... go
under the page's "Technical details".
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from review_console.cases.bulk import bulk_replay_run
from review_console.cases.causes import case_cause
from review_console.models import BulkReplayJob
from tests.factories import make_user, permanent_case
from tests.support.console_pages import page_urls, seed
from tests.support.jargon import jargon_in, main_text, stored_keys

pytestmark = pytest.mark.django_db

# Pages scanned elsewhere: case pages, their confirmations, the queue, the dashboard
# and submissions (test_plain_words.py); bulk replays' pages with jobs that ran, below.
SCANNED_ELSEWHERE = ("/cases/", "/submissions/", "/bulk-replays/")


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _settings_pages(client: Client) -> list[tuple[str, str, dict | None]]:
    """Beside page_urls' settings pages: each section's editor, the other forms' journey."""
    form = reverse("console:settings-form", args=["website", "contact"])
    pages: list[tuple[str, str, dict | None]] = [
        ("get", reverse("console:journey", args=["website", "*"]), None),
    ]
    sections = re.findall(r'id="edit-([a-z_]+)"', client.get(form).content.decode())
    assert len(sections) >= 3, sections
    pages += [
        ("get", reverse("console:settings-section", args=["website", "contact", s]), None)
        for s in sections
    ]
    return pages


def _other_pages(seeded: dict, client: Client) -> list[tuple[str, str, dict | None]]:
    dashboard = reverse("console:dashboard")
    return [
        (method, url, data)
        for method, url, data in page_urls(seeded, client)
        if not any(part in url for part in SCANNED_ELSEWHERE) and url != dashboard
    ]


def test_no_other_page_a_reviewer_or_settings_admin_opens_says_anything_technical(
    sandbox, ambiguous_case, users
):
    seeded = seed(sandbox, ambiguous_case, users)
    admin = make_user("sia", groups=("Settings admins",))
    roles = {"reviewer": _client(users["reviewer"]), "settings admin": _client(admin)}
    pages = _other_pages(seeded, roles["settings admin"]) + _settings_pages(roles["settings admin"])
    keys = stored_keys()
    found: dict[str, list[str]] = {}
    opened: set[str] = set()
    for role, client in roles.items():
        for method, url, data in pages:
            response = getattr(client, method)(url, data or {})
            if response.status_code == 403:
                continue  # not a page of this role
            assert response.status_code == 200, (role, method, url, response.status_code)
            opened.add(url)
            problems = jargon_in(main_text(response.content.decode()), keys)
            if problems:
                found[f"{role} {method} {url}"] = sorted(set(problems))
    assert opened == {url for _, url, _ in pages}, "a page nobody may open is no test"
    assert not found, "\n".join(f"{u}: {p}" for u, p in found.items())


def test_the_bulk_replay_pages_say_nothing_technical(sandbox, ambiguous_case, users):
    """A cause's group tried again as a whole (its filter is the cause's code, step,
    answer), and every open case tried again (some refused: the ambiguous one needs a
    look in the CRM first): the confirmation, the list and each job's page, as the
    Replay admin who started them reads them, once the jobs ran."""
    seed(sandbox, ambiguous_case, users)
    cause, count = case_cause(permanent_case("bulk-perm-again")) or (None, 0)
    assert cause is not None and count >= 2
    client = _client(users["replay_admin"])
    new = reverse("console:bulk-replay-new")
    pages: list[tuple[str, dict]] = []
    for params in ({"cause": cause.token()}, {}):
        pages.append((new, params))
        started = client.post(new, {**params, "confirm": "yes", "reason": "The CRM is fixed."})
        assert started.status_code == 302, started.content.decode()[:2000]
    jobs = list(BulkReplayJob.objects.order_by("pk"))
    assert len(jobs) == 2 and jobs[0].filter_description
    for job in jobs:
        assert bulk_replay_run(job_id=job.pk, chunk_seconds=60) == "finished"
    job_statuses = {item.status for job in jobs for item in job.items.all()}
    assert {"replayed", "refused"} <= job_statuses, job_statuses
    pages.append((reverse("console:bulk-replay-list"), {}))
    pages += [(reverse("console:bulk-replay-detail", args=[job.pk]), {}) for job in jobs]
    keys = stored_keys()
    found: dict[str, list[str]] = {}
    for url, params in pages:
        response = client.post(url, params) if url == new else client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        problems = jargon_in(main_text(response.content.decode()), keys)
        if problems:
            found[f"{url} {params}"] = sorted(set(problems))
    assert not found, "\n".join(f"{u}: {p}" for u, p in found.items())


def test_the_personal_data_pages_say_nothing_technical(sandbox, ambiguous_case, users):
    """The Personal data page, an erasure's confirmation (what would go, in words and
    numbers) and the page after it, as a Reviewer who may erase reads them."""
    seed(sandbox, ambiguous_case, users)
    officer = make_user("olga", groups=("Reviewers",))
    officer.user_permissions.add(Permission.objects.get(codename="erase_personal_data"))
    client = _client(officer)
    form = {"email": "ada@example.com", "reason": "Asked by phone", "crm": "on"}
    pages = {
        "page": client.get(reverse("console:privacy")),
        "confirmation": client.post(reverse("console:privacy-erase"), form),
        "after": client.post(
            reverse("console:privacy-erase"), {**form, "confirm": "yes"}, follow=True
        ),
    }
    keys = stored_keys()
    found: dict[str, list[str]] = {}
    for name, response in pages.items():
        assert response.status_code == 200, name
        text = main_text(response.content.decode())
        problems = jargon_in(text, keys)
        if problems:
            found[name] = sorted(set(problems))
    assert "Erased the personal data of" in main_text(pages["after"].content.decode())
    assert not found, "\n".join(f"{u}: {p}" for u, p in found.items())
