"""The Resend adapter against the Resend emulator over real HTTP on loopback.

One emulator per module (port 0), reset before each test. What is counted is
what the emulator stored as sent: the messages, by idempotency key.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from integrations.base import Classification, DestinationError, EmailAdapter, RateLimit
from integrations.resend.adapter import (
    ResendSender,
    adapter_from_env,
    destination_error,
    seconds_to_utc_midnight,
)
from lab.emulators.resend import DEFAULT_API_KEY, DEFAULT_DOMAIN, ResendEmulator

API_KEY = DEFAULT_API_KEY
SENDER = f"enquiries@{DEFAULT_DOMAIN}"


@pytest.fixture(scope="module")
def emulator() -> Iterator[ResendEmulator]:
    with ResendEmulator() as server:
        yield server


@pytest.fixture
def control(emulator: ResendEmulator) -> Iterator[httpx.Client]:
    """The emulator's controls, reset: its default key, Resend's rate limit, the
    sender's domain verified."""
    with httpx.Client(base_url=emulator.http_url, timeout=30) as http:
        assert http.post("/_sandbox/reset").status_code == 200
        yield http


@pytest.fixture
def sender(emulator: ResendEmulator, control: httpx.Client) -> ResendSender:
    return ResendSender(emulator.http_url, api_key=API_KEY, sender=SENDER, timeout=5)


def configure(control: httpx.Client, **settings: Any) -> None:
    response = control.post("/_sandbox/config", json=settings)
    assert response.status_code == 200, response.text


def fault(control: httpx.Client, mode: str, **options: Any) -> None:
    body = {"action": "send_email", "mode": mode, **options}
    assert control.post("/_sandbox/faults", json=body).status_code == 200


def messages(control: httpx.Client) -> list[dict[str, Any]]:
    return control.get("/_sandbox/messages").json()["results"]


def confirm(sender: ResendSender, key: str = "opk_1", body: str = "Thank you.") -> Any:
    return sender.send(operation_key=key, to="ada@example.com", subject="Received", body=body)


def test_a_send_is_one_message_carrying_the_key(sender: ResendSender, control) -> None:
    assert isinstance(sender, EmailAdapter)
    effect = confirm(sender)
    sent = messages(control)
    assert [m["id"] for m in sent] == [effect.ref]
    assert sent[0]["idempotency_key"] == "opk_1"
    assert sent[0]["to"] == ["ada@example.com"]
    assert sent[0]["headers"] == {"X-Onefold-Operation": "opk_1"}
    stats = control.get("/_sandbox/stats").json()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (0, 0, 1)
    assert stats["messages_by_recipient"] == {"ada@example.com": 1}
    assert stats["messages_by_message_id"] == {"opk_1": 1}


def test_a_repeat_inside_the_window_gets_the_first_answer_and_sends_nothing(
    sender: ResendSender, control
) -> None:
    first, second = confirm(sender), confirm(sender)
    assert second.ref == first.ref
    assert len(messages(control)) == 1


def test_a_lost_answer_retried_inside_the_window_leaves_one_message(
    sender: ResendSender, control
) -> None:
    fault(control, "drop_response_after_commit")
    with pytest.raises(DestinationError) as lost:
        confirm(sender)
    assert lost.value.classification == Classification.AMBIGUOUS
    retried = confirm(sender)
    sent = messages(control)
    assert [m["id"] for m in sent] == [retried.ref]


def test_a_500_after_sending_is_ambiguous_and_the_retry_gets_the_sent_id(
    sender: ResendSender, control
) -> None:
    fault(control, "http_500_after_commit")
    with pytest.raises(DestinationError) as failed:
        confirm(sender)
    assert failed.value.classification == Classification.AMBIGUOUS
    assert failed.value.reply is not None and failed.value.reply.code == 500
    assert confirm(sender).ref == messages(control)[0]["id"]
    assert len(messages(control)) == 1


def test_a_refusal_before_sending_leaves_the_key_free(sender: ResendSender, control) -> None:
    fault(control, "fail_before_commit")
    with pytest.raises(DestinationError):
        confirm(sender)
    assert messages(control) == []
    confirm(sender)
    assert len(messages(control)) == 1


