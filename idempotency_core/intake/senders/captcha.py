"""The html profile's CAPTCHA: a token the browser's widget adds, checked by the provider."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from django.conf import settings

from idempotency_core.execution.confirmations import CAPTCHA_UNCHECKED
from idempotency_core.intake.senders.mapping import text


@dataclass(frozen=True)
class CaptchaProvider:
    name: str
    label: str
    verify_url: str
    # The form field the provider's widget fills with its token.
    field: str
    docs: str


PROVIDERS: dict[str, CaptchaProvider] = {
    provider.name: provider
    for provider in (
        CaptchaProvider(
            "turnstile",
            "Cloudflare Turnstile",
            "https://challenges.cloudflare.com/turnstile/v0/siteverify",
            "cf-turnstile-response",
            "https://developers.cloudflare.com/turnstile/get-started/server-side-validation/",
        ),
        CaptchaProvider(
            "hcaptcha",
            "hCaptcha",
            "https://api.hcaptcha.com/siteverify",
            "h-captcha-response",
            "https://docs.hcaptcha.com/#verify-the-user-response-server-side",
        ),
        CaptchaProvider(
            "recaptcha",
            "Google reCAPTCHA",
            "https://www.google.com/recaptcha/api/siteverify",
            "g-recaptcha-response",
            "https://developers.google.com/recaptcha/docs/verify",
        ),
    )
}
# Every provider's token field: none of them is a field of the submission.
TOKEN_FIELDS = tuple(provider.field for provider in PROVIDERS.values())

# Error codes that say Onefold's request was wrong or the provider failed, not the
# token: the sender is not to blame. The others (missing-input-response,
# invalid-input-response, timeout-or-duplicate, hCaptcha's
# invalid-or-already-seen-response, ...) refuse the token.
_NOT_THE_SENDERS = frozenset(
    {
        "missing-input-secret",
        "invalid-input-secret",
        "bad-request",
        "internal-error",
        # hCaptcha's names for a wrong secret or site key.
        "invalid-keys",
        "sitekey-secret-mismatch",
        "not-using-dummy-secret",
    }
)

Outcome = Literal["passed", "failed", "unchecked"]


@dataclass(frozen=True)
class CaptchaVerdict:
    outcome: Outcome
    # What the check found, for the delivery's record and the sender's answer: never
    # the token or the secret.
    detail: str

    @property
    def refused(self) -> bool:
        """Turned away: a token refused or missing, or one nobody could check while
        ONEFOLD_CAPTCHA_FAILURE is "closed" (the default: an outage of the provider,
        or one provoked, must not open the form to bots). "open" keeps it and holds
        its confirmation for a person (execution/confirmations.py)."""
        if self.outcome == "unchecked":
            return bool(settings.ONEFOLD_CAPTCHA_FAILURE != "open")
        return self.outcome == "failed"


def captcha_check(
    *, provider_name: str, secret: str, document: Mapping[str, Any], client_address: str = ""
) -> CaptchaVerdict:
    """Asks the provider about the token in `document` (the parsed form).

    A network call: never inside a transaction (the hook calls it before anything is
    stored, so a slow provider holds no lock and no connection's transaction)."""
    provider = PROVIDERS[provider_name]
    token = text(document.get(provider.field))
    if not token:
        return CaptchaVerdict("failed", f"no {provider.label} token ({provider.field})")
    form = {"secret": secret, "response": token}
    if _public(client_address):
        # Optional for every provider; a private address is a proxy's, not the visitor's.
        form["remoteip"] = client_address
    try:
        answer = httpx.post(
            settings.ONEFOLD_CAPTCHA_VERIFY_URL or provider.verify_url,
            data=form,
            timeout=settings.ONEFOLD_CAPTCHA_TIMEOUT_SECONDS,
            follow_redirects=False,
        )
    except httpx.HTTPError as exc:
        return _unchecked(provider, f"no answer ({type(exc).__name__})")
    return _verdict(provider, answer)


def _verdict(provider: CaptchaProvider, answer: httpx.Response) -> CaptchaVerdict:
    if answer.status_code != 200:
        return _unchecked(provider, f"HTTP {answer.status_code}")
    try:
        body = answer.json()
    except ValueError:
        return _unchecked(provider, "an answer that is not JSON")
    if not isinstance(body, dict) or not isinstance(body.get("success"), bool):
        return _unchecked(provider, "an answer without its success field")
    codes = body.get("error-codes") or []
    codes = [str(code)[:60] for code in codes] if isinstance(codes, list) else []
    if body["success"]:
        hostname = str(body.get("hostname") or "")[:100]
        return CaptchaVerdict(
            "passed", f"{provider.label} passed" + (f" on {hostname}" if hostname else "")
        )
    if _NOT_THE_SENDERS.intersection(codes):
        return _unchecked(provider, ", ".join(codes))
    return CaptchaVerdict(
        "failed", f"{provider.label} refused the token ({', '.join(codes) or 'no reason given'})"
    )


def _unchecked(provider: CaptchaProvider, why: str) -> CaptchaVerdict:
    # The marker the confirmation rule reads back from the delivery's record.
    return CaptchaVerdict("unchecked", f"{CAPTCHA_UNCHECKED}: {provider.label} siteverify, {why}")


def _public(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_global
    except ValueError:
        return False
