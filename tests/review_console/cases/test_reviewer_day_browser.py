"""A reviewer's day in headless Chromium: actions counted from the dashboard,
plain words on every case page, the first screen at a desk and on a phone, axe.

Counting: a click, a typed field and a key press that submits each count one;
reading does not. Each task starts on the dashboard and ends where the business
outcome can be checked: the database's case and steps, and the sandbox CRM's counts
after a real worker cluster ran what the console queued.

The words: every case page of every kind (open and settled, after a lookup, while a
try runs, after a failed try) is read as the browser renders it, its "Technical
details" removed, and scanned for jargon (tests/support/jargon.py).

Screenshots of the main pages at 1366 x 768 and 390 x 844 go to the test's tmp dir.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.urls import reverse
from playwright.sync_api import expect

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_duplicates_set
from idempotency_core.models import Operation, ReviewCase, Source
from idempotency_core.review.lookup import operation_destination_lookup
from idempotency_core.review.replay import operation_replay
from idempotency_core.tasks import operation_run
from review_console import glossary
from tests.factories import completed, duplicate_case, ingest, merge_operation, op, permanent_case
from tests.support.browser import browser, sign_in  # noqa: F401  (fixture)
from tests.support.console_pages import interrupted_email, seed
from tests.support.jargon import jargon_in, stored_keys
from tests.support.processes import wait_for

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

DESK = {"width": 1366, "height": 768}
PHONE = {"width": 390, "height": 844}
# The main text as a person reads it: <main> without its "Technical details".
MAIN_TEXT = """(() => {
  const main = document.querySelector('main').cloneNode(true);
  const hidden = 'details.technical, script, template, .customer-words';
  main.querySelectorAll(hidden).forEach(e => e.remove());
  return main.innerText;
})()"""


class Actions:
    """A reviewer's actions on `page`, counted."""

    def __init__(self, on) -> None:
        self.page = on
        self.count = 0

    def click(self, selector: str) -> None:
        self.count += 1
        self.page.locator(selector).first.click()
        self.page.wait_for_load_state()

    def type(self, text: str) -> None:
        self.count += 1
        self.page.keyboard.type(text)

    def enter(self) -> None:
        self.count += 1
        self.page.keyboard.press("Enter")
        self.page.wait_for_load_state()