def test_outside_the_window_the_key_is_forgotten_and_a_repeat_sends_again(
    sender: ResendSender, control
) -> None:
    """Why the engine must not repeat outside the window: Resend would send twice."""
    configure(control, idempotency_window_seconds=0.3)
    first = confirm(sender)
    time.sleep(0.5)
    second = confirm(sender)
    assert second.ref != first.ref
    assert control.get("/_sandbox/stats").json()["messages_by_message_id"] == {"opk_1": 2}


def test_the_same_key_with_another_payload_is_refused_and_not_sent(
    sender: ResendSender, control
) -> None:
    confirm(sender, body="Thank you.")
    with pytest.raises(DestinationError) as refused:
        confirm(sender, body="Thanks again.")
    assert refused.value.classification == Classification.PERMANENT
    assert "invalid_idempotent_request" in refused.value.message
    assert refused.value.reply is not None and refused.value.reply.code == 409
    assert len(messages(control)) == 1


def test_the_same_key_while_the_first_is_in_flight_is_retryable(
    sender: ResendSender, control
) -> None:
    fault(control, "slow", seconds=1.0)
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(confirm(sender)))
    first.start()
    time.sleep(0.3)
    with pytest.raises(DestinationError) as concurrent:
        confirm(sender)
    first.join()
    assert concurrent.value.classification == Classification.RETRYABLE
    assert "concurrent_idempotent_requests" in concurrent.value.message
    assert concurrent.value.retry_after is not None
    # Once the first finished, the retry gets its answer.
    assert confirm(sender).ref == results[0].ref
    assert len(messages(control)) == 1


def test_resends_rate_limit_is_a_window_asked_again_after_retry_after(
    sender: ResendSender, control
) -> None:
    """Two requests a second for the team: the third, at once, is refused before
    anything is sent, a short window (never a failed attempt for the engine)."""
    confirm(sender, key="opk_1")
    confirm(sender, key="opk_2")
    with pytest.raises(DestinationError) as limited:
        confirm(sender, key="opk_3")
    assert limited.value.classification == Classification.RETRYABLE
    assert limited.value.rate_limit == RateLimit.WINDOW
    assert limited.value.retry_after == 1
    assert "rate_limit_exceeded" in limited.value.message
    assert len(messages(control)) == 2
    time.sleep(limited.value.retry_after + 0.05)
    confirm(sender, key="opk_3")
    assert len(messages(control)) == 3


def test_a_429_without_retry_after_waits_for_ratelimit_reset() -> None:
    """Resend documents both headers; an answer with only `ratelimit-reset` still
    names the wait (pure classification of one answer)."""
    request = httpx.Request("POST", "https://api.resend.com/emails")
    answer = httpx.Response(
        429,
        json={"statusCode": 429, "name": "rate_limit_exceeded", "message": "Too many requests."},
        headers={"ratelimit-limit": "2", "ratelimit-remaining": "0", "ratelimit-reset": "3"},
        request=request,
    )
    error = destination_error(answer)
    assert (error.rate_limit, error.retry_after) == (RateLimit.WINDOW, 3)


@pytest.mark.parametrize("quota", ["daily_quota", "monthly_quota"])
def test_a_spent_quota_is_a_days_limit_until_midnight_utc(
    sender: ResendSender, control, quota: str
) -> None:
    configure(control, **{quota: 1})
    confirm(sender, key="opk_1")
    with pytest.raises(DestinationError) as spent:
        confirm(sender, key="opk_2")
    error = spent.value
    assert error.classification == Classification.RETRYABLE
    assert error.rate_limit == RateLimit.DAILY
    assert error.reply is not None and error.reply.code == 429
    assert f"{quota}_exceeded" in error.message
    assert error.retry_after is not None
    assert abs(error.retry_after - seconds_to_utc_midnight()) < 5
    if quota == "daily_quota":
        assert "resets at midnight UTC" in error.message
    else:
        assert "monthly email quota is spent" in error.message
        assert "plan is upgraded" in error.message
    assert len(messages(control)) == 1


def test_seconds_to_utc_midnight() -> None:
    late = datetime(2026, 3, 1, 23, 59, 30, tzinfo=UTC)
    assert seconds_to_utc_midnight(late) == 30
    assert seconds_to_utc_midnight(datetime(2026, 3, 1, tzinfo=UTC)) == 86400


