"""Every console page in headless Chromium: axe-core finds no serious or critical
violation, and neither a desk (1,366 px) nor a phone (390 px) scrolls the page sideways.

The pages are the glossary test's (cases of every kind made the real way, settled
ones, a completed submission), opened as a superuser who sees every control; the
confirmation steps are the POSTs a case page's buttons send (Playwright's route
turns the navigation into that POST), plus the sign-in page signed out and the
styled 404. A Settings admin's dashboard, with the *Next case* card of a case handed
on to their group (a superuser never gets it), and that case's page, as they see them.
A screenshot of each page and width that fails goes to the test's tmp dir.

axe-core is run through axe-playwright-python (its bundled axe.min.js); impacts
are axe's own ("minor", "moderate", "serious", "critical"):
https://github.com/dequelabs/axe-core/blob/develop/doc/API.md#results-object
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.urls import reverse
from playwright.sync_api import expect

from idempotency_core.models import ReviewCase, Source
from review_console.models import BulkReplayJob
from tests.support.browser import browser, sign_in  # noqa: F401  (fixture)
from tests.support.console_pages import ROUTED_CARD, page_urls, seed, settings_admin_pages

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

WIDTHS = (1366, 390)
# One h1, one main, a skip link to it; a signed-in page also has its header, menu
# and footer (the sign-in page and the error pages have no menu to skip).
LANDMARKS = """(() => {
  const faults = [];
  const count = (selector) => document.querySelectorAll(selector).length;
  if (count('h1') !== 1) faults.push(count('h1') + ' h1');
  if (count('main') !== 1) faults.push(count('main') + ' main');
  if (count('footer') !== 1) faults.push(count('footer') + ' footer');
  const skip = document.querySelector('a.skip-link');
  if (!skip || !document.querySelector(skip.getAttribute('href'))) faults.push('no skip link');
  if (count('header.top nav') && !count('header.top')) faults.push('a menu outside the header');
  return faults;
})()"""
# What sticks out past the viewport: named in a failure, to say what to fix.
STICKING_OUT = """(() => {
  const width = document.documentElement.clientWidth;
  return [...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > width + 0.5 && !e.closest('.table-scroll, pre'))
    .map(e => `${e.tagName.toLowerCase()}.${e.className}#${e.id}`).slice(-4);
})()"""
WIDE_BOXES = """[...document.querySelectorAll('.table-scroll')]
    .filter(box => box.scrollWidth > box.clientWidth)
    .map(box => box.getAttribute('aria-label'))"""
BLOCKING = {"serious", "critical"}


def console_pages(seeded: dict) -> list[tuple[str, str, dict | None]]:
    """The glossary's pages, one case page per (kind, status) and one submission page
    per kind of case (the others repeat the same template with the same parts), plus
    the confirmation steps the glossary test does not post."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for method, url, data in page_urls(seeded, None):  # type: ignore[arg-type]
        match = re.fullmatch(r"/console/(cases|submissions)/([^/]+)/", url)
        if method == "get" and match:
            field = "pk" if match[1] == "cases" else "event_id"
            case = ReviewCase.objects.filter(**{field: match[2]}).first()
            key = (match[1], f"{case.kind}/{case.status}" if case else "none")
            if key in seen:
                continue
            seen.add(key)
        kept.append((method, url, data))
    source = Source.objects.get(name="website").pk
    kept += [
        ("post", reverse("console:bulk-replay-new"), {"kind": "permanent_failure"}),
        ("post", reverse("console:source-disable", args=[source]), {}),
        ("post", reverse("console:source-secret-add", args=[source]), {}),
    ]
    return kept


def open_page(page, method: str, url: str, data: dict | None) -> int:
    """Navigates to `url`, as a form's POST when `method` is post; the status."""
    if method == "post":
        token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
        body = "&".join(
            f"{k}={v}" for k, v in {**(data or {}), "csrfmiddlewaretoken": token}.items()
        )

        def as_post(route) -> None:
            headers = {**route.request.headers, "content-type": "application/x-www-form-urlencoded"}
            route.continue_(method="POST", post_data=body, headers=headers)

        page.route(f"**{url}", as_post)
        try:
            return page.goto(url).status
        finally:
            page.unroute(f"**{url}")
    return page.goto(url).status


