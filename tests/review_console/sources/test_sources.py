"""The console's source pages: profile, hook URL, secrets by prefix, deliveries by outcome.

Deliveries are made the real way, by posting to the hook with Django's test client;
the actions go through the console's confirmation (POST with `confirm=yes` and a
reason) and leave audit entries naming a secret only by its prefix.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from idempotency_core.audit.cases import review_case_open
from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.models import AuditEntry, Delivery, Event, ReviewCase, Source
from tests.support.senders import SAMPLES, signed_headers

pytestmark = pytest.mark.django_db

SECRET = "first-signing-secret-2026-long-enough-for-hmac"
SAMPLE = SAMPLES["generic"]


def signed_source(name: str = "zapier") -> Source:
    source, _ = source_get_or_create(name=name)
    source_hook_configure(source=source, profile="generic", secrets=[SECRET], form="leads")
    return source


def deliver(source: Source, *, secret: str = SECRET):
    path = f"/hooks/{source.name}/"
    headers = signed_headers(SAMPLE, secret, f"http://testserver{path}")
    content_type = headers.pop("Content-Type")
    return Client().post(path, SAMPLE.body, content_type=content_type, headers=headers)


def logged_in(user: User | None) -> Client:
    client = Client()
    assert user is not None
    client.force_login(user)
    return client


def page(client: Client, source: Source) -> str:
    response = client.get(reverse("console:source-detail", args=[source.pk]))
    assert response.status_code == 200
    return response.content.decode()


def confirmed(client: Client, name: str, source: Source, **data: str):
    url = reverse(name, args=[source.pk])
    return client.post(url, {"confirm": "yes", "reason": "Rotating after a leak", **data})


def test_the_pages_render_for_staff_who_may_view_and_refuse_non_staff(users):
    source = signed_source()
    deliver(source)
    deliver(source, secret="not-the-secret-at-all")
    listing = logged_in(users["reviewer"]).get(reverse("console:source-list"))
    assert listing.status_code == 200
    text = listing.content.decode()
    assert "zapier" in text and "Generic signed JSON" in text
    # In words (review_console/glossary.py), not the outcome codes.
    assert "Received (first time): 1" in text and "Refused: signature or token wrong: 1" in text
    detail = page(logged_in(users["reviewer"]), source)
    assert "http://testserver/hooks/zapier/" in detail
    # A Reviewer learns how many secrets there are, not how they start (security
    # review F11: their first characters only for those who may change sources).
    assert "1 signing secret" in detail and f"{SECRET[:4]}…" not in detail
    assert SECRET not in detail
    assert "leads" in detail and "Flag: both are processed" in detail
    assert "Onefold-Signature: t=&lt;unix seconds&gt;" in detail  # the provider's setup text
    assert "Disable…" not in detail, "a reviewer may look, not change"
    nonstaff = logged_in(users["nonstaff"])
    assert nonstaff.get(reverse("console:source-list")).status_code == 403
    assert nonstaff.get(reverse("console:source-detail", args=[source.pk])).status_code == 403


def test_a_token_profile_shows_its_url_without_the_token(users):
    source, _ = source_get_or_create(name="site-form")
    setup = source_hook_configure(source=source, profile="html", thank_you_url="https://x.test/ok")
    text = page(logged_in(users["reviewer"]), source)
    assert "http://testserver/hooks/site-form/t/&lt;token shown once at creation&gt;/" in text
    assert setup.token not in text
    assert "Website form (HTML)" in text and "https://x.test/ok" in text


SOURCE_ACTIONS = (
    "console:source-disable",
    "console:source-enable",
    "console:source-secret-add",
    "console:source-secret-remove",
)


@pytest.mark.parametrize("name", SOURCE_ACTIONS)
def test_get_on_an_action_is_405(users, name):
    source = signed_source()
    client = logged_in(users["superuser"])
    assert client.get(reverse(name, args=[source.pk])).status_code == 405


def test_disabling_with_a_reason_makes_the_hook_answer_503(users):
    source = signed_source()
    client = logged_in(users["superuser"])
    asked = client.post(reverse("console:source-disable", args=[source.pk]))
    assert asked.status_code == 200 and "503 with Retry-After" in asked.content.decode()
    no_reason = confirmed(client, "console:source-disable", source, reason="")
    assert no_reason.status_code == 200
    source.refresh_from_db()
    assert source.is_active, "no reason, no change"
    done = confirmed(client, "console:source-disable", source)
    assert done.status_code == 302 and done["Location"] == f"/console/sources/{source.pk}/"
    source.refresh_from_db()
    assert not source.is_active
    entry = AuditEntry.objects.get(action="source_disabled")
    assert (entry.actor_label, entry.reason) == ("user:sue", "Rotating after a leak")
    assert entry.details == {"source": "zapier", "source_id": source.pk}
    refused = deliver(source)
    assert refused.status_code == 503 and refused["Retry-After"]
    assert not Event.objects.filter(source=source).exists()
    again = confirmed(client, "console:source-enable", source)
    assert again.status_code == 302
    assert deliver(source).status_code == 200


def test_a_reviewer_cannot_change_a_source(users):
    source = signed_source()
    client = logged_in(users["reviewer"])
    assert confirmed(client, "console:source-disable", source).status_code == 403
    assert confirmed(client, "console:source-secret-add", source).status_code == 403
    source.refresh_from_db()
    assert source.is_active and source.secrets.count() == 1
    assert not AuditEntry.objects.exists()


def test_a_new_secret_is_shown_once_and_then_only_by_its_prefix(users):
    source = signed_source()
    client = logged_in(users["superuser"])
    added = confirmed(client, "console:source-secret-add", source)
    assert added.status_code == 200 and added["Cache-Control"] == "no-store"
    new = source.secrets.order_by("-created_at", "-pk").first()
    assert new is not None and new.secret != SECRET and len(new.secret) >= 40
    assert new.secret in added.content.decode()
    later = page(client, source)
    assert new.secret not in later and new.prefix in later
    entry = AuditEntry.objects.get(action="source_secret_added")
    assert entry.details["prefix"] == new.prefix and entry.details["generated"] is True
    assert new.secret not in str(entry.details) and new.secret not in entry.reason
    assert deliver(source, secret=new.secret).status_code == 200  # it verifies


def test_a_typed_secret_is_not_echoed_and_a_shared_prefix_is_refused(users):
    source = signed_source()
    client = logged_in(users["superuser"])
    typed = "webflow-secret-key-abc-long-enough-for-hmac-256"
    added = confirmed(client, "console:source-secret-add", source, secret=typed)
    assert added.status_code == 200 and typed not in added.content.decode()
    assert typed[:6] in added.content.decode()
    clash = confirmed(client, "console:source-secret-add", source, secret=SECRET[:6] + "-other")
    assert clash.status_code == 200 and "choose one that starts differently" in (
        clash.content.decode()
    )
    assert source.secrets.count() == 2


def test_removing_a_secret_by_prefix_is_audited_and_refuses_its_signatures(users):
    source = signed_source()
    client = logged_in(users["superuser"])
    asked = client.post(
        reverse("console:source-secret-remove", args=[source.pk]), {"secret_prefix": SECRET[:6]}
    )
    assert asked.status_code == 200 and "only secret" in asked.content.decode()
    done = confirmed(client, "console:source-secret-remove", source, secret_prefix=SECRET[:6])
    assert done.status_code == 302
    assert not source.secrets.exists()
    entry = AuditEntry.objects.get(action="source_secret_removed")
    assert entry.details["prefix"] == SECRET[:6] and SECRET not in str(entry.details)
    assert entry.details["removed"] == 1
    assert deliver(source).status_code == 401


def test_a_token_profile_takes_no_secret(users):
    source, _ = source_get_or_create(name="jot")
    source_hook_configure(source=source, profile="jotform")
    response = confirmed(logged_in(users["superuser"]), "console:source-secret-add", source)
    assert response.status_code == 200 and "does not sign" in response.content.decode()
    assert not source.secrets.exists() and not AuditEntry.objects.exists()


def test_delivery_rows_show_outcomes_and_never_content(users):
    source = signed_source()
    assert deliver(source).status_code == 200
    assert deliver(source, secret="not-the-secret-at-all").status_code == 401
    text = page(logged_in(users["superuser"]), source)
    assert "Refused: signature or token wrong" in text
    assert '<td class="mono">401</td>' in text
    assert "Received (first time)" in text and "signature verified with secret 1" in text
    name, email, message = SAMPLE.expected
    for content in (name, email, message, "Mary"):
        assert content not in text, f"{content!r} is payload content"
    assert "case #" not in text, "no case, no link"
    event = Event.objects.get(source=source)
    case, _ = review_case_open(
        kind=ReviewCase.Kind.PERMANENT, subject="test:1", summary="x", event=event, system="test"
    )
    assert reverse("console:case-detail", args=[case.pk]) in page(
        logged_in(users["superuser"]), source
    )
    refused = Delivery.objects.get(source=source, outcome="unauthorized")
    assert refused.raw_body is None and refused.event_id is None


def test_the_admin_shows_prefixes_not_secrets_and_audits_a_secret_added(users):
    source = signed_source()
    client = logged_in(users["superuser"])
    url = reverse("admin:idempotency_core_source_change", args=[source.pk])
    form = client.get(url)
    assert form.status_code == 200
    assert SECRET not in form.content.decode() and SECRET[:6] in form.content.decode()
    existing = source.secrets.get()
    data = {
        "is_active": "on",
        "default_form": "leads",
        "thank_you_url": "",
        "duplicates": "hold",
        "rate_per_minute": "",
        "task_assignee": "sales",
        "secrets-TOTAL_FORMS": "2",
        "secrets-INITIAL_FORMS": "1",
        "secrets-0-id": str(existing.pk),
        "secrets-0-source": str(source.pk),
        "secrets-1-source": str(source.pk),
        "secrets-1-secret": "typed-in-the-admin-1-long-enough-for-hmac-sha256",
    }
    saved = client.post(url, data)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    source.refresh_from_db()
    assert source.duplicates == "hold"
    assert sorted(source.secrets.values_list("prefix", flat=True)) == ["first-", "typed-"]
    assert (
        source.secrets.get(prefix="typed-").secret
        == "typed-in-the-admin-1-long-enough-for-hmac-sha256"
    )
    assert AuditEntry.objects.get(action="source_secret_added").details["prefix"] == "typed-"


def test_the_admin_lists_deliveries_without_their_body(users):
    source = signed_source()
    deliver(source)
    client = logged_in(users["superuser"])
    delivery = Delivery.objects.get()
    listing = client.get(reverse("admin:idempotency_core_delivery_changelist"))
    assert listing.status_code == 200
    detail = client.get(reverse("admin:idempotency_core_delivery_change", args=[delivery.pk]))
    assert detail.status_code == 200
    text = detail.content.decode()
    assert "accepted" in text and "Mary Jackson" not in text and "raw_body" not in text


def test_the_page_names_the_latest_refusal_which_the_sender_is_not_told(users):
    source = signed_source()
    Client().post(f"/hooks/{source.name}/", SAMPLE.body, content_type="application/json")
    for _ in range(3):  # counted in the same row
        deliver(source, secret="not-the-secret-at-all")
    text = page(logged_in(users["reviewer"]), source)
    assert "Last refused delivery" in text
    assert "the signature matches none of the configured secrets" in text
    assert "3 in that minute" in text or "4 in that minute" in text


def test_settings_are_changed_on_the_page_with_the_thank_you_rule_and_audited(users):
    source, _ = source_get_or_create(name="site-form")
    source_hook_configure(source=source, profile="html", thank_you_url="https://x.test/ok")
    client = logged_in(users["superuser"])
    url = reverse("console:source-settings", args=[source.pk])
    assert client.get(url).status_code == 405
    opened = client.post(url)
    assert opened.status_code == 200 and "https://x.test/ok" in opened.content.decode()
    refused = confirmed(
        client,
        "console:source-settings",
        source,
        thank_you_url="//evil.example/x",
        duplicates="flag",
    )
    assert refused.status_code == 200
    assert "must be an absolute https:// URL" in refused.content.decode()
    source.refresh_from_db()
    assert source.thank_you_url == "https://x.test/ok"
    saved = confirmed(
        client,
        "console:source-settings",
        source,
        thank_you_url="https://x.test/thanks",
        duplicates="hold",
    )
    assert saved.status_code == 302
    source.refresh_from_db()
    assert (source.thank_you_url, source.duplicates) == ("https://x.test/thanks", "hold")
    entry = AuditEntry.objects.get(action="source_settings_changed")
    assert entry.details["changes"]["thank_you_url"] == {
        "from": "https://x.test/ok",
        "to": "https://x.test/thanks",
    }
    reviewer = logged_in(users["reviewer"])
    assert reviewer.post(url).status_code == 403


def test_the_admin_refuses_a_scheme_relative_thank_you_url(users):
    source = signed_source()
    client = logged_in(users["superuser"])
    url = reverse("admin:idempotency_core_source_change", args=[source.pk])
    data = {
        "is_active": "on",
        "default_form": "leads",
        "thank_you_url": "//evil.example/x",
        "duplicates": "flag",
        "rate_per_minute": "",
        "task_assignee": "sales",
        "secrets-TOTAL_FORMS": "1",
        "secrets-INITIAL_FORMS": "1",
        "secrets-0-id": str(source.secrets.get().pk),
        "secrets-0-source": str(source.pk),
    }
    answer = client.post(url, data)
    assert answer.status_code == 200
    assert "must be an absolute https:// URL" in answer.content.decode()
    source.refresh_from_db()
    assert source.thank_you_url == ""
