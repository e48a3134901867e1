"""A plain Reviewer finishes the kinds only Replay admins could finish before, in
headless Chromium, counted from the dashboard as test_reviewer_day_browser.py counts
(a click, a typed field and a key press that submits each count one).

A refused step, a step Onefold gave up on and a held confirmation back under its
limits: *Next case*, *Try again…*, Enter (the confirmation's button has the focus,
its reason preset): three actions, the same replay with the original key. An
unreadable submission: *Next case*, *Hand on to Settings admins*: two.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from idempotency_core.models import Operation
from tests.factories import permanent_case
from tests.support.browser import browser, page, sign_in  # noqa: F401  (fixtures)
from tests.support.case_kinds import gave_up, held_confirmation
from tests.support.console_pages import unreadable_delivery

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_a_reviewer_settles_or_hands_on_each_kind_in_three_actions(
    page,  # noqa: F811
    users,
    sandbox,
    settings,
):
    # Oldest first: Next case gives them in this order.
    cases = {
        "refused": permanent_case("fin-refused"),
        "gave up": gave_up("fin-gave-up"),
        "confirmation held": held_confirmation(settings),
    }
    unreadable = unreadable_delivery()
    sign_in(page, "rita")
    counts = {}
    for name, case in cases.items():
        page.goto("/console/")
        actions = 0
        page.locator("button:has-text('Next case')").first.click()
        actions += 1
        page.wait_for_url(f"**/console/cases/{case.pk}/")
        page.click("button:has-text('Try again…')")
        actions += 1
        expect(page.locator("button:has-text('Try again')").last).to_be_focused()
        page.keyboard.press("Enter")
        actions += 1
        expect(page.locator(".messages")).to_contain_text("will be tried again shortly")
        operation = Operation.objects.get(pk=case.operation_id)
        assert (operation.status, operation.next_trigger) == ("retry_scheduled", "replay"), name
        counts[name] = actions
    page.goto("/console/")
    page.locator("button:has-text('Next case')").first.click()
    page.wait_for_url(f"**/console/cases/{unreadable.pk}/")
    text = page.locator("main").inner_text()
    assert "link below" not in text and "Hand it on to the Settings admins" in text
    page.click("#hand-on button")
    expect(page.locator(".messages")).to_contain_text("handed on to Settings admins")
    unreadable.refresh_from_db()
    assert (unreadable.status, unreadable.owner_id) == ("open", None)
    counts["unreadable"] = 2
    assert all(count <= 3 for count in counts.values()), counts