def new_page(browser, live_server, viewport: dict):  # noqa: F811
    context = browser.new_context(viewport=viewport, base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    return page


def failed_task(sandbox, key: str) -> ReviewCase:
    """The enquiry made, its follow-up task refused by the CRM (400)."""
    event = ingest(key, contact_from_key=True, message=f"Task for {key}.")
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "succeeded"
    sandbox.fault("create_task", "http_400")
    assert operation_execute(operation_id=op(event, "assign_task").pk) == "permanent"
    return ReviewCase.objects.get(event=event, kind="permanent_failure")


def held_duplicate(key: str) -> ReviewCase:
    """The same person and message twice under the `hold` policy: the second held."""
    source = Source.objects.get_or_create(name="website")[0]
    source_duplicates_set(source=source, policy="hold")
    contact = {"name": "Hedy Lamarr", "email": "hedy@example.com"}
    first = ingest(f"{key}-a", contact=contact, message="Two quotes, please.")
    assert operation_run(op(first, "create_enquiry").pk) == "succeeded"
    second = ingest(f"{key}-b", contact=contact, message="two  quotes, please.")
    operation_run(op(second, "create_enquiry").pk)
    source_duplicates_set(source=source, policy="flag")
    return ReviewCase.objects.get(kind="duplicate_held", event=second)


def test_each_typical_task_takes_three_actions_or_fewer_from_the_dashboard(
    browser,  # noqa: F811
    live_server,
    _seed_restored,
    users,
    sandbox,
    ambiguous_case,
    qcluster_factory,
    tmp_path,
):
    customer = completed("day-find", contact={"name": "Grace", "email": "grace@example.com"})
    # The cases, oldest first: "Next case" takes them in this order.
    task = failed_task(sandbox, "day-task")
    unsure = ambiguous_case("day-unsure", mode="drop_response_after_commit")
    duplicate = duplicate_case(sandbox, key_a="day-dup-a", key_b="day-dup-b")
    held = held_duplicate("day-held")
    email = interrupted_email(sandbox, "day-mail")
    closing = permanent_case("day-close")
    qcluster_factory()
    page = new_page(browser, live_server, DESK)
    sign_in(page, "rex")
    counts: dict[str, int] = {}

    def from_dashboard() -> Actions:
        page.goto("/console/")
        return Actions(page)

    # Find a customer: the search box, the address, Enter.
    act = from_dashboard()
    act.click("#header-search")
    act.type("grace@example.com")
    act.enter()
    page.wait_for_url(f"**/console/submissions/{customer.pk}/")
    counts["find a customer"] = act.count

    # A failed task: the next case, try again, yes (a replay cannot be undone).
    act = from_dashboard()
    act.click("button:has-text('Next case')")
    assert page.url.endswith(f"/console/cases/{task.pk}/")
    act.click("button:has-text('Try again…')")
    act.click("button:has-text('Try again')")
    expect(page.locator(".messages")).to_contain_text("will be tried again shortly")
    counts["settle a failed task"] = act.count
    wait_for(
        lambda: ReviewCase.objects.get(pk=task.pk).resolution_code == "replayed",
        timeout=60,
        what="the task made by the replay",
    )
    assert sandbox.stats()["tasks"] >= 1

    # An unsure case: the next case, look it up, it is there: resolve.
    act = from_dashboard()
    act.click("button:has-text('Next case')")
    assert page.url.endswith(f"/console/cases/{unsure.pk}/")
    records = sandbox.stats()["records"]
    act.click("button:has-text('Look it up in the CRM')")
    expect(page.locator("#lookup-result")).to_contain_text("it is there")
    act.click("#lookup-result button:has-text('It is there: resolve')")
    expect(page.locator(".messages")).to_contain_text("resolved: it is in the CRM")
    counts["an unsure case"] = act.count
    operation = Operation.objects.get(pk=unsure.operation_id)
    assert operation.status == "succeeded" and sandbox.stats()["records"] == records

    # A duplicate: the next case, merge into one, merge now (cannot be undone).
    act = from_dashboard()
    act.click("button:has-text('Next case')")
    assert page.url.endswith(f"/console/cases/{duplicate.pk}/")
    act.click("a:has-text('Merge into one…')")
    expect(page.locator(".irreversible")).to_have_text("A merge in the CRM cannot be undone.")
    act.click("button:has-text('Merge now')")
    expect(page.locator(".messages")).to_contain_text("will be merged")
    counts["a duplicate"] = act.count
    wait_for(lambda: merge_operation(duplicate).status == "succeeded", timeout=60, what="the merge")

    # A held duplicate: the next case, the same enquiry.
    act = from_dashboard()
    act.click("button:has-text('Next case')")
    assert page.url.endswith(f"/console/cases/{held.pk}/")
    act.click("button:has-text('Same enquiry')")
    counts["a held duplicate"] = act.count
    assert ReviewCase.objects.get(pk=held.pk).resolution_code == "same_enquiry"

    # An email that may not have arrived: the next case, the customer has it.
    act = from_dashboard()
    act.click("button:has-text('Next case')")
    assert page.url.endswith(f"/console/cases/{email.pk}/")
    act.click("button:has-text('Customer has it')")
    counts["an email that may not have arrived"] = act.count
    assert ReviewCase.objects.get(pk=email.pk).resolution_code == "customer_confirmed_receipt"

    # Close with a category other than "Other": the next case, "Spam or test".
    act = from_dashboard()
    act.click("button:has-text('Next case')")
    assert page.url.endswith(f"/console/cases/{closing.pk}/")
    act.click("button:has-text('Spam or test')")
    counts["close with a category"] = act.count
    closed = ReviewCase.objects.get(pk=closing.pk)
    assert (closed.status, closed.resolution_code) == ("closed", "spam_or_test")
    # After a decision the page offers the next case (and "n" takes it).
    expect(page.locator(".case-head button:has-text('Next case')")).to_be_visible()

    print("actions from the dashboard:", counts)
    (tmp_path / "action-counts.txt").write_text(repr(counts))
    assert len(counts) == 7 and all(n <= 3 for n in counts.values()), counts


def _every_case(sandbox, ambiguous_case, users) -> None:
    """Cases of every kind and settled ones (the glossary's), plus a case after a
    lookup, one while a replay runs and one after a failed replay."""
    seeded = seed(sandbox, ambiguous_case, users)
    rex = users["replay_admin"]
    looked = seeded["cases"]["ambiguous_outcome"]
    operation_destination_lookup(operation_id=looked.operation_id, actor=rex, case=looked)
    running = permanent_case("bw-running")
    operation_replay(operation_id=running.operation_id, actor=rex, reason="CRM fixed")
    failed = permanent_case("bw-failed")
    operation_replay(operation_id=failed.operation_id, actor=rex, reason="CRM fixed")
    sandbox.fault("create_record", "http_400")
    operation_execute(operation_id=failed.operation_id)


def _shot(page, shots: Path, name: str) -> None:
    page.screenshot(path=str(shots / f"{name}.png"))


def test_no_case_page_of_any_kind_says_anything_technical_and_each_fits_a_laptop_screen(
    browser,  # noqa: F811
    live_server,
    _seed_restored,
    users,
    sandbox,
    ambiguous_case,
    tmp_path,
):
    _every_case(sandbox, ambiguous_case, users)
    assert {c.kind for c in ReviewCase.objects.all()} == set(glossary.CASE_KINDS)
    keys = stored_keys()
    found: dict[str, list[str]] = {}
    too_tall: list[str] = []
    page = new_page(browser, live_server, DESK)
    sign_in(page, "sue")
    for case in ReviewCase.objects.order_by("pk"):
        page.goto(reverse("console:case-detail", args=[case.pk]))
        text = page.evaluate(MAIN_TEXT)
        assert "What to do:" in text, case.pk
        problems = jargon_in(text, keys)
        if problems:
            found[f"case {case.pk} ({case.kind}, {case.status})"] = sorted(set(problems))
        # What happened, what to do and the decisions fit one laptop screen.
        bottom = page.evaluate(
            "document.querySelector('.case-head').getBoundingClientRect().bottom"
        )
        if bottom > DESK["height"]:
            too_tall.append(f"case {case.pk} ({case.kind}): {bottom:.0f} px")
        _shot(page, tmp_path, f"case-{case.kind}-{case.status}-1366")
    assert not found, "\n".join(f"{where}: {what}" for where, what in found.items())
    assert not too_tall, too_tall
    # The scan can fail: the same page with its disclosures kept holds the jargon.
    page.goto(reverse("console:case-detail", args=[ReviewCase.objects.first().pk]))
    raw = page.evaluate("document.querySelector('main').textContent")
    assert jargon_in(raw, keys)


def test_on_a_phone_the_first_card_and_the_first_action_are_on_the_first_screen(
    browser,  # noqa: F811
    live_server,
    _seed_restored,
    users,
    sandbox,
    ambiguous_case,
    tmp_path,
):
    cases = [permanent_case(f"phone-{i}") for i in range(12)]
    ambiguous = ambiguous_case("phone-amb")
    email = interrupted_email(sandbox, "phone-mail")
    page = new_page(browser, live_server, PHONE)
    sign_in(page, "rita")
    axe = Axe()
    problems: list[str] = []

    def check(name: str) -> None:
        if page.evaluate("document.documentElement.scrollWidth") != PHONE["width"]:
            problems.append(f"{name}: scrolls sideways")
        # Nothing focused that opens the keyboard.
        focused = page.evaluate("document.activeElement.tagName")
        if focused in ("INPUT", "TEXTAREA", "SELECT"):
            problems.append(f"{name}: {focused} has the focus")
        for violation in axe.run(page).response["violations"]:
            if violation["impact"] in ("serious", "critical"):
                problems.append(f"{name}: axe {violation['impact']} {violation['id']}")
        _shot(page, tmp_path, f"{name}-390")

    page.goto("/console/")
    check("dashboard")
    page.goto("/console/cases/")
    first = page.locator(".case-card").first.bounding_box()
    assert first is not None and first["y"] + first["height"] <= PHONE["height"], first
    assert page.locator("details.filters-box").get_attribute("open") is None  # folded
    check("queue")
    for case in (cases[0], ambiguous, email):
        page.goto(reverse("console:case-detail", args=[case.pk]))
        button = page.locator(".case-head .main-actions .btn").first.bounding_box()
        assert button is not None, case.kind
        assert button["y"] + button["height"] <= PHONE["height"], (case.kind, button)
        check(f"case-{case.kind}")
    assert not problems, problems


def test_the_main_pages_at_a_desk_pass_axe_and_are_saved_for_a_look(
    browser,  # noqa: F811
    live_server,
    _seed_restored,
    users,
    sandbox,
    ambiguous_case,
    tmp_path,
):
    permanent_case("desk-1")
    ambiguous_case("desk-amb")
    duplicate = duplicate_case(sandbox, key_a="desk-dup-a", key_b="desk-dup-b")
    page = new_page(browser, live_server, DESK)
    sign_in(page, "rex")
    axe = Axe()
    problems = []
    for name, url in (
        ("dashboard", "/console/"),
        ("queue", "/console/cases/"),
        ("compare", reverse("console:case-compare", args=[duplicate.pk])),
        ("case-duplicate", reverse("console:case-detail", args=[duplicate.pk])),
    ):
        page.goto(url)
        for violation in axe.run(page).response["violations"]:
            if violation["impact"] in ("serious", "critical"):
                problems.append(f"{name}: axe {violation['impact']} {violation['id']}")
        _shot(page, tmp_path, f"{name}-1366")
        page.set_viewport_size(PHONE)
        _shot(page, tmp_path, f"{name}-390")
        page.set_viewport_size(DESK)
    # "?" lists the shortcuts; "n" takes the next case.
    page.goto("/console/")
    page.keyboard.press("?")
    expect(page.locator("#shortcuts")).to_have_attribute("open", re.compile(".*"))
    page.keyboard.press("n")
    page.wait_for_url(re.compile(r".*/console/cases/\d+/$"))
    assert not problems, problems
