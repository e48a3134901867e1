"""The console in headless Chromium, against the live server and the real sandbox.

What a reviewer does with the mouse: sign in, filter the queue, open an ambiguous
case, read the timeline, look the destination up, then either mark resolved (the
record was there) or replay (it was not), and merge suspected duplicates. The
CRM's record count is the proof; the work the console queues (replays, merges,
bulk jobs) is run by a real django-q2 cluster. Screenshots of the main pages are saved under
test-artifacts/screenshots/ for a person to look at.

Real commits are needed (`transaction=True`): the live server answers from its
own thread and connection. `serialized_rollback` restores the groups and
destinations that migrations seed, which a transactional flush would remove.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import expect

from idempotency_core.models import AuditEntry, Operation, ReviewCase
from review_console.models import BulkReplayJob
from tests.factories import PASSWORD, duplicate_case, merge_operation, permanent_case
from tests.support.processes import wait_for

# Playwright's sync API runs an event loop in this thread; Django's ORM would
# otherwise refuse to be called from the test body after the browser starts.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(settings.BASE_DIR) / "test-artifacts" / "screenshots"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


@pytest.fixture(scope="module")
def browser(_seed_snapshot: str | None) -> Iterator:
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        message = f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)  # a missing install step must not hide as a skip
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, live_server, _seed_restored):
    context = browser.new_context(viewport={"width": 1360, "height": 900}, base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def sign_in(page, username: str, next_url: str = "/console/") -> None:
    page.goto(f"/accounts/login/?next={next_url}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Sign in')")
    page.wait_for_url(f"**{next_url}")


def open_from_queue(page, case: ReviewCase, kind_label: str) -> None:
    page.goto("/console/cases/")
    page.click("#queue-filters summary")  # the filters are folded away
    page.click(f"#queue-chips a:has-text('{kind_label}')")  # a filter chip: a link
    page.wait_for_url("**kind=*")
    assert page.locator(".queue-top strong:has-text('1 case')").is_visible()
    page.click(f"li[data-href$='/cases/{case.pk}/'] a.card-title")
    page.wait_for_url(f"**/console/cases/{case.pk}/")


def test_ambiguous_create_found_at_the_destination_is_resolved_not_replayed(
    page, users, ambiguous_case, sandbox
):
    case = ambiguous_case("browser-found", mode="drop_response_after_commit")
    permanent_case("browser-noise")
    assert sandbox.stats()["records"] == 1  # committed, answer lost
    sign_in(page, "rex")
    shot(page, "dashboard")
    open_from_queue(page, case, "Not sure it happened")
    page.goto("/console/cases/?kind=ambiguous_outcome")
    shot(page, "queue")
    page.click(f"li[data-href$='/cases/{case.pk}/'] a.card-title")
    timeline = page.locator(f"#operation-{case.operation_id} .timeline")
    assert "Unclear: it may have happened" in timeline.inner_text()
    # The exception's class is a technical detail: in the disclosure, not in the text.
    assert "RemoteProtocolError" in page.locator(".tech-card").text_content()
    assert "RemoteProtocolError" not in page.locator("main").inner_text()
    assert page.locator("text=cannot tell a repeat from a new request").first.is_visible()
    shot(page, "case")

    # Replay before checking: refused, with the reason in words.
    page.click("button:has-text('Try again…')")
    page.fill("#id_reason", "Customer chased us")
    page.click("button:has-text('Try again')")
    expect(page.locator("text=could be done twice").first).to_be_visible()
    shot(page, "replay-refused")
    assert Operation.objects.get(pk=case.operation_id).status == "needs_review"

    case_url = f"/console/cases/{case.pk}/"
    page.goto(case_url)
    assert page.evaluate("typeof window.htmx") == "object"  # served by WhiteNoise
    page.click("button:has-text('Look it up in the CRM')")
    # htmx swaps the answer and the audit trail in place: no navigation.
    expect(page.locator("#lookup-result")).to_contain_text("it is there")
    expect(page.locator("#case-audit")).to_contain_text("Looked it up in the CRM")
    assert page.url.endswith(case_url)
    shot(page, "case-after-lookup")
    # The safe action, offered in place by the lookup: one button, its reason preset.
    lookup = AuditEntry.objects.get(action="destination_lookup", case=case)
    (reference,) = lookup.details["refs"]
    assert reference.startswith("rec_")
    page.click("#lookup-result button:has-text('It is there: resolve')")
    expect(page.locator("text=resolved: it is in the CRM")).to_be_visible()

    operation = Operation.objects.get(pk=case.operation_id)
    assert (operation.status, operation.destination_ref) == ("succeeded", reference)
    assert sandbox.stats()["records"] == 1
    page.goto("/console/audit/")
    assert page.locator("td:has-text('Resolved with a confirmed record')").count() == 1
    shot(page, "audit")


def test_ambiguous_create_absent_at_the_destination_is_replayed_once(
    page, users, ambiguous_case, sandbox, qcluster_factory
):
    case = ambiguous_case("browser-absent", mode="fail_before_commit")
    assert sandbox.stats()["records"] == 0
    # The one flow: sign in, filter the queue, open the case, read the
    # timeline, look up, replay as a Replay admin, one record in the CRM.
    sign_in(page, "rex")
    open_from_queue(page, case, "Not sure it happened")
    timeline = page.locator(f"#operation-{case.operation_id} .timeline")
    assert "Unclear: it may have happened" in timeline.inner_text()
    page.click("button:has-text('Look it up in the CRM')")
    expect(page.locator("#lookup-result")).to_contain_text("it is not there")
    page.click("button:has-text('Try again…')")
    page.check("#id_destination_checked")
    page.fill("#id_reason", "Looked it up: no record with this reference")
    shot(page, "replay-confirm")
    page.click("button:has-text('Try again')")
    assert page.locator("text=will be tried again shortly").is_visible()
    # Queued is not done: the case waits, in progress, for the replayed attempt.
    assert page.locator("h1 .badge:has-text('In progress')").is_visible()

    # A real worker cluster runs the replayed operation and the steps it releases.
    qcluster_factory()
    wait_for(
        lambda: (
            not Operation.objects.filter(event_id=case.event_id)
            .exclude(status="succeeded")
            .exists()
        ),
        timeout=60,
        what="the replayed enquiry and the steps after it",
    )
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)
    assert ReviewCase.objects.get(pk=case.pk).resolution_code == "replayed"
    page.reload()
    assert page.locator("h1 .badge:has-text('Resolved')").is_visible()
    replay = AuditEntry.objects.get(action="replay", operation_id=case.operation_id)
    assert replay.details["destination_checked"] is True


def test_a_reviewer_without_replay_permission_sees_no_button_and_a_forged_post_is_refused(
    page, users, ambiguous_case, sandbox
):
    case = ambiguous_case("browser-forged", mode="fail_before_commit")
    sign_in(page, "rita", next_url=f"/console/cases/{case.pk}/")
    assert page.locator("button:has-text('Try again…')").count() == 0
    assert page.locator("text=Trying again needs the Replay admins role").is_visible()
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    forged = page.request.post(
        f"/console/cases/{case.pk}/replay/",
        form={
            "csrfmiddlewaretoken": token,
            "confirm": "yes",
            "reason": "forged",
            "destination_checked": "on",
        },
    )
    assert forged.status == 403
    assert Operation.objects.get(pk=case.operation_id).status == "needs_review"
    assert not AuditEntry.objects.filter(action="replay").exists()
    assert sandbox.stats()["records"] == 0


def test_merging_suspected_duplicates_leaves_one_record(page, users, sandbox, qcluster_factory):
    case = duplicate_case(sandbox)
    assert sandbox.stats()["records"] == 2
    sign_in(page, "rita", next_url=f"/console/cases/{case.pk}/")
    page.click("text=Merge into one…")
    assert page.locator("text=A merge in the CRM cannot be undone.").is_visible()
    shot(page, "merge")
    survivor, _duplicate = case.record_ids
    page.check(f"input[name=survivor][value={survivor}]")  # one choice: the other merges in
    page.fill("#id_note", "Same person, same message, sent twice")
    page.click("button:has-text('Merge now')")
    assert page.locator(".messages >> text=will be merged").is_visible()
    assert sandbox.stats()["records"] == 2  # the request only queued the merge
    qcluster_factory()  # a real worker cluster runs the merge operation
    wait_for(lambda: merge_operation(case).status == "succeeded", timeout=60, what="the merge")
    assert sandbox.stats()["records"] == 1
    page.reload()
    assert page.locator("h1 .badge:has-text('Resolved')").is_visible()
    entries = AuditEntry.objects.filter(case=case, action__in=["merge_requested", "merged"])
    assert entries.count() == 2


def test_bulk_replay_progress_updates_in_place_until_the_job_finishes(
    page, users, sandbox, qcluster_factory
):
    cases = [permanent_case(f"browser-bulk-{i}") for i in range(3)]
    sign_in(page, "rex", next_url="/console/cases/")
    page.goto("/console/cases/?kind=permanent_failure")  # a filter chosen: Filters open
    page.click("button:has-text('Try again everything matching these filters…')")
    page.fill("#id_reason", "CRM credentials fixed")
    page.click("button:has-text('Start the bulk replay')")
    page.wait_for_url("**/console/bulk-replays/*/")
    expect(page.locator("#progress-text")).to_contain_text("Waiting for a worker")
    page.evaluate("window.loadedOnce = true")  # gone if the page were reloaded

    qcluster_factory()  # runs the job, then the operations it replays
    expect(page.locator("#progress-text")).to_contain_text("3 of 3 done", timeout=60_000)
    expect(page.locator("h1 .badge")).to_have_text("Finished")
    assert page.evaluate("window.loadedOnce") is True  # swapped by htmx, not reloaded
    shot(page, "bulk-replay-finished")
    wait_for(lambda: sandbox.stats()["records"] == 3, timeout=60, what="the replayed enquiries")
    assert set(sandbox.stats()["records_by_external_ref"].values()) == {1}
    assert BulkReplayJob.objects.get().items.filter(status="replayed").count() == len(cases)
