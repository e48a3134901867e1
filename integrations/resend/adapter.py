"""Confirmation email through Resend's API, with its idempotency key.

`POST /emails` carries `Idempotency-Key: <operation key>`: for 24 hours Resend
answers a repeat of the same key and payload with the first answer and sends
nothing again (https://resend.com/docs/dashboard/emails/idempotency-keys). So,
unlike SMTP, a lost answer inside that window is retried safely; outside it the
engine's review rule applies (Capabilities.key_retention). The payload is built
only from the operation's data, so a retry sends the very same body: another body
under the same key is refused (409 invalid_idempotent_request).

Resend's limits are told apart (https://resend.com/docs/api-reference/rate-limit):
a 429 `rate_limit_exceeded` is the team's per-second window (RateLimit.WINDOW,
asked again after `retry-after`); `daily_quota_exceeded` and
`monthly_quota_exceeded` mean no email goes out for a while (RateLimit.DAILY:
the engine parks the destination's work until the reset).

The API key travels in the Authorization header only; it never appears in an
error's text, and addresses a refusal quotes are blanked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parseaddr
from typing import Any, Unpack

import httpx
from django.conf import settings

from integrations.capabilities import Capabilities, CapabilityCheck
from integrations.env import AdapterSettings, SettingError
from integrations.http import (
    HttpAdapter,
    budget_hint,
    header_delay,
    json_object,
    status_error,
    timeout_of,
)
from integrations.limits import RateLimit, RequestBudget
from integrations.outcomes import Classification, DestinationError, Effect, http_reply
from integrations.writes import MailMessage

DEFAULT_BASE_URL = "https://api.resend.com"
# Resend keeps a key 24 hours; a deployment may only shorten what Onefold relies on.
KEY_WINDOW = timedelta(hours=24)
MAX_KEY_LENGTH = 256
_QUOTED_ADDRESS = re.compile(r"[^\s<>@()]+@[^\s<>@()]+")
# 409 concurrent_idempotent_requests: "safe to retry this request later", with no delay named.
_CONCURRENT_RETRY_SECONDS = 1.0
# The domain status that sends (https://resend.com/docs/dashboard/domains/manage-domains).
_VERIFIED = "verified"
_DOMAINS_PAGE = "https://resend.com/domains"
# What verify() cannot observe without sending an email.
_CONTRACT = "the 24 h key window is Resend's documented contract, not observable"
# The quotas' 429s, and what each means (https://resend.com/docs/api-reference/rate-limit).
_QUOTAS = {
    "daily_quota_exceeded": "Resend's daily email quota is spent; it resets at midnight UTC",
    "monthly_quota_exceeded": (
        "Resend's monthly email quota is spent: nothing is sent until the plan is upgraded "
        "or the quota resets, which Resend does not date; asked again at the next UTC midnight"
    ),
}


def adapter_from_env(
    *, base_url: str | None, timeout: float, env: Mapping[str, str]
) -> ResendSender:
    """RESEND_API_KEY (required), RESEND_BASE_URL, RESEND_FROM (else Django's
    DEFAULT_FROM_EMAIL), RESEND_KEY_RETENTION_SECONDS (only shortens the 24 h)."""
    read = AdapterSettings(env, base_url=base_url, url_variable="RESEND_BASE_URL")
    if read.missing(["RESEND_API_KEY"]):
        raise DestinationError("RESEND_API_KEY is not set", classification=Classification.PERMANENT)
    window = KEY_WINDOW.total_seconds()
    try:
        seconds = read.seconds("RESEND_KEY_RETENTION_SECONDS", window)
    except SettingError as exc:
        raise DestinationError(str(exc), classification=Classification.PERMANENT) from None
    return ResendSender(
        read.url("RESEND_BASE_URL", DEFAULT_BASE_URL),
        api_key=read.get("RESEND_API_KEY"),
        sender=read.get("RESEND_FROM", settings.DEFAULT_FROM_EMAIL),
        timeout=timeout,
        key_retention=timedelta(seconds=min(window, max(0.0, seconds))),
    )


class ResendSender(HttpAdapter):
    """`EmailAdapter` for Resend: one message per operation key within 24 hours."""

    # Per team, across all its keys, raised per team on request; every answer says the
    # team's own figure in `ratelimit-limit`, which the engine learns. 2 is what Resend
    # announced for every team (https://resend.com/changelog/api-rate-limit) and what the
    # rate-limit page said then; later versions of the page say 5, then 10. The lowest
    # documented figure: a team that still has 2 is never pushed into 429s.
    request_budget: RequestBudget | None = RequestBudget(
        requests=2,
        per_seconds=1,
        source="https://resend.com/docs/api-reference/rate-limit",
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
        """What can be asked of Resend before sending, in one GET /domains: that the API
        key is accepted, and that the sender's domain is verified (Resend refuses every
        send from any other with 403 validation_error, so each send would become a case).

        A sending-only key cannot read domains: Resend answers 401 restricted_api_key
        (https://resend.com/docs/api-reference/errors). That still proves the key, and
        the check says plainly that the domain was not read. The 24-hour key window
        cannot be observed without sending: it is Resend's documented contract."""
        response = self._send("GET", "/domains")
        name = str(json_object(response).get("name") or "")
        if response.status_code == 200:
            return [
                CapabilityCheck(
                    "idempotency_keys", True, f"GET /domains: API key accepted; {_CONTRACT}"
                ),
                self._sender_domain_check(response),
            ]
        if response.status_code == 401 and name == "restricted_api_key":
            how = (
                "GET /domains: 401 restricted_api_key: a sending-only key, accepted; it cannot "
                f"read domains, so sender domain {self.sender_domain or '(none)'} is not checked: "
                "if it is not verified, Resend refuses every send (403) and each becomes a "
                f"case (a full-access key lets this check read it); {_CONTRACT}"
            )
            return [CapabilityCheck("idempotency_keys", True, how)]
        if 400 <= response.status_code < 500 and response.status_code != 429:
            how = f"GET /domains: HTTP {response.status_code} {name}: the API key is refused"
            return [CapabilityCheck("idempotency_keys", False, how.replace("  ", " "))]
        raise destination_error(response)

    @property
    def sender_domain(self) -> str:
        """The domain of the From address (`RESEND_FROM`), as Resend matches it: exactly,
        subdomain included (https://resend.com/docs/knowledge-base/403-error-domain-mismatch)."""
        return parseaddr(self.sender)[1].rpartition("@")[2].strip().lower()

    def _sender_domain_check(self, response: httpx.Response) -> CapabilityCheck:
        """The sender's domain among the team's (GET /domains lists them all when no
        `limit` is given: https://resend.com/docs/api-reference/domains/list-domains)."""
        domain = self.sender_domain
        refused = f"Resend refuses every send from it (403 validation_error); see {_DOMAINS_PAGE}"
        for item in json_object(response).get("data") or []:
            if isinstance(item, dict) and str(item.get("name", "")).lower() == domain:
                status = str(item.get("status"))
                if status == _VERIFIED:
                    return CapabilityCheck(
                        "sender_domain", True, f"GET /domains: sender domain {domain} is verified"
                    )
                how = f"GET /domains: sender domain {domain} is {status}, not verified: {refused}"
                return CapabilityCheck("sender_domain", False, how)
        how = (
            f"GET /domains: sender domain {domain or '(none)'} is not one of the team's "
            f"domains: {refused}"
        )
        return CapabilityCheck("sender_domain", False, how)

    def send(self, **message: Unpack[MailMessage]) -> Effect:
        """POST /emails (https://resend.com/docs/api-reference/emails/send-email): `text`,
        and `html` and `reply_to` when given. Built from the arguments alone, which are
        the operation's stored content: a retry's body is the first one's, byte for
        byte, as Resend's idempotency key requires."""
        operation_key = message["operation_key"]
        html, reply_to = message.get("html"), message.get("reply_to")
        if not 1 <= len(operation_key) <= MAX_KEY_LENGTH:
            raise DestinationError(
                "the operation key does not fit Resend's 1-256 character idempotency key",
                classification=Classification.PERMANENT,
            )
        payload: dict[str, Any] = {
            "from": self.sender,
            "to": [message["to"].strip()],
            "subject": message["subject"],
            "text": message["body"],
            # Recognisable in the mailbox and in Resend's logs; fixed per operation.
            "headers": {"X-Onefold-Operation": operation_key},
        }
        if html is not None:
            payload["html"] = html
        if reply_to:
            payload["reply_to"] = reply_to.strip()
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
        raise destination_error(response)

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"}


def destination_error(response: httpx.Response) -> DestinationError:
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
            rate_limit=RateLimit.IN_PROGRESS,
        )
    if status == 429:
        return _limit_error(response, name, message)
    if status == 409 and name == "invalid_idempotent_request":
        # Refused like any 409; what this one means is worth saying to the reviewer.
        message += (
            " (an email with this key was already sent with other content within "
            "Resend's window; not sent again)"
        )
    return status_error(response, message)


