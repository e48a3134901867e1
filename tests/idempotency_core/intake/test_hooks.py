"""Hooks in process: every preset's sample verified, mapped and ingested once.

Business logic over Django's test client (the real view, the real database);
test_hooks_end_to_end.py proves the same on a running server with a
worker cluster and the sandbox.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, urlencode

import pytest
from django.test import Client

from idempotency_core.intake.senders.profiles import PRESETS
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Delivery, Event, Source
from tests.support.senders import (
    SAMPLES,
    SECRET,
    Sample,
    deliver,
    hook_source,
    multipart_parts,
)

pytestmark = pytest.mark.django_db


def test_every_preset_has_a_sample():
    assert set(SAMPLES) == set(PRESETS)


@pytest.mark.parametrize("profile", sorted(SAMPLES))
def test_a_sample_makes_one_event_and_its_repeat_none(profile):
    sample = SAMPLES[profile]
    source, path = hook_source(profile)
    client = Client()
    first = deliver(client, path, sample)
    assert first.status_code == 200, first.content
    event = Event.objects.get(source=source)
    assert first.json() == {"event_id": str(event.pk)}
    name, email, message = sample.expected
    payload = event.payload or {}
    assert (payload["contact"]["name"], payload["contact"]["email"]) == (name, email)
    assert payload.get("message", "") == message
    again = deliver(client, path, sample)  # the provider's retry: signed anew
    assert again.status_code == 200 and again.json() == first.json()
    assert Event.objects.filter(source=source).count() == 1
    kept = Delivery.objects.filter(event=event).order_by("pk")
    assert [d.outcome for d in kept] == ["accepted", "replayed"]
    assert bytes(kept[0].raw_body or b"") == sample.body  # kept as received
    assert SECRET not in kept[0].verification


def gravity_forms_as_a_form() -> Sample:
    """The Gravity Forms sample as its feed's "form" format sends it (urlencoded)."""
    entry = json.loads(SAMPLES["gravityforms"].body)
    fields = {k: v for k, v in entry.items() if isinstance(v, str)}
    return Sample(
        "gravityforms",
        urlencode(fields).encode(),
        "application/x-www-form-urlencoded",
        SAMPLES["gravityforms"].expected,
    )


def html_as(content_type: str) -> Sample:
    """The html sample as a website's form sends it another way: JSON from fetch(),
    or multipart (a form with `enctype="multipart/form-data"`, a file input)."""
    fields = dict(parse_qsl(SAMPLES["html"].body.decode(), keep_blank_values=True))
    if content_type == "application/json":
        body = json.dumps(fields).encode()
    else:
        body = (
            b"".join(
                b'--b\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
                % (name.encode(), value.encode())
                for name, value in fields.items()
            )
            + b"--b--\r\n"
        )
        content_type = "multipart/form-data; boundary=b"
    return Sample("html", body, content_type, SAMPLES["html"].expected)


def jotform_as_a_form() -> Sample:
    """The Jotform sample's fields urlencoded instead of multipart."""
    sample = SAMPLES["jotform"]
    return Sample(
        "jotform",
        urlencode(multipart_parts(sample.body, sample.content_type)).encode(),
        "application/x-www-form-urlencoded",
        sample.expected,
    )


@pytest.mark.parametrize(
    "sample",
    [
        pytest.param(gravity_forms_as_a_form(), id="gravityforms-form-format"),
        pytest.param(html_as("application/json"), id="html-fetch-json"),
        pytest.param(html_as("multipart/form-data"), id="html-multipart"),
        pytest.param(jotform_as_a_form(), id="jotform-urlencoded"),
    ],
)
def test_a_sender_in_another_format_than_its_usual_one_is_read_not_refused(sample):
    """Read as its Content-Type says: a verified delivery is not refused for its format
    (a 400 would lose it: Gravity Forms and Jotform never send a refused one again)."""
    source, path = hook_source(sample.profile)
    response = deliver(Client(), path, sample)
    assert response.status_code == 200, response.content
    payload = Event.objects.get(source=source).payload or {}
    name, email, message = sample.expected
    assert (payload["contact"]["name"], payload["contact"]["email"]) == (name, email)
    assert payload.get("message", "") == message


