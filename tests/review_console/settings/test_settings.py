"""The console's Settings pages: the business configuration edited per source, form and
section, previewed from a kept submission, sent as a test, and restored.

Only Settings admins (and superusers) reach them; a Reviewer gets 403 and no link.
A save is a new version through `config_section_apply` (audited `config_applied`,
with who and why); a draft with a problem is refused with each problem at its field
and the line the validator names, nothing written; a restore is one more version
holding the older document, audited `config_restored`. The preview renders what a
submission would get under the unsaved draft, masked for a viewer who may not see
contact details. test_settings_browser.py does it with the
mouse and the keyboard.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from idempotency_core.configuration.versions import config_current
from idempotency_core.models import AuditEntry, BusinessConfigVersion
from tests.factories import configured, ingest, make_user

pytestmark = pytest.mark.django_db

CONFIRMATION = {"confirmation": {"subject": "Thanks, {{ contact.name }}", "send": True}}


def settings_admin(username: str = "sam", *, contact: bool = False, email: str = "") -> User:
    user = make_user(username, groups=("Settings admins",))
    user.email = email
    user.save(update_fields=["email"])
    if contact:
        user.user_permissions.add(Permission.objects.get(codename="view_contact_details"))
    return User.objects.get(pk=user.pk)


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def section_url(name: str, section: str = "confirmation", form: str = "contact") -> str:
    return reverse(name, args=["website", form, section])


def confirmation_post(**overrides: str) -> dict[str, str]:
    data = {
        "based_on": str(config_current().number),
        "send": "yes",
        "subject": "Thanks, {{ contact.name }}",
        "text": "",
        "html": "",
        "reply_to": "",
        "language_field": "",
        "languages": "",
        "event": "",
        "reason": "",
    }
    data.update(overrides)
    return data


def test_only_settings_admins_and_superusers_reach_settings(source) -> None:
    configured({"contact": CONFIRMATION})
    reviewer = make_user("rita", groups=("Reviewers",))
    admin = settings_admin()
    superuser = User.objects.create_superuser("sue", password="x")
    pages = [
        reverse("console:settings"),
        reverse("console:settings-form", args=["website", "contact"]),
        section_url("console:settings-section"),
        reverse("console:settings-versions"),
        reverse("console:settings-version", args=[1]),
    ]
    actions = [
        section_url("console:settings-preview"),
        section_url("console:settings-save"),
        section_url("console:settings-test-send"),
        reverse("console:settings-restore", args=[1]),
    ]
    for url in pages:
        assert client_for(reviewer).get(url).status_code == 403, url
        assert client_for(admin).get(url).status_code == 200, url
        assert client_for(superuser).get(url).status_code == 200, url
        anonymous = Client().get(url)
        assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    before = (AuditEntry.objects.count(), BusinessConfigVersion.objects.count())
    for url in actions:
        assert client_for(reviewer).post(url, confirmation_post(reason="x")).status_code == 403
        assert client_for(admin).get(url).status_code == 405, url
    assert (AuditEntry.objects.count(), BusinessConfigVersion.objects.count()) == before
    # The menu offers Settings to those it opens for, and to no one else.
    assert 'href="/console/settings/"' not in client_for(reviewer).get("/console/").text
    assert 'href="/console/settings/"' in client_for(superuser).get("/console/").text
    admin_page = client_for(admin).get(pages[0]).text
    assert 'href="/console/settings/"' in admin_page
    # A Settings admin sees cases (an unreadable submission's is theirs to fix) and
    # owns the customer journey: the form's page links it.
    assert client_for(admin).get("/console/").status_code == 200
    assert client_for(reviewer).get("/console/").status_code == 200
    journey = reverse("console:journey", args=["website", "contact"])
    assert journey in client_for(admin).get(pages[1]).text
    assert journey in client_for(superuser).get(pages[1]).text


def test_the_list_shows_each_source_with_its_forms_and_configured_blocks(source) -> None:
    configured({"contact": CONFIRMATION, "*": {"task": {"title": "Call {{ contact.name }}"}}})
    ingest("seen-1", form="quote")
    ingest("seen-2", contact={"name": "Grace Hopper", "email": "grace@example.com"})
    page = client_for(settings_admin()).get(reverse("console:settings")).text
    assert "website" in page and "version 1" in page
    assert 'href="/console/settings/website/contact/"' in page
    assert 'href="/console/settings/website/*/"' in page
    assert "Confirmation email" in page and "Follow-up task" in page
    # A form it received lately with no block of its own is offered as one to add.
    assert 'href="/console/settings/website/quote/"' in page
    # "*" previews from a form the source names no block for: the quote, not the contact.
    client = client_for(settings_admin("sue-c", contact=True))
    rest = client.get(section_url("console:settings-section", "task", form="*")).text
    assert "Call Ada Lovelace" in rest and "Grace" not in rest
    typed = client.get(reverse("console:settings"), {"source": "website", "form": "brochure"})
    assert typed["Location"] == "/console/settings/website/brochure/"


def test_a_save_is_a_new_version_with_who_and_why_and_keeps_the_rest(source) -> None:
    configured({"contact": {"task": {"title": "Ring"}}, "*": {"task": {"title": "Call"}}})
    admin = settings_admin()
    response = client_for(admin).post(
        section_url("console:settings-save"),
        confirmation_post(subject="We got it, {{ contact.first_name }}", reason="warmer"),
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("console:settings-form", args=["website", "contact"])
    version = BusinessConfigVersion.objects.get(number=2)
    assert (version.created_by, version.reason) == (admin, "warmer")
    forms = version.document["sources"]["website"]["forms"]
    assert forms["contact"] == {
        "task": {"title": "Ring"},
        "confirmation": {"subject": "We got it, {{ contact.first_name }}"},
    }
    assert forms["*"] == {"task": {"title": "Call"}}
    entry = AuditEntry.objects.get(action="config_applied", actor=admin)
    assert entry.reason == "warmer"
    assert entry.details["changes"] == ["sources.website.forms.contact.confirmation.subject added"]


def test_a_draft_with_problems_is_refused_at_its_fields_and_nothing_is_saved(source) -> None:
    configured({"contact": CONFIRMATION})
    client = client_for(settings_admin())
    response = client.post(
        section_url("console:settings-save"),
        confirmation_post(
            subject="Hi {{ contact.name|bogus }}",
            text="Hello\n{% if %}",
            reply_to="not an address",
            languages="fr:\n  subject: 'Merci {{ x|nope }}'\n  colour: red\n",
            reason="try",
        ),
    )
    assert response.status_code == 400
    page = response.text
    # Each problem is at its field, with the line of its box where it has lines.
    assert "template line 1: Invalid filter: &#x27;bogus&#x27;" in _field(page, "subject")
    assert "template line 2:" in _field(page, "text")
    assert "is not one email address" in _field(page, "reply_to")
    languages = _field(page, "languages")
    assert "line 2: fr.subject: template line 1: Invalid filter: &#x27;nope&#x27;" in languages
    assert "line 3: fr.colour: unknown key" in languages
    assert "languages need a language_field" in languages
    assert BusinessConfigVersion.objects.count() == 1
    assert not AuditEntry.objects.filter(action="config_applied", actor__isnull=False).exists()

    # YAML that is not YAML, and no reason: refused the same way.
    response = client.post(
        section_url("console:settings-save", "enquiry"),
        {"based_on": "1", "fields": "company: [unclosed\n", "pipeline": "", "stage": ""},
    )
    assert response.status_code == 400
    assert "line 2: not YAML" in _field(response.text, "fields")
    assert "Say why" in _field(response.text, "reason")
    assert BusinessConfigVersion.objects.count() == 1


def _field(page: str, name: str) -> str:
    """The part of the editor's page that is the field `name`'s (its box and errors)."""
    start = page.index(f'id="field-{name}"')
    end = page.find('<div class="field', start + 1)
    return page[start : end if end != -1 else None]


def test_a_save_over_someone_elses_change_of_the_same_section_is_refused(source) -> None:
    configured({"contact": CONFIRMATION})
    configured({"contact": {"confirmation": {"subject": "Changed by Ben"}}})
    response = client_for(settings_admin()).post(
        section_url("console:settings-save"),
        confirmation_post(based_on="1", subject="Mine", reason="mine"),
    )
    assert response.status_code == 409
    assert "were changed by version 2 after you opened them" in response.text
    assert config_current().number == 2


def test_the_preview_renders_the_draft_from_a_kept_submission_masked_unless_allowed(
    source,
) -> None:
    configured({"contact": CONFIRMATION})
    older = ingest("older-1", contact={"name": "Grace Hopper", "email": "grace@example.com"})
    newer = ingest("newer-1")  # Ada Lovelace, the newest: the one shown first
    draft = confirmation_post(subject="Hello {{ contact.name }}, about {{ fields.budget }}")
    url = section_url("console:settings-preview")
    htmx = {"HX-Request": "true"}

    masked = client_for(settings_admin()).post(url, draft, headers=htmx)
    assert masked.status_code == 200
    assert "<html" not in masked.text  # the preview's part only, for htmx
    assert "Hello A. L., about" in masked.text
    assert "Ada" not in masked.text and "ada@example.com" not in masked.text
    assert "a***@example.com" in masked.text

    allowed = client_for(settings_admin("sue-c", contact=True))
    shown = allowed.post(url, draft, headers=htmx).text
    assert "Hello Ada Lovelace, about" in shown and "ada@example.com" in shown
    picked = allowed.post(url, {**draft, "event": str(older.pk)}, headers=htmx).text
    assert "Hello Grace Hopper" in picked and "grace@example.com" in picked
    # A draft with a problem shows it instead; nothing is written either way.
    broken = allowed.post(url, {**draft, "subject": "{{ x|bogus }}"}, headers=htmx).text
    assert "Invalid filter" in broken
    assert BusinessConfigVersion.objects.count() == 1

    # The editor's page opens with the saved section rendered from the newest one.
    page = allowed.get(section_url("console:settings-section")).text
    assert "Thanks, Ada Lovelace" in page
    assert f'<option value="{newer.pk}" selected>' in page

    # The task and the enquiry preview what their steps would send (staff values as
    # submitted: only a confirmation filters what a visitor typed).
    task = allowed.post(
        section_url("console:settings-preview", "task"),
        {
            "title": "Call {{ contact.name }} ({{ fields.budget }})",
            "assignee": "{round_robin: [ana, ben]}",
            "due_in_hours": "24",
            "event": str(older.pk),
        },
        headers=htmx,
    ).text
    assert "Call Grace Hopper (10k)" in task and "ana" in task and "round_robin" in task
    enquiry = allowed.post(
        section_url("console:settings-preview", "enquiry"),
        {"fields": "budget_amount: '{{ fields.budget }}'\n", "pipeline": "", "stage": "sales"},
        headers=htmx,
    ).text
    assert "budget_amount" in enquiry and "10k" in enquiry and "sales" in enquiry
    assert BusinessConfigVersion.objects.count() == 1


def test_a_test_send_goes_to_the_admin_alone_through_the_mail_destination(source, sandbox) -> None:
    configured({"contact": CONFIRMATION})
    ingest("kept-1")
    admin = settings_admin(email="sam@example.org")
    client = client_for(admin)
    draft = confirmation_post(subject="Test {{ contact.name }}", html="<p>Hi</p>")
    response = client.post(section_url("console:settings-test-send"), draft)
    assert response.status_code == 200
    assert "A test of this draft was sent to sam@example.org" in response.text
    (message,) = sandbox.messages()
    assert message["rcpt_to"] == ["sam@example.org"]
    assert message["subject"] == "Test A. L."  # masked: the admin may not see contacts
    assert message["html"].strip() == "<p>Hi</p>"
    entry = AuditEntry.objects.get(action="config_test_sent")
    assert entry.actor == admin and entry.details["outcome"] == "sent"
    assert entry.details["key"].startswith("opk_")
    # A second test is a fresh key: the mail service takes it as a new message.
    client.post(section_url("console:settings-test-send"), draft)
    first, second = sandbox.messages()
    assert first["message_id"] != second["message_id"]
    assert BusinessConfigVersion.objects.count() == 1  # a test saves nothing

    # Refused, nothing sent: an account without an address.
    nobody = client_for(settings_admin("noemail"))
    refused = nobody.post(section_url("console:settings-test-send"), draft)
    assert "Your account has no email address" in refused.text
    assert len(sandbox.messages()) == 2


def test_a_restore_is_a_new_version_with_the_old_document_audited(source) -> None:
    configured({"contact": CONFIRMATION})
    configured({"contact": {"confirmation": {"subject": "Second"}}})
    configured({"*": {"task": {"title": "Later"}}}, source="shop")
    admin = settings_admin()
    client = client_for(admin)
    page = client.get(reverse("console:settings-version", args=[2])).text
    assert "sources.website.forms.contact.confirmation.subject changed" in page
    assert "sources.website.forms.contact.confirmation.send removed" in page
    detail = client.get(reverse("console:settings-version", args=[1])).text
    assert "sources.shop.forms.*.task.title removed" in detail  # what restoring it changes

    url = reverse("console:settings-restore", args=[1])
    assert client.post(url, {"confirm": "yes", "reason": ""}).status_code == 400
    assert BusinessConfigVersion.objects.count() == 3
    response = client.post(url, {"confirm": "yes", "reason": "the second subject confused"})
    assert response.status_code == 302
    restored = BusinessConfigVersion.objects.get(number=4)
    first = BusinessConfigVersion.objects.get(number=1)
    assert restored.document == first.document  # shop's block, added later, is gone
    assert (restored.created_by, restored.reason) == (admin, "the second subject confused")
    entry = AuditEntry.objects.get(action="config_restored")
    assert entry.actor == admin and entry.reason == "the second subject confused"
    assert entry.details["restored_version"] == 1 and entry.details["version"] == 4
    listing = client.get(reverse("console:settings-versions")).text
    assert "the second subject confused" in listing and "<td>sam</td>" in listing
