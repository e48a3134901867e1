"""The Resend adapter against the Resend emulator over real HTTP on loopback.

One emulator per module (port 0), reset before each test. What is counted is
what the emulator stored as sent: the messages, by idempotency key.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from integrations.base import Classification, DestinationError, EmailAdapter
from integrations.resend.adapter import ResendSender, adapter_from_env
from lab.emulators.resend import ResendEmulator

API_KEY = "re_test_0123456789"


@pytest.fixture(scope="module")
def emulator() -> Iterator[ResendEmulator]:
    with ResendEmulator() as server:
        yield server


@pytest.fixture
def control(emulator: ResendEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=emulator.http_url, timeout=30) as http:
        assert http.post("/_sandbox/reset").status_code == 200
        assert http.post("/_sandbox/config", json={"api_key": API_KEY}).status_code == 200
        yield http


@pytest.fixture
def sender(emulator: ResendEmulator, control: httpx.Client) -> ResendSender:
    return ResendSender(
        emulator.http_url, api_key=API_KEY, sender="enquiries@onefold.example", timeout=5
    )


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


def test_a_rate_limit_is_retryable_after_resends_retry_after(sender: ResendSender, control) -> None:
    fault(control, "http_429", seconds=3)
    raw = httpx.post(
        f"{sender.base_url}/emails",
        json={"from": "a@onefold.example", "to": "b@example.com", "subject": "s", "text": "t"},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert raw.status_code == 429
    assert raw.json()["name"] == "rate_limit_exceeded"
    assert raw.headers["retry-after"] == "3"
    assert raw.headers["ratelimit-remaining"] == "0"
    fault(control, "http_429", seconds=2)
    with pytest.raises(DestinationError) as limited:
        confirm(sender)
    assert limited.value.classification == Classification.RETRYABLE
    assert limited.value.retry_after == 2
    assert messages(control) == []


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
    assert "onefold.example domain is not verified" in unverified.value.message
    assert "ada@example.com" not in str(unverified.value)


def test_verify_accepts_a_full_access_key_and_reports_the_sender_domain(
    sender: ResendSender, control
) -> None:
    configure(control, domains=[{"name": "onefold.example", "status": "verified"}])
    [check] = sender.verify()
    assert (check.capability, check.verified) == ("idempotency_keys", True)
    assert "API key accepted" in check.how
    assert "onefold.example: verified" in check.how
    assert "documented contract" in check.how


def test_verify_accepts_a_sending_only_key(sender: ResendSender, control) -> None:
    configure(control, api_key_permission="sending_access")
    [check] = sender.verify()
    assert check.verified
    assert "restricted_api_key" in check.how
    confirm(sender)  # such a key can still send
    assert len(messages(control)) == 1


def test_verify_refuses_a_key_resend_does_not_accept(emulator, control) -> None:
    wrong = ResendSender(emulator.http_url, api_key="re_nope", sender="a@b.example", timeout=5)
    [check] = wrong.verify()
    assert not check.verified
    assert "403" in check.how and "invalid_api_key" in check.how
    assert "re_nope" not in check.how


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
