"""Confirmation email through Resend's API, with its idempotency key.

`POST /emails` carries `Idempotency-Key: <operation key>`: for 24 hours Resend
answers a repeat of the same key and payload with the first answer and sends
nothing again (https://resend.com/docs/dashboard/emails/idempotency-keys). So,
unlike SMTP, a lost answer inside that window is retried safely; outside it the
engine's review rule applies (Capabilities.key_retention). The payload is built
only from the operation's data, so a retry sends the very same body: another body
under the same key is refused (409 invalid_idempotent_request).

The API key travels in the Authorization header only; it never appears in an
error's text, and addresses a refusal quotes are blanked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import httpx
from django.conf import settings

from integrations.base import (
    Capabilities,
    CapabilityCheck,
    Classification,
    DestinationError,
    Effect,
    RequestBudget,
    http_reply,
)
from integrations.http import json_object, send, status_error, timeout_of

DEFAULT_BASE_URL = "https://api.resend.com"
# Resend keeps a key 24 hours; a deployment may only shorten what Onefold relies on.
KEY_WINDOW = timedelta(hours=24)
MAX_KEY_LENGTH = 256
_QUOTED_ADDRESS = re.compile(r"[^\s<>@()]+@[^\s<>@()]+")
# 409 concurrent_idempotent_requests: "safe to retry this request later", with no delay named.
_CONCURRENT_RETRY_SECONDS = 1.0


def adapter_from_env(
    *, base_url: str | None, timeout: float, env: Mapping[str, str]
) -> ResendSender:
    """RESEND_API_KEY (required), RESEND_BASE_URL, RESEND_FROM (else Django's
    DEFAULT_FROM_EMAIL), RESEND_KEY_RETENTION_SECONDS (only shortens the 24 h)."""
    api_key = env.get("RESEND_API_KEY", "")
    if not api_key:
        raise DestinationError("RESEND_API_KEY is not set", classification=Classification.PERMANENT)
    retention = KEY_WINDOW
    if env.get("RESEND_KEY_RETENTION_SECONDS"):
        try:
            seconds = float(env["RESEND_KEY_RETENTION_SECONDS"])
        except ValueError:
            raise DestinationError(
                "RESEND_KEY_RETENTION_SECONDS is not a number",
                classification=Classification.PERMANENT,
            ) from None
        retention = min(KEY_WINDOW, timedelta(seconds=max(0.0, seconds)))
    return ResendSender(
        base_url or env.get("RESEND_BASE_URL") or DEFAULT_BASE_URL,
        api_key=api_key,
        sender=env.get("RESEND_FROM") or settings.DEFAULT_FROM_EMAIL,
        timeout=timeout,
        key_retention=retention,
    )


class ResendSender:
    """`EmailAdapter` for Resend: one message per operation key within 24 hours."""

    # "The default maximum rate limit is 2 requests per second" per team, raised on request
    # (https://resend.com/docs/api-reference/introduction#rate-limit).
    request_budget: RequestBudget | None = RequestBudget(
        requests=2,
        per_seconds=1,
        source="https://resend.com/docs/api-reference/introduction#rate-limit",
    )

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str,
        sender: str,
        timeout: float,
        key_retention: timedelta = KEY_WINDOW,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.sender = sender
        self.timeout = timeout_of(timeout)
        self.capabilities = Capabilities(idempotency_keys=True, key_retention=key_retention)

    def __repr__(self) -> str:
        return f"ResendSender({self.base_url!r}, sender={self.sender!r})"

    def verify(self) -> list[CapabilityCheck]:
        """What can be asked of Resend before sending: that the API key is accepted
        (GET /domains answers a full-access key, and refuses a sending-only key with
        401 restricted_api_key, which still proves the key). The 24-hour key window
        cannot be observed without sending: it is Resend's documented contract."""
        response = self._send("GET", "/domains")
        name = json_object(response).get("name")
        contract = "the 24 h key window is Resend's documented contract, not observable"
        if response.status_code == 200:
            status = self._sender_domain_status(response)
            how = f"GET /domains: API key accepted; sender domain {status}; {contract}"
            return [CapabilityCheck("idempotency_keys", True, how)]
        if response.status_code == 401 and name == "restricted_api_key":
            how = f"GET /domains: 401 restricted_api_key, a sending-only key, accepted; {contract}"
            return [CapabilityCheck("idempotency_keys", True, how)]
        if response.status_code in (401, 403):
            how = f"GET /domains: HTTP {response.status_code} {name or ''}: the API key is refused"
            return [CapabilityCheck("idempotency_keys", False, how.replace("  ", " "))]
        raise _error(response)

    def send(self, *, operation_key: str, to: str, subject: str, body: str) -> Effect:
        if not 1 <= len(operation_key) <= MAX_KEY_LENGTH:
            raise DestinationError(
                "the operation key does not fit Resend's 1-256 character idempotency key",
                classification=Classification.PERMANENT,
            )
        payload = {
            "from": self.sender,
            "to": [to.strip()],
            "subject": subject,
            "text": body,
            # Recognisable in the mailbox and in Resend's logs; fixed per operation.
            "headers": {"X-Onefold-Operation": operation_key},
        }
        response = self._send(
            "POST", "/emails", json=payload, headers={"Idempotency-Key": operation_key}
        )
        if response.status_code == 200:
            email_id = json_object(response).get("id")
            if isinstance(email_id, str) and email_id:
                return Effect(ref=email_id, reply=http_reply(200))
            raise DestinationError(
                "Resend answered 200 without an email id",
                classification=Classification.AMBIGUOUS,
                reply=http_reply(200),
            )
        raise _error(response)

    def _sender_domain_status(self, response: httpx.Response) -> str:
        domain = self.sender.rpartition("@")[2].rstrip(">").strip().lower()
        for item in json_object(response).get("data") or []:
            if isinstance(item, dict) and str(item.get("name", "")).lower() == domain:
                return f"{domain}: {item.get('status')}"
        return f"{domain}: not listed"

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self._api_key}", **kwargs.pop("headers", {})}
        return send(method, self.base_url + path, timeout=self.timeout, headers=headers, **kwargs)


def _error(response: httpx.Response) -> DestinationError:
    """Resend's answer as the engine's vocabulary (https://resend.com/docs/api-reference/errors)."""
    status = response.status_code
    body = json_object(response)
    name = str(body.get("name") or "")
    detail = _QUOTED_ADDRESS.sub("[address]", str(body.get("message") or response.reason_phrase))
    message = f"Resend HTTP {status} {name}: {detail}".replace("  ", " ")
    if status == 409 and name == "concurrent_idempotent_requests":
        # The first request with this key is still being processed: this one did nothing.
        return DestinationError(
            message,
            classification=Classification.RETRYABLE,
            reply=http_reply(status),
            retry_after=_CONCURRENT_RETRY_SECONDS,
        )
    if status == 409 and name == "invalid_idempotent_request":
        # Refused like any 409; what this one means is worth saying to the reviewer.
        message += (
            " (an email with this key was already sent with other content within "
            "Resend's window; not sent again)"
        )
    return status_error(response, message)