def test_a_key_over_256_characters_is_refused_before_sending(sender: ResendSender, control) -> None:
    with pytest.raises(DestinationError) as refused:
        confirm(sender, key="k" * 257)
    assert refused.value.classification == Classification.PERMANENT
    raw = httpx.post(
        f"{sender.base_url}/emails",
        json={"from": "a@onefold.example", "to": "b@example.com", "subject": "s", "text": "t"},
        headers={"Authorization": f"Bearer {API_KEY}", "Idempotency-Key": "k" * 257},
    )
    assert (raw.status_code, raw.json()["name"]) == (400, "invalid_idempotency_key")
    assert messages(control) == []


def test_a_wrong_api_key_is_permanent_and_never_quoted(emulator, control) -> None:
    wrong = ResendSender(
        emulator.http_url, api_key="re_wrong_secret_value", sender="a@onefold.example", timeout=5
    )
    with pytest.raises(DestinationError) as refused:
        confirm(wrong)
    assert refused.value.classification == Classification.PERMANENT
    assert "invalid_api_key" in refused.value.message
    assert "re_wrong_secret_value" not in str(refused.value)
    assert "re_wrong_secret_value" not in repr(wrong)


def test_a_refusal_never_quotes_the_recipients_address(sender: ResendSender, control) -> None:
    configure(control, domains=[{"name": "other.example", "status": "verified"}])
    with pytest.raises(DestinationError) as refused:
        sender.send(operation_key="opk_2", to="not-an-address", subject="s", body="b")
    assert refused.value.classification == Classification.PERMANENT
    with pytest.raises(DestinationError) as unverified:
        confirm(sender)
    assert unverified.value.reply is not None and unverified.value.reply.code == 403
    assert f"{DEFAULT_DOMAIN} domain is not verified" in unverified.value.message
    assert "ada@example.com" not in str(unverified.value)


def test_verify_accepts_the_key_and_the_verified_sender_domain(
    sender: ResendSender, control
) -> None:
    key, domain = sender.verify()
    assert (key.capability, key.verified) == ("idempotency_keys", True)
    assert "API key accepted" in key.how and "documented contract" in key.how
    assert (domain.capability, domain.verified) == ("sender_domain", True)
    assert domain.how == f"GET /domains: sender domain {DEFAULT_DOMAIN} is verified"


@pytest.mark.parametrize("status", ["pending", "not_started", "failed", "temporary_failure"])
def test_verify_refuses_a_sender_domain_that_is_not_verified_and_names_it(
    sender: ResendSender, control, status: str
) -> None:
    configure(control, domains=[{"name": DEFAULT_DOMAIN, "status": status}])
    key, domain = sender.verify()
    assert key.verified  # the key is fine; the domain is what Resend would refuse
    assert not domain.verified
    assert domain.how.startswith(
        f"GET /domains: sender domain {DEFAULT_DOMAIN} is {status}, not verified: "
        "Resend refuses every send from it (403 validation_error)"
    )
    with pytest.raises(DestinationError) as refused:  # what verify() spares every send
        confirm(sender)
    assert refused.value.reply is not None and refused.value.reply.code == 403


def test_verify_refuses_a_sender_domain_the_team_has_not_added(emulator, control) -> None:
    """Resend matches the From domain exactly, subdomain included."""
    sub = ResendSender(
        emulator.http_url,
        api_key=API_KEY,
        sender=f"Onefold <hello@mail.{DEFAULT_DOMAIN}>",
        timeout=5,
    )
    _, domain = sub.verify()
    assert not domain.verified
    assert f"sender domain mail.{DEFAULT_DOMAIN} is not one of the team's domains" in domain.how


def test_verify_with_a_sending_only_key_says_it_cannot_read_the_domain(
    sender: ResendSender, control
) -> None:
    configure(control, api_key_permission="sending_access")
    [check] = sender.verify()
    assert check.verified  # the key is accepted
    assert "401 restricted_api_key" in check.how
    assert f"cannot read domains, so sender domain {DEFAULT_DOMAIN} is not checked" in check.how
    assert "Resend refuses every send (403)" in check.how
    confirm(sender)  # such a key can still send
    assert len(messages(control)) == 1