def check(page, axe: Axe, name: str, shots: Path) -> list[str]:
    """axe's serious and critical violations on the page, and any sideways page scroll,
    at each width; a screenshot per width."""
    problems: list[str] = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        found = len(problems)
        scroll = page.evaluate("document.documentElement.scrollWidth")
        if scroll != width:
            culprits = page.evaluate(STICKING_OUT)
            problems.append(f"{name} @{width}: the page is {scroll} px wide: {culprits}")
        if width == max(WIDTHS):
            problems += [f"{name}: {fault}" for fault in page.evaluate(LANDMARKS)]
        if width == max(WIDTHS):  # at a desk, tables fit: none scrolls in its box
            boxes = page.evaluate(WIDE_BOXES)
            problems += [f"{name} @{width}: the table {label!r} scrolls" for label in boxes]
        for violation in axe.run(page).response["violations"]:
            print(f"axe {name} @{width}: {violation['impact']} {violation['id']}")
            if violation["impact"] in BLOCKING:
                targets = [n["target"] for n in violation["nodes"]][:3]
                problems.append(
                    f"{name} @{width}: {violation['impact']} {violation['id']} {targets}"
                )
        if len(problems) > found:  # a picture of what failed, for whoever fixes it
            page.screenshot(path=str(shots / f"{name}-{width}.png"), full_page=True)
    # Opened, the "Technical details" (keys, raw replies) must not widen the page either.
    page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        scroll = page.evaluate("document.documentElement.scrollWidth")
        if scroll != width:
            culprits = page.evaluate(STICKING_OUT)
            problems.append(f"{name} @{width}, details open: {scroll} px wide: {culprits}")
        if width == max(WIDTHS):
            boxes = page.evaluate(WIDE_BOXES)
            problems += [f"{name} @{width}, details open: {label!r} scrolls" for label in boxes]
    return problems


def test_every_console_page_passes_axe_and_fits_a_phone(
    browser,  # noqa: F811
    live_server,
    _seed_restored,
    sandbox,
    ambiguous_case,
    users,
    tmp_path,
):
    seeded = seed(sandbox, ambiguous_case, users)
    admin, admin_pages = settings_admin_pages(seeded, users["reviewer"])
    pages = console_pages(seeded)
    context = browser.new_context(viewport={"width": 1366, "height": 900}, base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    axe = Axe()
    problems: list[str] = []
    page.goto("/accounts/login/")
    problems += check(page, axe, "login", tmp_path)
    sign_in(page, "sue")
    for n, (method, url, data) in enumerate(pages):
        status = open_page(page, method, url, data)
        assert status == 200, (method, url, status)
        name = f"{n:02d}-{method}-" + re.sub(r"[^a-z0-9]+", "-", url.lower()).strip("-")
        problems += check(page, axe, name, tmp_path)
    assert page.goto("/console/cases/99999999/").status == 404
    problems += check(page, axe, "not-found", tmp_path)
    # The check can fail: a button without a name is a critical violation for axe.
    page.evaluate("document.querySelector('main').append(document.createElement('button'))")
    assert "button-name" in [v["id"] for v in axe.run(page).response["violations"]]
    context.close()
    context = browser.new_context(viewport={"width": 1366, "height": 900}, base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    sign_in(page, admin.get_username())
    for method, url, data in admin_pages:
        assert open_page(page, method, url, data) == 200, (method, url)
        if url == reverse("console:dashboard"):
            # The card this visit is for: without it the scan would check another page.
            assert ROUTED_CARD in page.locator("main").inner_text(), "no Next case card"
        name = "settings-admin-" + re.sub(r"[^a-z0-9]+", "-", url.lower()).strip("-")
        problems += check(page, axe, name, tmp_path)
    context.close()
    assert any("/hand-on/" in url for _, url, _ in pages)
    assert len(pages) >= 25
    assert not problems, "\n".join(problems)


def test_bulk_replay_progress_is_announced_by_a_live_region_that_stays(
    browser,  # noqa: F811
    live_server,
    _seed_restored,
    users,
):
    job = BulkReplayJob.objects.create(created_by=users["replay_admin"], reason="CRM fixed")
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    page.set_default_timeout(20_000)
    sign_in(page, "rex", next_url=f"/console/bulk-replays/{job.pk}/")
    live = page.locator("#progress-live")
    assert live.get_attribute("aria-live") == "polite"
    page.evaluate("document.getElementById('progress-live').dataset.original = 'yes'")
    expect(live).to_contain_text("Waiting for a worker")  # after htmx's first poll
    BulkReplayJob.objects.filter(pk=job.pk).update(status=BulkReplayJob.Status.FINISHED)
    expect(live).to_have_text(re.compile(r"^Finished\. 0 of 0 done"))
    # The same element all along (htmx replaced the block around it, not the region),
    # and the words a sighted reviewer reads.
    assert live.get_attribute("data-original") == "yes"
    assert page.locator("#progress-text").inner_text() in live.inner_text()
    context.close()
