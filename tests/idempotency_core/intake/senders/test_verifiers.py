"""Signature verifiers against vectors computed independently of the code under test.

Where a provider publishes none, the vector is the one written in the provider's
note (tests/fixtures/senders/providers/README.md, "computed locally" from
the provider's recipe), or computed here with `hmac` from the recipe as the note
states it. Each verifier also meets a wrong secret, a changed byte and, where a
timestamp is signed, a stale one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import replace

import pytest

from idempotency_core.intake.senders.profiles import PRESETS
from idempotency_core.intake.senders.verifying import (
    SignedRequest,
    signature_verify,
    token_digest,
    token_verify,
)

NOW = 1_700_000_100.0


def request(
    body: bytes, headers: dict[str, str], *, now: float = NOW, url: str = ""
) -> SignedRequest:
    return SignedRequest(body=body, headers=headers, method="POST", url=url, now=now)


# -- the providers' own vectors ------------------------------------------------------


def test_typeform_vector_from_its_note():
    body = b'{"event_id":"LtWXD3crgy"}'
    headers = {"Typeform-Signature": "sha256=Qkfdg83F5dsWiBYuvUV4DoiNniplyy+4aSKbz76fwD8="}
    recipe = PRESETS["typeform"].signature
    assert recipe is not None
    assert signature_verify(recipe, request(body, headers), ["test-secret"]).ok
    assert not signature_verify(recipe, request(body, headers), ["other-secret"]).ok
    assert not signature_verify(recipe, request(body + b" ", headers), ["test-secret"]).ok


def test_formspree_vector_from_its_note():
    body = b'{"form":"x"}'
    header = "t=1700000000,v1=c623fdbad2f99bda6e3e50cc608a923aebe08fc5c935e153e919b2698b779651"
    recipe = PRESETS["formspree"].signature
    assert recipe is not None
    ok = signature_verify(recipe, request(body, {"Formspree-Signature": header}), ["test-secret"])
    assert ok.ok
    stale = signature_verify(
        recipe,
        request(body, {"Formspree-Signature": header}, now=1_700_000_000 + 600),
        ["test-secret"],
    )
    assert not stale.ok and "tolerance" in stale.detail


def test_hubspot_v3_vector_from_its_note():
    body = (
        b'[{"eventId":1,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600000,'
        b'"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123,'
        b'"changeSource":"CRM","changeFlag":"NEW","appId":54321}]'
    )
    headers = {
        "X-HubSpot-Signature-v3": "+r3cQe2xhAmobOAMhJIrVNtvq0R4VE7rXpN8HitwqVo=",
        "X-HubSpot-Request-Timestamp": "1564113600500",
    }
    recipe = replace(PRESETS["hubspot"].signature, tolerance_seconds=None)  # a 2019 vector
    secret = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy"
    url = "https://www.example.com/webhook_uri"
    assert signature_verify(recipe, request(body, headers, url=url), [secret]).ok
    assert not signature_verify(recipe, request(body, headers, url=url + "x"), [secret]).ok
    fresh = PRESETS["hubspot"].signature
    assert fresh is not None
    stale = signature_verify(fresh, request(body, headers, url=url, now=NOW), [secret])
    assert not stale.ok and "tolerance" in stale.detail


# -- recipes as written, computed here ----------------------------------------------------


def hex_hmac(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def test_webflow_signs_millisecond_timestamp_colon_body():
    body = b'{"triggerType":"form_submission","payload":{"id":"6321ca84df3949bfc6752327"}}'
    ts = str(int(NOW * 1000))
    headers = {
        "x-webflow-timestamp": ts,
        "x-webflow-signature": hex_hmac("wf", f"{ts}:".encode() + body),
    }
    recipe = PRESETS["webflow"].signature
    assert recipe is not None
    assert signature_verify(recipe, request(body, headers), ["wf"]).ok
    old = str(int((NOW - 600) * 1000))
    stale = {
        "x-webflow-timestamp": old,
        "x-webflow-signature": hex_hmac("wf", f"{old}:".encode() + body),
    }
    assert not signature_verify(recipe, request(body, stale), ["wf"]).ok


def test_tally_signs_the_body_in_base64():
    body = b'{"eventId":"e1","data":{"responseId":"r1"}}'
    digest = base64.b64encode(hmac.new(b"tally-secret", body, hashlib.sha256).digest()).decode()
    recipe = PRESETS["tally"].signature
    assert recipe is not None
    assert signature_verify(recipe, request(body, {"Tally-Signature": digest}), ["tally-secret"]).ok
    assert not signature_verify(recipe, request(body, {"Tally-Signature": digest}), ["x" * 12]).ok


@pytest.mark.parametrize("profile", ["generic", "googleforms"])
def test_onefold_signature_is_t_and_v1_over_timestamp_dot_body(profile):
    body = b'{"form":"contact"}'
    t = str(int(NOW))
    header = f"t={t},v1={hex_hmac('gen-secret', f'{t}.'.encode() + body)}"
    recipe = PRESETS[profile].signature
    assert recipe is not None
    assert signature_verify(recipe, request(body, {"Onefold-Signature": header}), ["gen-secret"]).ok
    ten_minutes_later = request(body, {"Onefold-Signature": header}, now=NOW + 600)
    assert not signature_verify(recipe, ten_minutes_later, ["gen-secret"]).ok
    assert not signature_verify(recipe, request(body, {}), ["gen-secret"]).ok


def test_rotation_any_configured_secret_verifies():
    body = b'{"form":"contact"}'
    t = str(int(NOW))
    recipe = PRESETS["generic"].signature
    assert recipe is not None
    for secret in ("old-secret", "new-secret"):
        header = f"t={t},v1={hex_hmac(secret, f'{t}.'.encode() + body)}"
        both = signature_verify(
            recipe, request(body, {"Onefold-Signature": header}), ["new-secret", "old-secret"]
        )
        assert both.ok
    old_header = f"t={t},v1={hex_hmac('old-secret', f'{t}.'.encode() + body)}"
    after = signature_verify(
        recipe, request(body, {"Onefold-Signature": old_header}), ["new-secret"]
    )
    assert not after.ok


def test_a_token_is_compared_by_digest():
    digest = token_digest("path-token")
    assert token_verify("path-token", digest=digest).ok
    assert not token_verify("path-tokem", digest=digest).ok
    assert not token_verify("", digest=digest).ok
