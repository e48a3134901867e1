"""Cases of one cause decided together by a plain Reviewer, in headless Chromium,
counted as test_reviewer_day_browser.py counts (a click, a typed field and a key press
that submits each count one).

- From the dashboard: *Next case* gives the group when the oldest waiting case shares
  its cause with others, its decision open, its reason filled in and its button
  focused; Enter settles the group: two actions.
- From the queue: the group's one link opens the same decision: three actions from
  the dashboard.
- On a phone, with three groups on the queue, the first group (or case) starts on
  the first screen.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from idempotency_core.models import AuditEntry, ReviewCase
from tests.factories import permanent_case
from tests.support.browser import browser, page, sign_in  # noqa: F401  (fixtures)
from tests.support.case_kinds import waiting_case

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PHONE = {"width": 390, "height": 844}


def refused(key: str, status: int) -> ReviewCase:
    """A create the CRM refused with `status`: one cause per status."""
    return waiting_case(ReviewCase.Kind.PERMANENT, key, {"http_status": status})


def settle_by_enter(on) -> None:
    button = on.locator("#group-decision button[type=submit]").first
    expect(button).to_be_focused()
    on.keyboard.press("Enter")
    on.wait_for_load_state()
    expect(on.locator(".messages")).to_contain_text("with the same cause")


def test_next_case_gives_a_group_decided_with_one_more_action(page, users):  # noqa: F811
    group = [refused(f"grp-next-{n}", 409) for n in range(4)]
    other = permanent_case("grp-next-other")  # another cause, younger: left alone
    sign_in(page, "rita")
    actions = 0
    page.locator("button:has-text('Next case')").first.click()
    page.wait_for_load_state()
    actions += 1
    expect(page.locator("#group-decision")).to_contain_text("Close all 4")
    note = page.locator("#group-decision input[name=note]")
    assert note.input_value(), "the reason is filled in"
    settle_by_enter(page)
    actions += 1
    assert actions <= 3
    for case in group:
        case.refresh_from_db()
        assert case.status == "closed", case.pk
    entries = AuditEntry.objects.filter(action="case_closed", case__in=group)
    assert entries.count() == 4 and all(e.actor_id == users["reviewer"].pk for e in entries)
    other.refresh_from_db()
    assert other.status == "open"


def test_a_group_on_the_queue_is_decided_in_three_actions_from_the_dashboard(
    page,  # noqa: F811
    users,
):
    permanent_case("grp-q-first")  # the oldest, alone: Next case would give it
    group = [refused(f"grp-q-{n}", 422) for n in range(3)]
    sign_in(page, "rita")
    actions = 0
    page.click("a:has-text('Open the queue')")
    page.wait_for_load_state()
    actions += 1
    page.locator(".cause-group a:has-text('Decide all 3')").first.click()
    page.wait_for_load_state()
    actions += 1
    settle_by_enter(page)
    actions += 1
    assert actions <= 3
    assert {c.status for c in ReviewCase.objects.filter(pk__in=[c.pk for c in group])} == {"closed"}


def test_on_a_phone_the_first_group_or_case_is_on_the_first_screen(
    browser,  # noqa: F811
    live_server,
    _seed_restored,
    users,
):
    for status in (400, 409, 422):
        for n in range(3):
            refused(f"grp-phone-{status}-{n}", status)
    for n in range(3):
        permanent_case(f"grp-phone-single-{n}")
    context = browser.new_context(viewport=PHONE, base_url=live_server.url)
    page = context.new_page()  # noqa: F811
    page.set_default_timeout(20_000)
    sign_in(page, "rita", next_url="/console/cases/")
    assert page.locator(".cause-group").count() == 3
    first = page.locator(".cause-group, .case-card").first.bounding_box()
    assert first is not None and first["y"] < PHONE["height"], first
    # Its decision too: one tap away, on the same screen.
    link = page.locator(".cause-group a:has-text('Decide all')").first.bounding_box()
    assert link is not None and link["y"] + link["height"] <= PHONE["height"], link
    assert page.evaluate("document.documentElement.scrollWidth") == PHONE["width"]
    context.close()