@pytest.mark.parametrize("profile", sorted(p for p, s in SAMPLES.items() if s.sign))
def test_a_wrong_signature_gets_401_and_no_event(profile):
    source, path = hook_source(profile)
    response = deliver(Client(), path, SAMPLES[profile], secret="not-the-secret-at-all")
    assert response.status_code == 401
    assert not Event.objects.filter(source=source).exists()
    refused = Delivery.objects.get(source=source)
    assert (refused.outcome, refused.raw_body, refused.fingerprint) == ("unauthorized", None, "")


@pytest.mark.parametrize("profile", sorted(p for p, s in SAMPLES.items() if s.signs_timestamp))
def test_a_signature_ten_minutes_old_gets_401(profile):
    source, path = hook_source(profile)
    response = deliver(Client(), path, SAMPLES[profile], age=600)
    assert response.status_code == 401
    assert not Event.objects.filter(source=source).exists()


@pytest.mark.parametrize("profile", sorted(p for p, s in SAMPLES.items() if not s.sign))
def test_a_wrong_or_missing_token_gets_401(profile):
    source, path = hook_source(profile)
    wrong = path.rstrip("/").rsplit("/", 1)[0] + "/not-the-token/"
    assert deliver(Client(), wrong, SAMPLES[profile]).status_code == 401
    assert deliver(Client(), f"/hooks/{source.name}/", SAMPLES[profile]).status_code == 401
    assert not Event.objects.filter(source=source).exists()


def test_rotation_both_secrets_verify_until_the_old_one_is_removed():
    from idempotency_core.intake.sources import source_secret_add, source_secret_remove

    sample = SAMPLES["generic"]
    source, path = hook_source("generic")
    source_secret_add(source=source, secret="the-new-secret-2026-long-enough-for-hmac-sha256")
    client = Client()
    assert deliver(client, path, sample).status_code == 200
    assert (
        deliver(
            client, path, sample, secret="the-new-secret-2026-long-enough-for-hmac-sha256"
        ).status_code
        == 200
    )
    source_secret_remove(source=source, prefix=SECRET[:6])
    assert deliver(client, path, sample).status_code == 401
    assert (
        deliver(
            client, path, sample, secret="the-new-secret-2026-long-enough-for-hmac-sha256"
        ).status_code
        == 200
    )


def test_a_disabled_source_answers_503_with_retry_after_and_keeps_nothing():
    source, path = hook_source("typeform")
    Source.objects.filter(pk=source.pk).update(is_active=False)
    response = deliver(Client(), path, SAMPLES["typeform"])
    assert response.status_code == 503 and int(response["Retry-After"]) > 0
    assert not Event.objects.exists()


def test_no_hook_for_an_api_source_or_an_unknown_one():
    # The very answer to a wrong credential (test_hook_abuse.py compares
    # them byte for byte), never a 404 that would tell which sources exist.
    source_get_or_create(name="api-only")
    for path in ("/hooks/api-only/", "/hooks/nobody/"):
        response = Client().post(path, b"{}", content_type="application/json")
        assert response.status_code == 401 and response.json()["code"] == "unauthorized"
    assert not Delivery.objects.exists()


def test_malformed_bodies_get_400():
    _, path = hook_source("generic")
    for body in (b"{not json", b'{"a": NaN}', b"a=1"):
        sample = Sample(
            "generic", body, "application/json", ("", "", ""), sign=SAMPLES["generic"].sign
        )
        response = deliver(Client(), path, sample, **{"Idempotency-Key": "k-1"})
        assert response.status_code == 400, body
    assert not Event.objects.exists()


