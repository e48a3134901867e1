"""The Settings pages in headless Chromium, against the live server and the sandbox.

A Settings admin opens the confirmation of the website's contact form, types a new
subject and sees the preview follow without a click (rendered from the kept
submission under the unsaved draft), sees a broken template named in the preview,
sends a test to themself (it arrives in the sandbox's mail store, to their address
alone), saves with a reason, and restores the first version from the history: one
more version, audited. A Reviewer gets 403 and no Settings link. axe-core finds no
serious or critical violation on any of the pages, and the editor fits a phone
without scrolling sideways. Screenshots go to test-artifacts/screenshots/.

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

from idempotency_core.models import AuditEntry, BusinessConfigVersion
from tests.factories import configured, ingest, make_user
from tests.support.browser import browser, page, sign_in  # noqa: F401 (fixtures)

SCREENSHOTS = Path(settings.BASE_DIR) / "test-artifacts" / "screenshots"
BLOCKING = {"serious", "critical"}
PHONE = {"width": 390, "height": 844}

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_a_settings_admin_edits_previews_tests_saves_and_restores(page, sandbox):  # noqa: F811
    configured({"contact": {"confirmation": {"subject": "Thanks, {{ contact.first_name }}"}}})
    ingest("kept-1")  # Ada Lovelace's, the submission the preview renders from
    admin = make_user("sam", groups=("Settings admins",))
    admin.email = "sam@example.org"
    admin.save(update_fields=["email"])
    admin.user_permissions.add(Permission.objects.get(codename="view_contact_details"))
    make_user("rita", groups=("Reviewers",))
    axe = Axe()
    problems: list[str] = []

    def check(name: str) -> None:
        for violation in axe.run(page).response["violations"]:
            if violation["impact"] in BLOCKING:
                targets = [node["target"] for node in violation["nodes"]][:3]
                problems.append(f"{name}: axe {violation['impact']} {violation['id']} {targets}")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"settings_{name}.png"), full_page=True)

    sign_in(page, "sam", "/console/settings/")
    expect(page.locator("header.top nav a:text-is('Settings')")).to_have_attribute(
        "aria-current", "page"
    )
    check("list")
    page.click("#settings-sources a:text-is('contact')")
    page.wait_for_url("**/console/settings/website/contact/")
    check("form")
    page.click("#edit-confirmation")
    page.wait_for_url("**/console/settings/website/contact/confirmation/")
    subject = page.locator("#preview-subject")
    expect(subject).to_have_text("Thanks, Ada")

    # The preview follows the typing, with no click.
    page.fill("#id_subject", "Hello {{ contact.first_name }}, we are on it")
    expect(subject).to_have_text("Hello Ada, we are on it")
    page.fill("#id_html", "<p>Dear {{ contact.name }},</p>")
    expect(page.locator("#preview-html")).to_have_attribute("srcdoc", "<p>Dear Ada Lovelace,</p>")
    page.fill("#id_subject", "Hello {{ contact.first_name|bogus }}")
    expect(page.locator("#preview-problems")).to_contain_text("Invalid filter: 'bogus'")
    page.fill("#id_subject", "Hello {{ contact.first_name }}, we are on it")
    expect(subject).to_have_text("Hello Ada, we are on it")
    check("editor")
    page.set_viewport_size(PHONE)
    if page.evaluate("document.documentElement.scrollWidth") != PHONE["width"]:
        problems.append("editor: scrolls sideways on a phone")
    page.screenshot(path=str(SCREENSHOTS / "settings_editor-390.png"), full_page=True)
    page.set_viewport_size({"width": 1366, "height": 900})

    # A test of the draft, to the admin's own address; nothing saved.
    page.click("#test-send")
    expect(page.locator(".messages")).to_contain_text("sent to sam@example.org")
    (message,) = sandbox.messages()
    assert message["rcpt_to"] == ["sam@example.org"]
    assert message["subject"] == "Hello Ada, we are on it"
    assert "<p>Dear Ada Lovelace,</p>" in message["html"]
    assert BusinessConfigVersion.objects.count() == 1
    # The draft survived the test: it is saved with a reason.
    assert page.input_value("#id_subject") == "Hello {{ contact.first_name }}, we are on it"
    page.fill("#id_reason", "A warmer subject")
    page.click("button:has-text('Save as a new version')")
    page.wait_for_url("**/console/settings/website/contact/")
    expect(page.locator(".messages")).to_contain_text("saved as version 2")

    page.goto("/console/settings/versions/")
    assert "A warmer subject" in page.locator("#settings-versions").inner_text()
    check("versions")
    page.click("#settings-versions a[href$='/versions/1/']")
    page.wait_for_url("**/console/settings/versions/1/")
    expect(page.locator("#restore-changes")).to_contain_text(
        "sources.website.forms.contact.confirmation.subject changed"
    )
    check("version")
    page.fill("#id_reason", "Back to the first subject")
    page.click("button:has-text('Restore version 1')")
    page.wait_for_url("**/console/settings/versions/")
    expect(page.locator(".messages")).to_contain_text("it is now version 3")
    entry = AuditEntry.objects.get(action="config_restored")
    assert (entry.actor, entry.reason) == (admin, "Back to the first subject")
    assert entry.details["restored_version"] == 1
    assert (
        BusinessConfigVersion.objects.get(number=3).document
        == BusinessConfigVersion.objects.get(number=1).document
    )

    # A Reviewer: no link, and 403 at the door.
    reviewer = page.context.browser.new_context(base_url=page.url.split("/console")[0])
    other = reviewer.new_page()
    sign_in(other, "rita")
    assert other.locator("header.top nav a:text-is('Settings')").count() == 0
    assert other.goto("/console/settings/").status == 403
    reviewer.close()
    assert not problems, "\n".join(problems)
