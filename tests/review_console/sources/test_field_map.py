"""The field-map editor on a source's page, and an unreadable submission's case page.

The captured Jotform tutoring delivery, kept unreadable under a map written for
another form, is read in the editor's field tree, previewed with the student's
name picked (nothing written), saved as a new version (audited) and applied to the
waiting delivery: one submission under its original key, once. Values show only to
those who may see contact details. test_field_map_browser.py
does the same with the mouse.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.keys import operation_key
from idempotency_core.models import AuditEntry, Event, ReviewCase, Source
from tests.factories import make_user
from tests.support.senders import ANOTHER_FORMS_MAP, jotform_tutoring, signed_headers

pytestmark = pytest.mark.django_db

# The editor's choices: each path as compact JSON.
FIRST = '["q3_studentsName","first"]'
LAST = '["q3_studentsName","last"]'
MESSAGE = '["q6_anythingElse"]'
SUBJECT = '["q4_subject"]'


def unreadable_jotform() -> tuple[Source, Event]:
    source, _ = source_get_or_create(name="tutoring")
    path = source_hook_configure(source=source, profile="jotform").path
    source.profile_overrides = ANOTHER_FORMS_MAP
    source.save(update_fields=["profile_overrides"])
    sample = jotform_tutoring()
    headers = signed_headers(sample, "", f"http://testserver{path}")
    response = Client().post(path, sample.body, content_type=headers["Content-Type"])
    assert response.status_code == 202, response.content
    return source, Event.objects.get(source=source)


def settings_admin(*, contact: bool) -> User:
    """A Settings admin: staff who may change sources (and view cases to reach them)."""
    user = make_user("sam-contact" if contact else "sam", groups=("Reviewers",))
    codenames = ["change_source"] + (["view_contact_details"] if contact else [])
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def picks(**extra: object) -> dict[str, object]:
    return {
        "name": "",
        "name_first": FIRST,
        "name_last": LAST,
        "email": "",
        "phone": "",
        "message": MESSAGE,
        "extras": [SUBJECT],
        **extra,
    }


def test_the_editor_is_for_settings_admins_and_its_actions_are_post_only():
    source, _ = unreadable_jotform()
    reviewer = client_for(make_user("rita", groups=("Reviewers",)))
    editor = reverse("console:source-field-map", args=[source.pk])
    assert reviewer.get(editor).status_code == 403
    admin = client_for(settings_admin(contact=True))
    assert admin.get(editor).status_code == 200
    for name in ("preview", "save", "apply"):
        url = reverse(f"console:source-field-map-{name}", args=[source.pk])
        assert admin.get(url).status_code == 405
        assert reviewer.post(url, picks()).status_code == 403


def test_the_field_tree_shows_values_only_to_those_who_may_see_contact_details():
    source, _ = unreadable_jotform()
    editor = reverse("console:source-field-map", args=[source.pk])
    seen = client_for(settings_admin(contact=True)).get(editor).content.decode()
    assert "q3_studentsName \u203a first" in seen and "Lovelace" in seen
    assert "1 submission waits" in seen
    masked = client_for(settings_admin(contact=False)).get(editor).content.decode()
    assert "q3_studentsName \u203a first" in masked
    assert "Lovelace" not in masked and "GCSE" not in masked


def test_a_preview_writes_nothing_and_says_what_would_still_be_unreadable():
    source, event = unreadable_jotform()
    admin = client_for(settings_admin(contact=True))
    url = reverse("console:source-field-map-preview", args=[source.pk])
    unchanged = admin.post(url, picks(name_first="", name_last=""))
    assert "would still be unreadable" in unchanged.content.decode()
    assert "<strong>1</strong> would still be unreadable" in unchanged.content.decode()
    preview = admin.post(url, picks())
    assert preview.status_code == 200
    html = preview.content.decode()
    assert "<strong>1</strong> of the waiting submissions would be read" in html
    assert "Ada Lovelace" in html and "q4_subject" in html
    source.refresh_from_db()
    assert source.profile_overrides == ANOTHER_FORMS_MAP
    assert not AuditEntry.objects.filter(action="field_map_saved").exists()
    assert not event.operations.exists()


def test_saved_as_a_version_then_applied_once_under_the_original_key():
    source, event = unreadable_jotform()
    user = settings_admin(contact=True)
    admin = client_for(user)
    save = reverse("console:source-field-map-save", args=[source.pk])
    no_reason = admin.post(save, picks())
    assert no_reason.status_code == 400 and "Give a reason" in no_reason.content.decode()
    saved = admin.post(save, picks(reason="The tutoring form names the student"))
    assert saved.status_code == 302
    source.refresh_from_db()
    field_map = source.profile_overrides["field_map"]
    assert field_map["name"] == {
        "concat": [["q3_studentsName", "first"], ["q3_studentsName", "last"]]
    }
    assert field_map["extras"] == {"object": {"q4_subject": ["q4_subject"]}}
    entry = AuditEntry.objects.get(action="field_map_saved")
    assert (entry.actor, entry.details["version"]) == (user, 1)
    assert entry.details["previous"] == ANOTHER_FORMS_MAP["field_map"]
    assert not event.operations.exists()  # saving changes how later deliveries are read

    apply = reverse("console:source-field-map-apply", args=[source.pk])
    confirm = admin.post(apply)
    assert confirm.status_code == 200 and "the 1 waiting submission" in confirm.content.decode()
    done = admin.post(apply, {"confirm": "yes", "reason": "Read with the student's name"})
    assert done.status_code == 302
    event.refresh_from_db()
    assert event.payload["contact"] == {"name": "Ada Lovelace"}
    assert event.payload["fields"] == {"q4_subject": "Maths"}
    operations = list(event.operations.order_by("position"))
    assert [o.key for o in operations] == [
        operation_key(source_salt=source.key_salt, event_key=event.key, step=o.step)
        for o in operations
    ]
    case = ReviewCase.objects.get(event=event)
    assert (case.status, case.resolution_code) == ("resolved", "remapped")
    applied = AuditEntry.objects.get(action="remapped", case=case)
    assert (applied.actor, applied.reason) == (user, "Read with the student's name")

    again = admin.post(apply, {"confirm": "yes", "reason": "Again"}, follow=True)
    assert "0 waiting submissions are now read" in again.content.decode()
    assert event.operations.count() == 3
    assert AuditEntry.objects.filter(action="remapped").count() == 1


def test_a_map_the_profile_cannot_apply_is_refused():
    source, _ = unreadable_jotform()
    admin = client_for(settings_admin(contact=True))
    save = reverse("console:source-field-map-save", args=[source.pk])
    # Half a name is refused by the form; nothing saved.
    response = admin.post(save, picks(name_last="", reason="typo"))
    assert response.status_code == 400 and "Pick both" in response.content.decode()
    source.refresh_from_db()
    assert source.profile_overrides == ANOTHER_FORMS_MAP


def test_the_case_shows_the_fields_what_was_missing_and_the_map():
    source, event = unreadable_jotform()
    case = ReviewCase.objects.get(event=event)
    url = reverse("console:case-detail", args=[case.pk])
    seen = client_for(settings_admin(contact=True)).get(url).content.decode()
    assert "The submission as received" in seen
    assert "q3_studentsName \u203a first" in seen and "Lovelace" in seen
    assert "No name, email address or phone number" in seen
    assert "_fullName" in seen  # the map that read it
    assert reverse("console:source-field-map", args=[source.pk]) in seen
    reviewer = client_for(make_user("rita", groups=("Reviewers",)))
    masked = reviewer.get(url).content.decode()
    assert "q3_studentsName \u203a first" in masked
    assert "Lovelace" not in masked and "GCSE" not in masked
    # A reviewer who may not change sources is not sent to a page that refuses them,
    # nor told of a link they do not have: the case goes to those who have it.
    assert reverse("console:source-field-map", args=[source.pk]) not in masked
    assert "link below" not in masked and "Hand it on to the Settings admins" in masked
    assert "(the link below)" in seen


def test_settings_admins_own_sources_field_maps_and_the_journey():
    """The Settings admins group itself (not a permission added by hand): Sources, the
    editor, the journey and the unreadable case, and the editor's choices saved and
    applied in one post, the form's labels in the picker."""
    source, event = unreadable_jotform()
    admin = client_for(make_user("sia", groups=("Settings admins",)))
    case = ReviewCase.objects.get(event=event)
    for url in (
        reverse("console:source-list"),
        reverse("console:source-detail", args=[source.pk]),
        reverse("console:journey", args=[source.name, "*"]),
        reverse("console:case-detail", args=[case.pk]),
    ):
        assert admin.get(url).status_code == 200, url
    editor = reverse("console:source-field-map", args=[source.pk])
    html = admin.get(editor).content.decode()
    assert ">Student&#x27;s Name \u203a first</option>" in html
    assert "Save and apply to the 1 waiting" in html
    assert html.index("Save and apply to the") > html.index('id="id_name_first"')
    done = admin.post(
        reverse("console:source-field-map-save", args=[source.pk]),
        picks(reason="Read the form's fields as the form names them", apply="1"),
        follow=True,
    )
    assert "1 waiting submission is now read" in done.content.decode()
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "remapped")
    event.refresh_from_db()
    assert event.payload["contact"] == {"name": "Ada Lovelace"}


def test_the_source_page_says_how_many_wait_and_links_to_the_editor(users):
    source, _ = unreadable_jotform()
    html = (
        client_for(users["superuser"])
        .get(reverse("console:source-detail", args=[source.pk]))
        .content.decode()
    )
    assert "1 unreadable submission waits" in html
    assert reverse("console:source-field-map", args=[source.pk]) in html


def test_a_json_api_source_has_no_field_map_to_edit():
    source, _ = source_get_or_create(name="website")
    admin = client_for(settings_admin(contact=True))
    assert admin.get(reverse("console:source-field-map", args=[source.pk])).status_code == 404
    url = reverse("console:source-field-map-preview", args=[source.pk])
    assert admin.post(url, picks()).status_code == 404
