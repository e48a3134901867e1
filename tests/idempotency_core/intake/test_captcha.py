"""The html profile's CAPTCHA, checked by the provider's siteverify before anything is kept.

Against a siteverify stand-in on loopback (tests/support/siteverify.py) that answers
as the three providers document; the hook in process (Django's client, the real view
and database), and the pipeline against the sandbox CRM and SMTP sink.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.senders.captcha import PROVIDERS
from idempotency_core.intake.sources import (
    InvalidProfileError,
    source_get_or_create,
    source_hook_configure,
)
from idempotency_core.models import AuditEntry, Delivery, Event, ReviewCase, Source
from tests.support.siteverify import SECRET, SiteverifyStandIn

pytestmark = pytest.mark.django_db

FORM = "application/x-www-form-urlencoded"
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
THANKS = "https://www.example.com/thanks/"


@pytest.fixture
def siteverify(settings) -> Iterator[SiteverifyStandIn]:
    stand_in = SiteverifyStandIn()
    settings.ONEFOLD_CAPTCHA_VERIFY_URL = stand_in.url
    settings.ONEFOLD_CAPTCHA_TIMEOUT_SECONDS = 1.0
    yield stand_in
    stand_in.stop()


def captcha_source(provider: str = "turnstile", name: str = "site-form") -> tuple[Source, str]:
    source, _ = source_get_or_create(name=name)
    setup = source_hook_configure(
        source=source,
        profile="html",
        thank_you_url=THANKS,
        captcha=provider,
        captcha_secret=SECRET,
    )
    return source, setup.path


def form_body(token: str | None, *, field: str = "cf-turnstile-response", **fields: str) -> bytes:
    """A website form as a browser posts it, with form.js's id and honeypot."""
    values = {
        "name": "Ada Lovelace",
        "email": "ada@example.com",
        "message": "A quote for twenty units, please.",
        "website": "",
        "submission_id": str(uuid.uuid4()),
        **fields,
    }
    if token is not None:
        values[field] = token
    return urlencode(values).encode()


def post(path: str, body: bytes, **headers: str):
    return Client().post(path, body, content_type=FORM, headers=headers)


def run_pipeline(event_id: str) -> list[str | None]:
    event = Event.objects.get(pk=event_id)
    return [operation_execute(operation_id=o.pk) for o in event.operations.order_by("position")]


# -- refused: nothing kept, the sender told why ----------------------------------------


def test_a_program_without_a_token_gets_400_captcha_failed_and_nothing_is_kept(siteverify):
    source, path = captcha_source()

    response = post(path, form_body(None))

    assert response.status_code == 400
    assert response.json()["code"] == "captcha_failed"
    assert "cf-turnstile-response" in response.json()["detail"]
    assert not Event.objects.exists()
    delivery = Delivery.objects.get(source=source)
    assert (delivery.outcome, delivery.status_code, delivery.raw_body) == (
        "captcha_failed",
        400,
        None,
    )
    # A missing token costs the provider nothing: it is not asked.
    assert siteverify.requests == []


def test_a_browser_without_a_token_gets_the_forms_error_page_with_a_link_back(siteverify):
    _, path = captcha_source()

    response = post(path, form_body(""), Accept=BROWSER, Referer="https://www.example.com/contact/")

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "Your message was not sent" in page
    assert '<a href="https://www.example.com/contact/">Go back to the form</a>' in page
    assert not Event.objects.exists()


def test_the_link_back_is_only_ever_a_web_address(siteverify):
    _, path = captcha_source()

    response = post(path, form_body(None), Accept=BROWSER, Referer="javascript:alert(1)")

    page = response.content.decode()
    assert response.status_code == 400 and "javascript:" not in page
    assert "Go back to the form" in page


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_token_the_provider_refuses_is_refused(siteverify, provider):
    field = PROVIDERS[provider].field
    _, path = captcha_source(provider)

    response = post(path, form_body("forged-token", field=field))

    assert response.status_code == 400
    assert response.json()["code"] == "captcha_failed"
    assert "invalid-input-response" in response.json()["detail"]
    assert not Event.objects.exists()
    # The provider's documented request: a form-encoded POST of secret and response
    # (remoteip only for a public address: the test client's is loopback).
    (request,) = siteverify.requests
    assert request["content_type"] == FORM
    assert request["form"] == {"secret": SECRET, "response": "forged-token"}