def test_verify_refuses_a_key_resend_does_not_accept(emulator, control) -> None:
    wrong = ResendSender(emulator.http_url, api_key="re_nope", sender=SENDER, timeout=5)
    [check] = wrong.verify()
    assert not check.verified
    assert "403" in check.how and "invalid_api_key" in check.how
    assert "re_nope" not in check.how


def test_verify_under_the_rate_limit_raises_rather_than_refuses(
    sender: ResendSender, control
) -> None:
    """A 429 says nothing of the key or the domain: the check is asked again later
    (check_destinations shows it as unreachable, and the worker does not cache it)."""
    confirm(sender, key="opk_1")
    confirm(sender, key="opk_2")
    with pytest.raises(DestinationError) as limited:
        sender.verify()
    assert limited.value.rate_limit == RateLimit.WINDOW


def test_configuration_from_the_environment(emulator: ResendEmulator, settings) -> None:
    settings.DEFAULT_FROM_EMAIL = "django-default@onefold.example"
    adapter = adapter_from_env(
        base_url=None,
        timeout=5,
        env={"RESEND_API_KEY": API_KEY, "RESEND_BASE_URL": emulator.http_url},
    )
    assert adapter.base_url == emulator.http_url
    assert adapter.sender == "django-default@onefold.example"
    assert adapter.capabilities.idempotency_keys
    assert adapter.capabilities.key_retention == timedelta(hours=24)
    shorter = adapter_from_env(
        base_url="http://override.invalid",
        timeout=5,
        env={
            "RESEND_API_KEY": API_KEY,
            "RESEND_FROM": "Onefold <hello@onefold.example>",
            "RESEND_KEY_RETENTION_SECONDS": "60",
        },
    )
    assert shorter.base_url == "http://override.invalid"
    assert shorter.sender == "Onefold <hello@onefold.example>"
    assert shorter.capabilities.key_retention == timedelta(seconds=60)
    longer = adapter_from_env(
        base_url=None,
        timeout=5,
        env={"RESEND_API_KEY": API_KEY, "RESEND_KEY_RETENTION_SECONDS": "999999"},
    )
    assert longer.capabilities.key_retention == timedelta(hours=24)  # never longer than Resend's
    assert longer.base_url == "https://api.resend.com"
    with pytest.raises(DestinationError) as missing:
        adapter_from_env(base_url=None, timeout=5, env={})
    assert missing.value.classification == Classification.PERMANENT
    assert "RESEND_API_KEY" in missing.value.message


# -- what a configured confirmation adds ---------------------------------


def test_html_and_reply_to_are_sent_as_resend_documents_them(sender: ResendSender, control) -> None:
    effect = sender.send(
        operation_key="opk_html",
        to="ada@example.com",
        subject="Received",
        body="Thank you.",
        html="<p>Thank you, Ann &lt;b&gt;</p>",
        reply_to="office@example.com",
    )
    (sent,) = messages(control)
    assert sent["id"] == effect.ref
    assert (sent["text"], sent["html"]) == ("Thank you.", "<p>Thank you, Ann &lt;b&gt;</p>")
    assert sent["reply_to"] == ["office@example.com"]


def test_the_same_key_with_another_body_is_refused_409_and_sends_nothing(
    sender: ResendSender, control
) -> None:
    # What a retry would meet if it rendered a changed template again instead of sending
    # the stored content: Resend binds the key to the first payload
    # (https://resend.com/docs/dashboard/emails/idempotency-keys).
    confirm(sender, key="opk_once", body="Thank you.")
    with pytest.raises(DestinationError) as refused:
        confirm(sender, key="opk_once", body="Thank you, again.")
    assert refused.value.reply is not None and refused.value.reply.code == 409
    assert "invalid_idempotent_request" in refused.value.message
    assert refused.value.classification == Classification.PERMANENT
    assert len(messages(control)) == 1


def test_a_reply_to_that_is_no_address_is_refused_by_resend(sender: ResendSender, control) -> None:
    with pytest.raises(DestinationError) as refused:
        sender.send(
            operation_key="opk_bad", to="ada@example.com", subject="s", body="b", reply_to="nobody"
        )
    assert refused.value.reply is not None and refused.value.reply.code == 422
    assert messages(control) == []
