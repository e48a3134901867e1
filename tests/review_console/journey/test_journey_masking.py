"""A viewer without `view_contact_details` sees the journey rendered from masked values,
never the stored text with the real values scrubbed out of it: a value the template
transformed (URL-encoded, upper-cased, sliced) cannot be recognised in rendered text,
so nothing of it may come from there."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import completed, configured

pytestmark = pytest.mark.django_db

FORM = {
    "enquiry": {
        "fields": {
            "callback": "{{ contact.phone|urlencode }}",
            "who": "{{ contact.name|upper }}",
            "where": "{{ fields.address|urlencode }}",
        }
    },
    "task": {"title": "Call {{ contact.phone|cut:' ' }} ({{ contact.email|urlencode }})"},
    "confirmation": {
        "subject": "Thanks {{ contact.first_name|lower }}",
        "text": "We will call {{ contact.phone|urlencode }} or write to {{ contact.email|upper }}.",
    },
}
SECRETS = (
    "7946",
    "ada%40example.com",
    "ADA@EXAMPLE.COM",
    "LOVELACE",
    "lovelace",
    "Lovelace",
    "Crescent",
    "ada@example.com",
)


def page_for(user) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(reverse("console:journey", args=["website", "contact"]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_reviewer_sees_nothing_of_the_stored_values_however_transformed(users, sandbox):
    configured({"contact": FORM})
    completed("journey-mask-1", fields={"address": "12 Crescent Road"})
    # The stored content holds the real values, transformed.
    shown = page_for(users["superuser"])
    assert "%2B44%2020%207946%200000" in shown and "ADA@EXAMPLE.COM" in shown
    page = page_for(users["reviewer"])
    for secret in SECRETS:
        assert secret not in page, secret
    # Rendered from the masked values instead, the stored version's templates.
    assert "a%2A%2A%2A%40example.com" in page
    assert "Contact details are masked" in page


def test_a_reviewer_sees_the_language_and_assignee_the_real_values_choose(users, sandbox):
    # The values that only choose among configured options (a language code, a key of
    # an assignee map) are kept when they are one of those options: they say nothing
    # the configuration does not.
    configured(
        {
            "contact": {
                "task": {"assignee": {"from_field": "fields.region", "map": {"north": "ana"}}},
                "confirmation": {
                    "subject": "Thanks",
                    "language_field": "fields.lang",
                    "languages": {"fr": {"subject": "Merci"}},
                },
            }
        }
    )
    completed("journey-mask-2", fields={"lang": "fr", "region": "north", "address": "12 Crescent"})
    client = Client()
    client.force_login(users["reviewer"])
    response = client.get(reverse("console:journey", args=["website", "contact"]))
    first = response.context["journey"].paths[0]
    assert ("Subject", "Merci") in first.customer.lines
    assert ("Language", "fr") in first.customer.lines
    assert any(k == "Assignee" and v.startswith("ana ") for k, v in first.task.lines)
    assert "Crescent" not in response.content.decode()