def _limit_error(response: httpx.Response, name: str, message: str) -> DestinationError:
    """A 429, by which of Resend's limits refused it (https://resend.com/docs/api-reference/rate-limit).

    A quota is a day's allowance (RateLimit.DAILY): the daily quota "resets at midnight
    UTC — not a rolling 24-hour window"; Resend does not say when a monthly quota
    resets (a plan upgrade lifts it at once), so it is asked again at the next UTC
    midnight too. Any other 429 is the per-second window (RateLimit.WINDOW), asked
    again after `retry-after`, else `ratelimit-reset`."""
    if name in _QUOTAS:
        return DestinationError(
            f"{message} ({_QUOTAS[name]})",
            classification=Classification.RETRYABLE,
            reply=http_reply(429),
            retry_after=seconds_to_utc_midnight(),
            rate_limit=RateLimit.DAILY,
        )
    delay = header_delay(response)
    if delay is None:
        hint = budget_hint(response)
        delay = hint.reset_seconds if hint is not None else None
    return status_error(response, message, retry_after=delay)


def seconds_to_utc_midnight(now: datetime | None = None) -> float:
    """Seconds until the next 00:00 UTC, when Resend's daily quota resets."""
    now = now or datetime.now(UTC)
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (midnight - now).total_seconds()
