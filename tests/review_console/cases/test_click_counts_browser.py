"""How many actions a reviewer needs, counted in headless Chromium.

Counted from the case page (from the dashboard for the search): a click, a key press
that submits, and typing a reason (or a search) each count one; reading the page
does not. A decision is one button whose reason is preset; where it cannot
be undone (a merge, a replay) the confirmation's button has the focus, so Enter
confirms. Each scenario then checks its outcome where it happened: the sandbox CRM's
counts, after a real worker cluster ran what the console queued. The same tasks
counted from the dashboard are in test_reviewer_day_browser.py.

The last test is the merge race of the issue in two browsers: the same pair in
opposite directions, both confirmation pages open, both submitted; exactly one is
accepted, the other refused with a message, and one record is left.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from idempotency_core.models import Operation, ReviewCase
from tests.factories import completed, duplicate_case, merge_operation, permanent_case
from tests.support.browser import browser, page, sign_in  # noqa: F401  (fixtures)
from tests.support.processes import wait_for

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


class Actions:
    """A reviewer's actions on `page`, counted."""

    def __init__(self, on) -> None:
        self.page = on
        self.count = 0

    def click(self, selector: str) -> None:
        self.count += 1
        self.page.click(selector)

    def type(self, text: str) -> str:
        """Types into the focused element (no click first); its name."""
        self.count += 1
        self.page.wait_for_load_state()
        focused = self.page.evaluate("document.activeElement.name")
        self.page.keyboard.type(text)
        return focused

    def enter(self) -> None:
        self.count += 1
        self.page.keyboard.press("Enter")
        self.page.wait_for_load_state()


def test_merge_a_suspected_duplicate_in_three_actions(
    page,  # noqa: F811
    users,
    sandbox,
    qcluster_factory,
):
    case = duplicate_case(sandbox)
    assert sandbox.stats()["records"] == 2
    sign_in(page, "rita", next_url=f"/console/cases/{case.pk}/")
    act = Actions(page)
    act.click("text=Merge into one…")
    act.click("button:has-text('Merge now')")
    expect(page.locator(".messages")).to_contain_text("will be merged")
    assert act.count <= 3, act.count
    qcluster_factory()
    wait_for(lambda: merge_operation(case).status == "succeeded", timeout=60, what="the merge")
    assert sandbox.stats()["records"] == 1
    assert ReviewCase.objects.get(pk=case.pk).status == "resolved"


def test_replay_a_failed_task_in_three_actions(
    page,  # noqa: F811
    users,
    sandbox,
    qcluster_factory,
):
    case = permanent_case("clicks-replay")
    sign_in(page, "rita", next_url=f"/console/cases/{case.pk}/")  # a plain Reviewer
    act = Actions(page)
    act.click("button:has-text('Try again…')")
    expect(page.locator("h1")).to_contain_text("Try again")  # the confirmation is open
    expect(page.locator("button:has-text('Try again')").last).to_be_focused()
    act.enter()  # the confirmation's button has the focus; the reason is preset
    expect(page.locator(".messages")).to_contain_text("will be tried again shortly")
    assert act.count <= 3, act.count
    qcluster_factory()
    wait_for(
        lambda: ReviewCase.objects.get(pk=case.pk).resolution_code == "replayed",
        timeout=60,
        what="the replayed enquiry",
    )
    wait_for(lambda: sandbox.stats()["messages"] == 1, timeout=60, what="the steps after it")
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)


def test_resolve_an_ambiguous_case_with_the_record_found_in_three_actions(
    page,  # noqa: F811
    users,
    sandbox,
    ambiguous_case,
):
    case = ambiguous_case("clicks-found", mode="drop_response_after_commit")
    assert sandbox.stats()["records"] == 1  # committed, its answer lost
    sign_in(page, "rita", next_url=f"/console/cases/{case.pk}/")
    act = Actions(page)
    act.click("button:has-text('Look it up in the CRM')")
    expect(page.locator("#lookup-result")).to_contain_text("it is there")
    # The lookup's answer offers the decision itself, its reason preset: one click.
    act.click("#lookup-result button:has-text('It is there: resolve')")
    expect(page.locator(".messages")).to_contain_text("resolved: it is in the CRM")
    operation = Operation.objects.get(pk=case.operation_id)
    assert operation.status == "succeeded" and operation.destination_ref
    assert sandbox.stats()["records"] == 1  # resolved, not created again
    assert act.count <= 3, act.count


def test_close_with_a_reason_in_three_actions(page, users, sandbox):  # noqa: F811
    case = permanent_case("clicks-close")
    sign_in(page, "rita", next_url=f"/console/cases/{case.pk}/")
    act = Actions(page)
    act.click("button:has-text('Customer withdrew')")
    expect(page.locator(".messages")).to_contain_text(f"Case {case.pk} closed.")
    assert act.count <= 3, act.count
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("closed", "customer_withdrew")
    assert Operation.objects.get(pk=case.operation_id).status == "cancelled"
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (0, 0, 0)


def test_find_a_customer_s_submission_by_email_from_the_dashboard_in_three_actions(
    page,  # noqa: F811
    users,
    sandbox,
):
    event = completed("clicks-search", contact={"name": "Grace", "email": "grace@example.com"})
    completed("clicks-other", contact={"name": "Alan", "email": "alan@example.com"})
    sign_in(page, "rita")
    act = Actions(page)
    # The search box is not focused on arrival (on a phone that opens the keyboard): "/".
    act.count += 1
    page.keyboard.press("/")
    assert act.type("grace@example.com") == "q"  # the header's search box
    act.enter()
    page.wait_for_url(f"**/console/submissions/{event.pk}/")
    assert act.count <= 3, act.count
    expect(page.locator("h1")).to_be_visible()


def test_two_opposite_merges_in_two_browsers_one_accepted_one_refused(
    browser,  # noqa: F811
    live_server,
    _seed_restored,
    users,
    sandbox,
    qcluster_factory,
):
    case = duplicate_case(sandbox)
    first, second = case.record_ids
    pages = []
    for username in ("rita", "sue"):
        context = browser.new_context(base_url=live_server.url)
        pages.append(context.new_page())
        pages[-1].set_default_timeout(15_000)
        sign_in(pages[-1], username, next_url=f"/console/cases/{case.pk}/compare/")
    # Both confirmation pages open: the same pair, in opposite directions.
    for page_, survivor in zip(pages, [first, second], strict=True):
        page_.check(f"input[name=survivor][value={survivor}]")  # one choice: the other goes
        page_.fill("#id_note", f"Keep {survivor}: same person twice")
    for page_ in pages:  # submitted together: the second does not wait for the first
        page_.locator("button:has-text('Merge now')").click(no_wait_after=True)
    for page_ in pages:
        outcome = page_.locator(".messages li, .notice.bad[role=alert]")
        expect(outcome.first).to_be_visible()
    accepted = [p for p in pages if p.locator(".messages >> text=will be merged").count()]
    refused = [p for p in pages if p.locator(".notice.bad[role=alert]").count()]
    assert (len(accepted), len(refused)) == (1, 1)
    expect(refused[0].locator(".notice.bad[role=alert]")).to_contain_text("already under way")
    assert refused[0].input_value("#id_note").startswith("Keep ")  # the typed note kept
    merges = Operation.objects.filter(arguments__case_id=case.pk)
    assert merges.count() == 1
    qcluster_factory()
    wait_for(lambda: merges.get().status == "succeeded", timeout=60, what="the merge")
    assert sandbox.stats()["records"] == 1
    for page_ in pages:
        page_.context.close()
