"""Hand on in headless Chromium, counted as test_click_counts_browser.py counts: a plain
Reviewer holding a case she cannot decide (a refusal whose replay is a Replay admin's)
gives it on from the dashboard in two actions, and it is first in a Replay admin's
Next case."""

from __future__ import annotations

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from idempotency_core.models import AuditEntry, CaseRoute, ReviewCase
from tests.factories import permanent_case
from tests.support.browser import browser, page, sign_in  # noqa: F401  (fixtures)
from tests.support.case_kinds import waiting_case

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_a_reviewer_hands_a_case_on_in_two_actions_from_the_dashboard(
    page,  # noqa: F811
    users,
    client,
):
    older = permanent_case("browser-older")
    # Another cause than the older case's, so that Next case gives it alone.
    case = waiting_case(ReviewCase.Kind.PERMANENT, "browser-hand-on", {"http_status": 422})
    ReviewCase.objects.filter(pk=older.pk).update(owner=users["superuser"], status="in_progress")
    sign_in(page, "rita")
    page.click("button:has-text('Next case')")  # 1
    page.wait_for_url(f"**/console/cases/{case.pk}/")
    page.click("#hand-on button")  # 2
    expect(page.locator(".messages")).to_contain_text("handed on to Replay admins")
    case.refresh_from_db()
    assert (case.owner, case.status) == (None, "open")
    assert CaseRoute.objects.get(case=case).target == "Replay admins"
    assert AuditEntry.objects.filter(action="case_handed_on", case=case).count() == 1
    client.force_login(users["replay_admin"])
    taken = client.post(reverse("console:case-next"))
    assert taken["Location"] == reverse("console:case-detail", args=[case.pk])
