"""The Personal data page in headless Chromium, against the live server: a privacy
officer erases a person's data through the confirmation page, at a desk's width and a
phone's; screenshots of both pages go to test-artifacts/screenshots/ for a person to
look at.

Real commits are needed (`transaction=True`): the live server answers from its own
thread and connection.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.conf import settings
from django.contrib.auth.models import Permission
from playwright.sync_api import expect

from idempotency_core.models import AuditEntry, Event
from tests.factories import ingest, make_user
from tests.support.browser import browser, page, sign_in  # noqa: F401 (fixtures)

SCREENSHOTS = Path(settings.BASE_DIR) / "test-artifacts" / "screenshots"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

ADA = {"name": "Ada Quillfeather", "email": "ada.quill@example.org", "phone": "+44 20 7946 0123"}


def blocking(page) -> list[str]:  # noqa: F811
    """axe's serious and critical violations, as the console's accessibility test counts."""
    found = Axe().run(page).response["violations"]
    return [v["id"] for v in found if v["impact"] in ("serious", "critical")]


@pytest.mark.parametrize("width", [1366, 390])
def test_an_officer_erases_a_person_through_the_confirmation(page, width) -> None:  # noqa: F811
    officer = make_user("olga", groups=("Reviewers",))
    officer.user_permissions.add(Permission.objects.get(codename="erase_personal_data"))
    event = ingest("ada-1", contact=ADA, message="Ada's walnut kitchen at Orchard Lane")
    page.set_viewport_size({"width": width, "height": 900})
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    sign_in(page, "olga", "/console/privacy/")

    assert page.locator("#export_email").count() == page.locator("#id_email").count() == 1
    page.fill("#id_email", ADA["email"])
    page.fill("#id_reason", "Asked by email on 7 December")
    page.click("button:has-text('Review the erasure')")
    expect(page.locator("h1")).to_have_text("Erase a person's data")
    expect(page.locator("main")).to_contain_text("1 submission as Onefold read it")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert blocking(page) == []
    page.screenshot(path=str(SCREENSHOTS / f"privacy-confirm-{width}.png"), full_page=True)
    page.click("button:has-text('Erase')")

    page.wait_for_url("**/console/privacy/")
    expect(page.locator(".messages")).to_contain_text("Erased the personal data of 1 submission ")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert blocking(page) == []
    page.screenshot(path=str(SCREENSHOTS / f"privacy-{width}.png"), full_page=True)
    assert Event.objects.get(pk=event.pk).payload is None
    assert AuditEntry.objects.get(action="person_erased").actor_label == "user:olga"
