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
from django.test import Client
from django.urls import reverse

from tests.factories import make_user
from tests.support.console_pages import page_urls, seed
from tests.support.jargon import jargon_in, main_text, stored_keys

pytestmark = pytest.mark.django_db

# Pages scanned elsewhere: case pages, their confirmations, the queue, the dashboard,
# bulk replays and submissions (test_plain_words.py).
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
