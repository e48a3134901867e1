"""Is this delivery from the sender? HMAC over the raw body, each provider's own way."""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# A signed time as providers write it: Unix seconds or milliseconds, ASCII digits
# (a fraction allowed). float() would also read "nan", "inf", "1e400", "1_7" and other
# scripts' digits; NaN compares false with everything, so `abs(now - nan) > tolerance`
# would call a NaN timestamp fresh for ever.
_TIMESTAMP = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,9})?")


@dataclass(frozen=True)
class SignatureRecipe:
    """How one provider signs a delivery (see each preset for its source)."""

    header: str
    # The signed message; placeholders {body}, {timestamp}, {method}, {url}.
    layout: str = "{body}"
    encoding: str = "hex"  # or "base64"
    # Written before the digest in the header, e.g. Typeform's "sha256=".
    prefix: str = ""
    # "plain": the header is the digest; "t_v1": "t=<timestamp>,v1=<digest>".
    header_format: str = "plain"
    # Where the timestamp is, when the layout signs one ("" with t_v1: inside it).
    timestamp_header: str = ""
    timestamp_unit: str = "s"  # or "ms"
    # How old (or how far in the future) a signed timestamp may be; None: unchecked.
    tolerance_seconds: int | None = 300

    @property
    def signs_timestamp(self) -> bool:
        return "{timestamp}" in self.layout


@dataclass(frozen=True)
class Verification:
    ok: bool
    # What was checked, for the delivery's record: never the signature or secret.
    detail: str


@dataclass(frozen=True)
class SignedRequest:
    body: bytes
    headers: Mapping[str, str]  # case-insensitive lookups are the caller's (Django's)
    method: str
    url: str
    now: float  # Unix seconds


def signature_verify(
    recipe: SignatureRecipe, request: SignedRequest, secrets: Sequence[str]
) -> Verification:
    """Checks the delivery's signature against each configured secret."""
    if not secrets:
        return Verification(False, "no signing secret is configured for this source")
    header = request.headers.get(recipe.header)
    if not header:
        return Verification(False, f"no {recipe.header} header")
    parsed = _parse_header(recipe, header, request.headers)
    if parsed is None:
        return Verification(False, f"the {recipe.header} header is not in the expected form")
    timestamp, presented = parsed
    if recipe.signs_timestamp:
        stale = _stale(recipe, timestamp, now=request.now)
        if stale:
            return Verification(False, stale)
    message = _message(recipe, request, timestamp)
    for number, secret in enumerate(secrets, 1):
        expected = recipe.prefix + _digest(recipe, secret, message)
        if hmac.compare_digest(expected.encode(), presented.encode()):
            return Verification(True, f"signature verified with secret {number}")
    return Verification(False, "the signature matches none of the configured secrets")


def token_verify(presented: str, *, digest: str) -> Verification:
    """A static token (in the hook's path or a header), stored as a SHA-256 digest."""
    if not presented or not digest:
        return Verification(False, "no token")
    if hmac.compare_digest(token_digest(presented), digest):
        return Verification(True, "token verified")
    return Verification(False, "the token is wrong")


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _parse_header(
    recipe: SignatureRecipe, header: str, headers: Mapping[str, str]
) -> tuple[str, str] | None:
    """(timestamp or "", the presented digest with its prefix)."""
    if recipe.header_format == "t_v1":
        parts = dict(part.strip().partition("=")[::2] for part in header.split(","))
        if not parts.get("t") or not parts.get("v1"):
            return None
        return parts["t"], recipe.prefix + parts["v1"]
    timestamp = headers.get(recipe.timestamp_header, "") if recipe.timestamp_header else ""
    if recipe.signs_timestamp and not timestamp:
        return None
    return timestamp, header.strip()


def _stale(recipe: SignatureRecipe, timestamp: str, *, now: float) -> str:
    """Why the signed timestamp is refused, or "" when it is fresh."""
    if not _TIMESTAMP.fullmatch(timestamp):
        return "the signed timestamp is not a number"
    value = float(timestamp)
    seconds = value / 1000 if recipe.timestamp_unit == "ms" else value
    if not math.isfinite(seconds):  # the pattern admits none; this guards the comparison
        return "the signed timestamp is not a number"
    if recipe.tolerance_seconds is not None and not abs(now - seconds) <= recipe.tolerance_seconds:
        return (
            f"the signed timestamp is {abs(now - seconds):.0f} s from now "
            f"(tolerance {recipe.tolerance_seconds} s)"
        )
    return ""


def _message(recipe: SignatureRecipe, request: SignedRequest, timestamp: str) -> bytes:
    # Split on {body} so the raw bytes are used as received, never re-decoded.
    before, _, after = recipe.layout.partition("{body}")
    values = {"timestamp": timestamp, "method": request.method.upper(), "url": request.url}
    return before.format(**values).encode() + request.body + after.format(**values).encode()


def _digest(recipe: SignatureRecipe, secret: str, message: bytes) -> str:
    mac = hmac.new(secret.encode(), message, hashlib.sha256).digest()
    if recipe.encoding == "base64":
        return base64.b64encode(mac).decode()
    return mac.hex()
