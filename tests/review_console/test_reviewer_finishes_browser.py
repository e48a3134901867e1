"""A plain Reviewer finishes the kinds only Replay admins could finish before, in
headless Chromium, counted from the dashboard as test_reviewer_day_browser.py counts
(a click, a typed field and a key press that submits each count one).

A refused step, a step Onefold gave up on and a held confirmation back under its
limits: *Next case*, *Try again…*, Enter (the confirmation's button has the focus,
its reason preset): three actions, the same replay with the original key. An
unreadable submission: *Next case*, *Hand on to Settings admins*: two.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from idempotency_core.audit.cases import review_case_open
from idempotency_core.audit.subjects import operation_subject
from idempotency_core.execution.engine import operation_execute, operation_hold_later
from idempotency_core.models import ConfirmationAllowance, Operation, ReviewCase
from tests.factories import ingest, op, permanent_case
from tests.support.browser import browser, page, sign_in  # noqa: F401  (fixtures)
from tests.support.console_pages import unreadable_delivery

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def gave_up(key: str) -> ReviewCase:
    """A step whose automatic tries were spent on answers that prove nothing was made."""
    event = ingest(key, message=f"Please call back ({key}).")
    operation = op(event, "create_enquiry")
    Operation.objects.filter(pk=operation.pk).update(status=Operation.Status.NEEDS_REVIEW)
    held = operation_hold_later(operation, now=timezone.now())
    case, _ = review_case_open(
        kind=ReviewCase.Kind.RETRIES_EXHAUSTED,
        subject=operation_subject(operation.pk),
        summary="create_enquiry: 5 tries, each HTTP 503.",
        operation=operation,
        evidence={"http_status": 503, "held_operations": [{"id": i, "step": s} for i, s in held]},
        system="test",
    )
    return case


def held_confirmation(settings) -> ReviewCase:
    """The second confirmation to one address in a day, held by a limit of one; then a
    day passes, so it is under the limit again."""
    settings.ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY = 1
    for n in range(2):
        event = ingest(
            f"fin-held-{n}",
            contact={"name": "Grace", "email": "grace@example.com"},
            message=f"Enquiry {n}.",
        )
        for operation in event.operations.order_by("position"):
            operation_execute(operation_id=operation.pk)
    ConfirmationAllowance.objects.update(granted_at=timezone.now() - timedelta(hours=25))
    return ReviewCase.objects.get(kind="confirmation_held")


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
