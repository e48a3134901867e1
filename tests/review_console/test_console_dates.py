"""A date or moment typed into the console (or sent by a crafted form) that is not a
real one, or lies outside what the database holds, is a 400 with a clear message:
never a 500, never a query that puts SQL in PostgreSQL's log."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from idempotency_core.models import ReviewCase
from tests.factories import permanent_case

pytestmark = pytest.mark.django_db


def client_as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def group_token(client: Client) -> str:
    """The first group's cause, as the queue's link to the group's page carries it."""
    html = client.get(reverse("console:case-list")).content.decode()
    return unquote(html.split('href="?cause=', 1)[1].split('"', 1)[0])


@pytest.mark.parametrize(
    ("seen_until", "since"),
    [
        ("2026-13-45T00:00:00Z", ""),
        ("2026-02-30T10:00:00+00:00", ""),
        ("now", ""),
        (None, "0001-01-01T00:00:00-23:59"),
        (None, "9999-12-31T23:59:59-23:59"),
        (None, "2026-12-01T25:00:00Z"),
    ],
)
def test_an_impossible_moment_in_a_group_close_is_a_400(users, seen_until, since) -> None:
    cases = [permanent_case(f"dates-{n}") for n in range(3)]
    client = client_as(users["reviewer"])
    data = {
        "cause": group_token(client),
        "seen_until": seen_until or timezone.now().isoformat(),
        "preset": "spam_or_test",
    }
    if since:
        data["since"] = since
    response = client.post(reverse("console:cause-settle"), data)
    assert response.status_code == 400
    assert "not a valid" in response.content.decode()
    assert ReviewCase.objects.filter(pk__in=[c.pk for c in cases], status="open").count() == 3


@pytest.mark.parametrize("query", ["since=0001-01-01", "until=0001-01-01", "since=2026-13-45"])
def test_the_audit_trail_takes_any_date_without_a_500(users, query) -> None:
    client = client_as(users["superuser"])
    assert client.get(f"{reverse('console:audit-list')}?{query}").status_code in (200, 400)
    assert client.get(f"{reverse('console:audit-export')}?{query}").status_code in (200, 400)
