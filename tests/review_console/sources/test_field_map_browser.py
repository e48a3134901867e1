"""The field-map editor in headless Chromium, against the live server and the sandbox.

A Settings admin opens the source of an unreadable Jotform delivery (the tutoring
form, kept under a map written for another form), picks the student's first and
last name and the free text in the field tree, previews (one waiting delivery
would be read), saves the map as a new version and applies it to the waiting
delivery. The proof is the CRM's count: one record and one task under the
delivery's original key, no email (it has no address), and nothing more when the
page is opened again. A screenshot of the editor is saved under
test-artifacts/screenshots/ for a person to look at.

Real commits are needed (`transaction=True`): the live server answers from its own
thread and connection.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import expect

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.keys import operation_key
from idempotency_core.models import AuditEntry, Event, ReviewCase
from idempotency_core.review.cases import case_take_ownership
from idempotency_core.review.hand_on import case_hand_on
from tests.factories import make_user, permanent_case
from tests.support.browser import browser, page, sign_in  # noqa: F401 (fixtures)
from tests.support.senders import ANOTHER_FORMS_MAP, jotform_tutoring

SCREENSHOTS = Path(settings.BASE_DIR) / "test-artifacts" / "screenshots"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def unreadable_jotform() -> Event:
    source, _ = source_get_or_create(name="tutoring")
    path = source_hook_configure(source=source, profile="jotform").path
    source.profile_overrides = ANOTHER_FORMS_MAP
    source.save(update_fields=["profile_overrides"])
    sample = jotform_tutoring()
    response = Client().post(path, sample.body, content_type=sample.content_type)
    assert response.status_code == 202, response.content
    return Event.objects.get(source=source)


def test_a_settings_admin_fixes_the_map_and_the_delivery_runs_once(page, sandbox):  # noqa: F811
    """From the dashboard to the applied map in at most 6 actions, as a member of the
    Settings admins group, once a Reviewer handed the unreadable case on to them:
    *Next case* (the oldest case handed on to their group), the link, three picks (by
    the form's labels), one button whose reason is preset. The choices on the page are
    what is saved and applied."""
    make_user("sia", groups=("Settings admins",))
    rita = make_user("rita", groups=("Reviewers",))
    permanent_case("older-not-theirs")  # older, Reviewers': not the Settings admin's next
    event = unreadable_jotform()
    source = event.source
    case = ReviewCase.objects.get(event=event)
    case_take_ownership(case_ids=[case.pk], actor=rita)
    case_hand_on(case_id=case.pk, actor=rita, reason="I cannot change how a form is read.")
    sign_in(page, "sia", "/console/")
    actions = 0
    page.locator(".next-case >> text=Next case").click()
    actions += 1
    page.wait_for_url(f"**/console/cases/{case.pk}/")
    assert "link below" in page.locator("main").inner_text()
    page.click("#choose-fields")
    actions += 1
    page.wait_for_url(f"**/console/sources/{source.pk}/field-map/")
    tree = page.locator("#field-tree").inner_text()
    assert "Student's Name \u203a first" in tree
    page.select_option("#id_name_first", label="Student's Name \u203a first")
    page.select_option("#id_name_last", label="Student's Name \u203a last")
    page.select_option("#id_message", label="Anything else?")
    actions += 3
    # The preview follows each pick without a click.
    summary = page.locator("#preview-summary")
    expect(summary).to_contain_text("1 of the waiting submissions would be read")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "field_map_preview.png"), full_page=True)
    assert not event.operations.exists()  # a preview writes nothing
    page.click("button:has-text('Save and apply to the 1 waiting')")
    actions += 1
    page.wait_for_url(f"**/console/sources/{source.pk}/field-map/")
    assert "1 waiting submission is now read" in page.locator(".messages").inner_text()
    assert "No unreadable submission waits" in page.locator("#waiting-deliveries").inner_text()
    assert actions <= 6, actions
    assert AuditEntry.objects.filter(action="field_map_saved").count() == 1

    operations = list(event.operations.order_by("position"))
    assert [o.key for o in operations] == [
        operation_key(source_salt=source.key_salt, event_key=event.key, step=o.step)
        for o in operations
    ]
    for operation in operations:
        operation_execute(operation_id=operation.pk)
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 0)
    assert ReviewCase.objects.get(event=event).status == "resolved"

    # Opening the editor again offers nothing to apply; nothing more was created.
    page.goto(f"/console/sources/{source.pk}/field-map/")
    assert "No unreadable submission waits" in page.locator("#waiting-deliveries").inner_text()
    assert event.operations.count() == 3
    assert sandbox.stats()["records"] == 1
