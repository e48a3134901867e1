"""Every kind of case, settled or handed on by a plain Reviewer in three actions or
fewer from the dashboard, in headless Chromium.

One open case of each ReviewCase kind (tests/support/case_kinds.py); the Reviewer
("rita", in Reviewers only) presses *Next case* on the dashboard until nothing waits,
and each case is decided by the plan of its kind: the decision its page leads with,
or *Hand on* where a Reviewer may not decide it. Counted as
test_reviewer_day_browser.py counts: a click, a typed field and a key press that
submits each count one; reading does not. Each case then is settled (resolved or
closed), or what the Reviewer asked for is under way (a try again or a merge queued),
or it was handed on (open, nobody's, routed to the group that decides it).
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from idempotency_core.models import CaseRoute, Operation, ReviewCase
from tests.support.browser import browser, page, sign_in  # noqa: F401  (fixtures)
from tests.support.case_kinds import one_of_each_kind

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

TRY_AGAIN = ("click", "button:has-text('Try again…')"), ("enter", "button:has-text('Try again')")
CLOSE = (("click", ".close-row button:has-text('Handled elsewhere')"),)
HAND_ON = (("click", "#hand-on button"),)
# What a Reviewer does with each kind after *Next case*: the page's own lead.
PLANS: dict[str, tuple[tuple[str, str], ...]] = {
    "ambiguous_outcome": (
        ("click", "button:has-text('Look it up in the CRM')"),
        ("click", "#lookup-result button:has-text('It is there: resolve')"),
    ),
    "interrupted_send": (("click", "button:has-text('Customer has it')"),),
    "permanent_failure": TRY_AGAIN,
    "retries_exhausted": TRY_AGAIN,
    "suspected_duplicate": (
        ("click", "a:has-text('Merge into one…')"),
        ("click", "button:has-text('Merge now')"),
    ),
    "duplicate_held": (("click", "button:has-text('Same enquiry')"),),
    "duplicate_rule": (("click", "button:has-text('Link to the CRM')"),),
    "late_replay": CLOSE,
    "confirmation_held": TRY_AGAIN,
    "unreadable_submission": HAND_ON,
    "recon_missing": TRY_AGAIN,
    "recon_duplicate": (("click", "button:has-text('Not a duplicate: keep both')"),),
    "recon_orphan": CLOSE,
    "recon_removed": CLOSE,
    "recon_changed": CLOSE,
    "recon_stuck": TRY_AGAIN,
}


def outcome(case: ReviewCase) -> str:
    """Where the case stands after the Reviewer's actions."""
    case.refresh_from_db()
    if case.status in (ReviewCase.Status.RESOLVED, ReviewCase.Status.CLOSED):
        return "settled"
    if case.owner_id is None and CaseRoute.objects.filter(case=case).exists():
        return "handed on"
    if Operation.objects.filter(arguments__case_id=case.pk).exists():
        return "merge under way"
    if case.operation_id and Operation.objects.get(pk=case.operation_id).next_trigger == "replay":
        return "try again under way"
    return f"not decided ({case.status}, owner {case.owner_id})"


def test_a_reviewer_settles_or_hands_on_every_kind_in_three_actions_from_the_dashboard(
    page,  # noqa: F811
    users,
    sandbox,
    ambiguous_case,
    settings,
):
    made = one_of_each_kind(sandbox, ambiguous_case, settings)
    cases = {case.pk: kind for kind, case in made.items()}
    assert set(cases.values()) == set(PLANS)
    sign_in(page, "rita")
    counts: dict[str, int] = {}
    outcomes: dict[str, str] = {}
    for _ in range(len(cases)):
        page.goto("/console/")
        page.locator("button:has-text('Next case')").first.click()
        page.wait_for_load_state()
        case_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        kind = cases[case_id]
        assert kind not in counts, f"{kind} given twice"
        actions = 1
        for how, selector in PLANS[kind]:
            if how == "enter":
                expect(page.locator(selector).last).to_be_focused()
                page.keyboard.press("Enter")
            else:
                page.locator(selector).first.click()
            page.wait_for_load_state()
            actions += 1
        expect(page.locator(".messages")).to_be_visible()
        counts[kind] = actions
        outcomes[kind] = outcome(ReviewCase.objects.get(pk=case_id))
    undecided = {k: o for k, o in outcomes.items() if o.startswith("not decided")}
    assert not undecided, undecided
    assert set(counts) == set(PLANS) and all(n <= 3 for n in counts.values()), counts
    page.goto("/console/")
    expect(page.locator(".next-case")).to_contain_text("No case waits for someone")