def test_a_public_client_address_is_sent_as_remoteip(siteverify):
    _, path = captcha_source()

    Client(REMOTE_ADDR="81.2.69.160").post(path, form_body("pass-1"), content_type=FORM)

    (request,) = siteverify.requests
    assert request["form"]["remoteip"] == "81.2.69.160"


# -- passed: processed once -------------------------------------------------------------


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_valid_token_is_processed_record_task_and_email(siteverify, sandbox, provider):
    source, path = captcha_source(provider)

    response = post(path, form_body("pass-good", field=PROVIDERS[provider].field))

    assert response.status_code == 200, response.content
    event_id = response.json()["event_id"]
    assert run_pipeline(event_id) == ["succeeded"] * 3
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)
    (delivery,) = Delivery.objects.filter(source=source)
    assert f"{PROVIDERS[provider].label} passed on www.example.com" in delivery.verification
    # The token is proof for the hook, not a field of the enquiry.
    payload = Event.objects.get(pk=event_id).payload or {}
    assert PROVIDERS[provider].field not in (payload.get("fields") or {})


def test_a_browser_with_a_valid_token_lands_on_the_thank_you_page(siteverify):
    _, path = captcha_source()

    response = post(path, form_body("pass-browser"), Accept=BROWSER)

    assert (response.status_code, response["Location"]) == (303, THANKS)
    assert Event.objects.count() == 1


def test_the_browsers_repost_of_a_stored_submission_is_a_repeat_not_a_refusal(siteverify):
    _, path = captcha_source()
    body = form_body("pass-once")
    first = post(path, body)

    # The same post again (its single-use token now refused by the provider).
    again = post(path, body)

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert Event.objects.count() == 1
    assert len(siteverify.requests) == 1


# -- unchecked: refused by default; with ONEFOLD_CAPTCHA_FAILURE=open, kept and
# processed, the confirmation held for a person -----------------------------------------


def trouble_make(siteverify, source: Source, trouble: str) -> None:
    if trouble == "down":
        siteverify.stop()
    elif trouble == "wrong_secret":
        Source.objects.filter(pk=source.pk).update(captcha_secret="0x-not-the-secret")
    else:
        siteverify.mode = trouble
        siteverify.slow_seconds = 2.0  # beyond the 1-second timeout


@pytest.mark.parametrize("trouble", ["down", "error", "slow", "wrong_secret"])
def test_by_default_a_submission_siteverify_cannot_check_is_refused(siteverify, trouble):
    source, path = captcha_source()
    trouble_make(siteverify, source, trouble)

    response = post(path, form_body("pass-outage"))

    assert response.status_code == 400
    assert response.json()["code"] == "captcha_failed"
    assert "CAPTCHA not checked" in response.json()["detail"]
    assert not Event.objects.exists()
    (delivery,) = Delivery.objects.all()
    assert delivery.outcome == Delivery.Outcome.CAPTCHA_FAILED


@pytest.mark.parametrize("trouble", ["down", "error", "slow", "wrong_secret"])
def test_failing_open_a_submission_siteverify_cannot_check_is_kept_and_its_email_held(
    siteverify, sandbox, settings, trouble
):
    settings.ONEFOLD_CAPTCHA_FAILURE = "open"
    source, path = captcha_source()
    trouble_make(siteverify, source, trouble)

    response = post(path, form_body("pass-outage"), Accept=BROWSER)

    # The person is not turned away for the provider's trouble (or ours).
    assert (response.status_code, response["Location"]) == (303, THANKS)
    (event,) = Event.objects.all()
    assert "CAPTCHA not checked" in Delivery.objects.get(event=event).verification
    # Processed: the enquiry and its task are written; the email waits for a person.
    assert run_pipeline(str(event.pk)) == ["succeeded", "succeeded", "permanent"]
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 0)
    (case,) = ReviewCase.objects.filter(event=event)
    assert case.kind == "confirmation_held"
    assert "CAPTCHA could not be checked" in case.summary


# -- configuration ------------------------------------------------------------------------


