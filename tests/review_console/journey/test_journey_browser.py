"""The customer journey page in headless Chromium: reached from the source's page, every
path listed, axe-core finds no serious or critical violation, and a phone (390 px) does
not scroll it sideways. Screenshots at both widths go to test-artifacts/screenshots/.

Real commits are needed (`transaction=True`): the live server answers from its own
thread and connection.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.conf import settings
from django.contrib.auth.models import User

from idempotency_core.models import Source
from tests.factories import PASSWORD, completed, configured
from tests.support.browser import browser, page, sign_in  # noqa: F401 (fixtures)

SCREENSHOTS = Path(settings.BASE_DIR) / "test-artifacts" / "screenshots"
BLOCKING = {"serious", "critical"}

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_the_journey_page_lists_every_path_and_passes_axe(page, sandbox):  # noqa: F811
    configured(
        {
            "contact": {
                "task": {"title": "Call {{ contact.name }}", "assignee": "ana"},
                "confirmation": {
                    "subject": "Thanks {{ contact.first_name }}",
                    "text": "We got your message:\n{{ message }}",
                    "html": "<p>Hello {{ contact.name }}, we will call you back.</p>",
                },
            }
        }
    )
    completed("browser-journey-1")
    User.objects.create_superuser("sue", password=PASSWORD)
    source = Source.objects.get(name="website")
    sign_in(page, "sue", f"/console/sources/{source.pk}/")
    page.click("#journeys a:has-text('contact')")
    page.wait_for_url("**/console/journey/website/contact/")
    sections = page.locator("section.journey-path h2")
    assert sections.all_inner_texts() == [
        "The first time",
        "A retry after a lost answer",
        "A replay",
        "“Send again”",
        "An edit (revises)",
        "A held duplicate settled as “same enquiry”",
        "A submission without an email address",
    ]
    assert "Thanks Ada" in page.locator("#path-first .journey-customer").inner_text()
    assert "not sent: no address" in page.locator("#path-no-email .journey-customer").inner_text()

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    axe = Axe()
    problems = []
    for width in (1366, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.evaluate("document.querySelectorAll('details').forEach(d => { d.open = true; })")
        page.screenshot(path=str(SCREENSHOTS / f"journey-{width}.png"), full_page=True)
        scroll = page.evaluate("document.documentElement.scrollWidth")
        if scroll != width:
            problems.append(f"@{width}: the page is {scroll} px wide")
        for violation in axe.run(page).response["violations"]:
            if violation["impact"] in BLOCKING:
                targets = [n["target"] for n in violation["nodes"]][:3]
                problems.append(f"@{width}: {violation['impact']} {violation['id']} {targets}")
    assert not problems, "\n".join(problems)