@pytest.mark.parametrize(
    "body",
    [
        b'{"form": "x"}',
        b'{"form":"x","contact":{"name":"A","email":"nope"}}',
        # JSON that parses but is no object: a batch of events, an empty list.
        b'[{"objectId": 1}, {"objectId": 2}]',
        b"[]",
    ],
)
def test_a_verified_body_that_parses_but_does_not_map_is_kept_not_refused(body):
    """test_unreadable.py follows such a delivery to its case and its fix."""
    source, path = hook_source("generic")
    sample = Sample("generic", body, "application/json", ("", "", ""), sign=SAMPLES["generic"].sign)
    response = deliver(Client(), path, sample, **{"Idempotency-Key": "k-1"})
    assert response.status_code == 202, response.content
    event = Event.objects.get(source=source)
    assert event.key == "generic:-:k-1"  # the sender's own key, as a readable one's
    assert response.json() == {"event_id": str(event.pk), "status": "needs_review"}
    assert not event.operations.exists()


def test_a_browser_posting_the_html_form_lands_on_the_thank_you_page():
    _, path = hook_source("html", thank_you_url="https://www.example.com/thanks/")
    response = deliver(Client(), path, SAMPLES["html"], Accept="text/html,application/xhtml+xml")
    assert response.status_code == 303
    assert response["Location"] == "https://www.example.com/thanks/"
    assert Event.objects.count() == 1


def test_the_honeypot_keeps_nothing():
    _, path = hook_source("html")
    body = SAMPLES["html"].body.replace(b"website=", b"website=http%3A%2F%2Fspam.example")
    sample = Sample("html", body, "application/x-www-form-urlencoded", ("", "", ""))
    assert deliver(Client(), path, sample).status_code == 200
    assert not Event.objects.exists()
    assert Delivery.objects.get().outcome == "honeypot"


def test_a_sender_without_an_id_is_keyed_by_its_content():
    sample = SAMPLES["cf7"]
    source, path = hook_source("cf7")
    client = Client()
    assert deliver(client, path, sample).status_code == 200
    assert deliver(client, path, sample).status_code == 200
    other = json.loads(sample.body)
    other["your-message"] = "A second, different enquiry."
    changed = Sample("cf7", json.dumps(other).encode(), sample.content_type, ("", "", ""))
    assert deliver(client, path, changed).status_code == 200
    keys = sorted(Event.objects.filter(source=source).values_list("key", flat=True))
    assert len(keys) == 2 and all(k.startswith("fp:") for k in keys)


def test_the_hook_token_is_not_kept_in_the_raw_delivery():
    _, path = hook_source("jotform")
    token = path.rstrip("/").rsplit("/", 1)[1]
    sample = SAMPLES["jotform"]
    body = sample.body.replace(b"EXAMPLE-TOKEN-not-real", token.encode())
    assert (
        deliver(
            Client(), path, Sample("jotform", body, sample.content_type, sample.expected)
        ).status_code
        == 200
    )
    kept = bytes(Delivery.objects.get().raw_body or b"")
    assert token.encode() not in kept and b"[token]" in kept


def test_a_refused_token_path_is_logged_without_the_token(caplog):
    from idempotency_core.platform.logfilters import RedactSecrets

    _, path = hook_source("jotform")
    token = path.rstrip("/").rsplit("/", 1)[1]
    wrong = f"/hooks/jotform-site/t/{token}x/"
    with caplog.at_level("WARNING", logger="django.request"):
        caplog.handler.addFilter(RedactSecrets())
        Client().post(wrong, b"{}", content_type="application/json")
    assert "/hooks/jotform-site/t/[token]/" in caplog.text
    assert token not in caplog.text


def test_the_html_profile_serves_its_form_script():
    _, path = hook_source("html")
    response = Client().get(f"{path}form.js")
    assert response.status_code == 200
    assert "submission_id" in response.content.decode()