def test_create_source_takes_a_captcha_for_an_html_source(capsys):
    call_command(
        "create_source",
        "shop-form",
        "--profile",
        "html",
        "--captcha",
        "hcaptcha",
        "--captcha-secret",
        SECRET,
    )

    out = capsys.readouterr().out.splitlines()
    source = Source.objects.get(name="shop-form")
    assert (source.captcha_provider, source.captcha_secret) == ("hcaptcha", SECRET)
    assert any("h-captcha-response" in line for line in out)
    assert out[-1].startswith("/hooks/shop-form/t/")  # the path stays the last line
    assert SECRET not in "\n".join(out)


@pytest.mark.parametrize(
    "arguments",
    [
        ["--profile", "jotform", "--captcha", "turnstile", "--captcha-secret", SECRET],
        ["--profile", "html", "--captcha", "turnstile"],
        ["--profile", "html", "--captcha-secret", SECRET],
    ],
)
def test_create_source_refuses_a_captcha_it_could_not_check(arguments):
    with pytest.raises(CommandError):
        call_command("create_source", "refused-form", *arguments)
    assert not Source.objects.filter(name="refused-form").exists()


def test_the_database_refuses_a_provider_without_its_secret():
    source, _ = source_get_or_create(name="no-secret")
    with pytest.raises(IntegrityError), transaction.atomic():
        Source.objects.filter(pk=source.pk).update(captcha_provider="turnstile")


def test_a_captcha_is_refused_for_other_profiles():
    source, _ = source_get_or_create(name="typeform-site")
    with pytest.raises(InvalidProfileError, match="html profile"):
        source_hook_configure(
            source=source, profile="typeform", captcha="turnstile", captcha_secret=SECRET
        )


# -- the console's source page --------------------------------------------------------


def test_the_source_page_sets_the_captcha_behind_a_confirmation_and_audits_it():
    admin = User.objects.create_superuser("sue", password="x")
    client = Client()
    client.force_login(admin)
    source, _ = source_get_or_create(name="plain-form")
    source_hook_configure(source=source, profile="html")
    detail = reverse("console:source-detail", args=[source.pk])
    action = reverse("console:source-captcha", args=[source.pk])
    assert "Change the CAPTCHA…" in client.get(detail).content.decode()
    assert client.get(action).status_code == 405  # actions are POST only

    asked = client.post(action)  # the confirmation page, nothing changed yet
    assert asked.status_code == 200 and "Secret key" in asked.content.decode()
    refused = client.post(action, {"confirm": "yes", "provider": "turnstile", "reason": "spam"})
    assert "secret key is needed" in refused.content.decode()
    done = client.post(
        action,
        {"confirm": "yes", "provider": "turnstile", "secret": SECRET, "reason": "spam wave"},
    )

    assert (done.status_code, done["Location"]) == (302, detail)
    source.refresh_from_db()
    assert (source.captcha_provider, source.captcha_secret) == ("turnstile", SECRET)
    entry = AuditEntry.objects.get(action="source_captcha_set")
    assert entry.reason == "spam wave"
    assert entry.details["provider"] == "turnstile"
    assert entry.details["secret_prefix"] == SECRET[:6]
    assert SECRET not in str(entry.details)
    page = client.get(detail).content.decode()
    assert "Cloudflare Turnstile" in page and f"{SECRET[:4]}…" in page  # 4 shown (F11)
    assert SECRET not in page

    # Switched off again; the secret goes with it.
    client.post(action, {"confirm": "yes", "provider": "", "reason": "widget removed"})
    source.refresh_from_db()
    assert (source.captcha_provider, source.captcha_secret) == ("", "")


def test_only_those_who_may_change_a_source_see_or_use_the_captcha_action():
    reviewer = User.objects.create_user("rita", is_staff=True)
    reviewer.groups.add(Group.objects.get(name="Reviewers"))
    source, _ = captcha_source()
    client = Client()
    client.force_login(reviewer)
    page = client.get(reverse("console:source-detail", args=[source.pk])).content.decode()
    assert "Cloudflare Turnstile" in page and "Change the CAPTCHA…" not in page
    action = reverse("console:source-captcha", args=[source.pk])
    refused = client.post(action, {"confirm": "yes", "provider": "", "reason": "x"})
    assert refused.status_code == 403
    assert Source.objects.get(pk=source.pk).captcha_provider == "turnstile"
