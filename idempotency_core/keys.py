"""Derivation of opaque keys and digests: operation keys, API keys, fingerprints."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

API_KEY_PREFIX = "ofk_"


def canonical_json(payload: Any) -> str:
    """The one serialisation fingerprints are taken over: keys sorted, no spaces."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_fingerprint(payload: Any) -> str:
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def operation_key(*, source_salt: str, event_key: str, step: str) -> str:
    """The key a destination sees for one business effect, on every retry and replay.

    Derived only from values that live as long as the event (never SECRET_KEY, a
    run id or an attempt number), and opaque: it reveals nothing of the payload.
    """
    message = f"{event_key}\x1f{step}".encode()
    digest = hmac.new(source_salt.encode(), message, hashlib.sha256).hexdigest()
    return f"opk_{digest[:48]}"


def new_source_salt() -> str:
    return secrets.token_hex(32)


def new_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def api_key_digest(key: str) -> str:
    # The key is 256 random bits, so a plain SHA-256 cannot be brute-forced and
    # lets the lookup be one indexed equality.
    return hashlib.sha256(key.encode()).hexdigest()


def contact_digest(email: str) -> str:
    """Links events of one person without indexing the address itself."""
    normalised = email.strip().lower()
    if not normalised:
        return ""
    key = f"onefold-contact:{settings.SECRET_KEY}".encode()
    return hmac.new(key, normalised.encode(), hashlib.sha256).hexdigest()


def key_expiry_cutoff(now: datetime | None = None) -> datetime:
    """Events received before this have expired keys (ONEFOLD_KEY_RETENTION_DAYS)."""
    return (now or timezone.now()) - timedelta(days=settings.ONEFOLD_KEY_RETENTION_DAYS)


def key_expired(received_at: datetime, *, now: datetime | None = None) -> bool:
    """True once an event received at `received_at` is older than the key retention."""
    return received_at < key_expiry_cutoff(now)
