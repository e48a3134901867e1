"""HTTP plumbing shared by every HTTP adapter: one client per process, one error rule.

`httpx.request()` builds a new client, connection pool and TLS context for every
call (`ssl.create_default_context` alone is costly under load). All
adapters send through `shared_client()` instead: one pooled client per process,
rebuilt after a fork (django-q2 forks its workers from a parent that may have
used it) and never shared across processes.

What an answer means to the engine is decided here, the same way for every
vendor (docs/architecture.md, Flow step 3):

- no connection: nothing was sent, RETRYABLE (`send`);
- a request sent whose answer was lost, or a status that says neither "done" nor
  "refused" (5xx; a 3xx, since redirects are never followed): it may have been
  applied, AMBIGUOUS, unless the request was safe (a read), then RETRYABLE;
- 408, 425, 429, 503: refused before processing, RETRYABLE after the delay the
  answer names (`Retry-After`);
- any other 4xx: refused, and it would be refused again, PERMANENT.

An adapter reads its vendor's exceptions first (a 409 that names the existing
record, a 403 that is a rate limit, ...) and hands every other answer to
`status_error`, with its own wording of the message and, where the vendor names
its delay in a header of its own, that delay.
"""

from __future__ import annotations

import math
import os
import re
import threading
from contextvars import ContextVar
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import lru_cache
from typing import Any
from urllib.parse import quote

import httpx

from integrations.limits import BudgetHint, RateLimit, RequestGate
from integrations.outcomes import Classification, DestinationError, Effect, http_reply

# Set around a stretch of calls (an attempt, a test's spec check); the gate an adapter
# was built with (`Adapter.gate`) is used besides, unless both spend the same `scope`.
request_gate: ContextVar[RequestGate | None] = ContextVar("request_gate", default=None)

_lock = threading.Lock()
_client: httpx.Client | None = None
_client_pid: int | None = None

# Enough for a worker's threads and the console's lookups; idle sockets are cheap.
_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=30)
# httpx's default headers that are not sent (shared_client says why).
_UNSENT_DEFAULTS = ("Accept", "Connection")
# Requests that change nothing at the destination: asking again is harmless.
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Refused before anything was applied, and worth asking again later: 408 Request
# Timeout, 425 Too Early, 429 Too Many Requests (a rate limit), 503 Service Unavailable.
RETRY_LATER = frozenset({408, 425, 429, 503})


class _NoCookies(httpx.Cookies):
    """A jar that keeps nothing. Vendors' APIs authenticate by header; a `Set-Cookie`
    they send (a CDN's bot cookie, say) is never sent back, and reading each answer's
    headers into `http.cookiejar` costs CPU for nothing."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class _ApiClient(httpx.Client):
    """httpx's client without its cookie jar (`_NoCookies`)."""

    _no_cookies = _NoCookies()

    @property
    def cookies(self) -> httpx.Cookies:
        return self._no_cookies

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        raise TypeError("the vendors' client keeps no cookies")


def shared_client() -> httpx.Client:
    """This process's pooled client (timeouts are given per request)."""
    global _client, _client_pid
    pid = os.getpid()
    if _client is not None and _client_pid == pid:
        return _client
    with _lock:
        if _client is None or _client_pid != pid:
            # A client inherited over fork shares sockets with the parent: drop it unclosed.
            _client = _ApiClient(limits=_LIMITS, follow_redirects=False)
            # httpx's defaults that say what their absence says in HTTP/1.1 (RFC 9110
            # 12.5.1: no Accept is any type; RFC 9112 9.3: a connection persists unless
            # closed): every header of a request is normalized and validated several
            # times (httpx, httpcore, h11), a visible share of a worker's CPU.
            for name in _UNSENT_DEFAULTS:
                del _client.headers[name]
            _client_pid = pid
        return _client


def timeout_of(seconds: float) -> httpx.Timeout:
    """Connect failures happen before a byte is sent, so they get a shorter bound."""
    return httpx.Timeout(seconds, connect=min(seconds, 5.0))


def is_safe(method: str) -> bool:
    """Whether a request with this method changes nothing at the destination."""
    return method.upper() in _SAFE_METHODS


def send(
    method: str,
    url: str,
    *,
    timeout: httpx.Timeout,
    gate: RequestGate | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """One request through the shared client, transport failures classified, within
    the destination's budget: the adapter's `gate` and the one set around the call
    (`request_gate`)."""
    gates = _gates(gate)
    for each in gates:
        each.before(method, url)
    answered = False
    try:
        response = shared_client().request(method, parsed_url(url), timeout=timeout, **kwargs)
        answered = True
        for each in gates:
            each.after(response)
        return response
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        # No connection, so nothing was sent.
        raise DestinationError(
            f"{type(exc).__name__}: {exc}", classification=Classification.RETRYABLE
        ) from exc
    except httpx.TransportError as exc:
        # Sent, then the answer was lost (timeout, reset, closed): it may have been applied.
        raise DestinationError(
            f"{type(exc).__name__}: {exc or 'no response'}",
            classification=_unclear(safe=is_safe(method)),
        ) from exc
    finally:
        if not answered:
            for each in gates:
                if (failed := getattr(each, "failed", None)) is not None:
                    failed()


@lru_cache(maxsize=256)
def parsed_url(url: str) -> httpx.URL:
    """`url` parsed, once for each of the recent ones: httpx parses a URL given as text
    for each request (in pure Python, a visible share of a worker's CPU), and an
    adapter sends to the same few paths again and again. `httpx.URL` is immutable."""
    return httpx.URL(url)


def _gates(gate: RequestGate | None) -> list[RequestGate]:
    """The adapter's gate, then the one set around the call unless it spends the same."""
    around = request_gate.get()
    gates = [gate] if gate is not None else []
    if around is not None and (gate is None or getattr(around, "scope", None) != gate.scope):
        gates.append(around)
    return gates


def classify(status: int, *, safe: bool) -> Classification | None:
    """The one rule from an HTTP status to the engine's vocabulary; None: succeeded (2xx).

    `safe`: the request changes nothing at the destination (a read, a token request),
    so an answer that leaves its fate unclear is simply asked again.
    """
    if 200 <= status < 300:
        return None
    if status in RETRY_LATER:
        return Classification.RETRYABLE
    if 400 <= status < 500:
        return Classification.PERMANENT
    # 500, 502, 504, a redirect not followed: a write may have been applied.
    return _unclear(safe=safe)


def status_error(
    response: httpx.Response, message: str, *, retry_after: float | None = None
) -> DestinationError:
    """`response`, an answer its caller cannot take as success, as the engine's error.

    Classified by `classify`; a 2xx its caller could not use (no id in it, a status
    it does not expect) is unclear, like a 5xx. A refusal to be asked later carries
    `retry_after` when the vendor names its delay elsewhere (a rate-limit header of
    its own), else the answer's Retry-After.
    """
    status = response.status_code
    safe = is_safe(response.request.method)
    classification = classify(status, safe=safe) or _unclear(safe=safe)
    delay = None
    if status in RETRY_LATER:
        delay = retry_after if retry_after is not None else header_delay(response)
    return DestinationError(
        message,
        classification=classification,
        reply=http_reply(status),
        retry_after=delay,
        rate_limit=RateLimit.WINDOW if status == 429 else RateLimit.NONE,
    )


_SFORCE_USAGE = re.compile(r"api-usage=(\d+)/(\d+)")


def budget_hint(response: httpx.Response) -> BudgetHint | None:
    """What the answer's rate-limit headers say, in one shape for every vendor; None
    when it has none. Read: HubSpot's `X-HubSpot-RateLimit-Max/-Remaining/-Interval-
    Milliseconds` and `-Daily/-Daily-Remaining` (developers.hubspot.com/docs/api/
    usage-details), the IETF draft's `ratelimit-limit/-remaining/-reset` (Resend:
    resend.com/docs/api-reference/introduction#rate-limit), Pipedrive's
    `x-ratelimit-limit/-remaining/-reset` (pipedrive.readme.io/docs/core-api-concepts-
    rate-limiting) and Salesforce's `Sforce-Limit-Info: api-usage=N/M` (the day's
    requests: developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/
    headers_api_usage.htm)."""
    headers = response.headers
    interval = _number(headers.get("X-HubSpot-RateLimit-Interval-Milliseconds"))
    if headers.get("X-HubSpot-RateLimit-Max") is not None:
        return BudgetHint(
            limit=_whole(headers.get("X-HubSpot-RateLimit-Max")),
            remaining=_whole(headers.get("X-HubSpot-RateLimit-Remaining")),
            window_seconds=interval / 1000 if interval else None,
        )
    if headers.get("X-HubSpot-RateLimit-Daily") is not None:
        return BudgetHint(
            limit=_whole(headers.get("X-HubSpot-RateLimit-Daily")),
            remaining=_whole(headers.get("X-HubSpot-RateLimit-Daily-Remaining")),
            daily=True,
        )
    for prefix in ("ratelimit-", "x-ratelimit-"):
        if headers.get(prefix + "limit") is not None:
            return BudgetHint(
                limit=_whole(headers.get(prefix + "limit")),
                remaining=_whole(headers.get(prefix + "remaining")),
                reset_seconds=_number(headers.get(prefix + "reset")),
            )
    usage = _SFORCE_USAGE.search(headers.get("Sforce-Limit-Info", ""))
    if usage:
        used, limit = int(usage.group(1)), int(usage.group(2))
        return BudgetHint(limit=limit, remaining=max(0, limit - used), daily=True)
    return None


def _whole(value: str | None) -> int | None:
    number = _number(value)
    return int(number) if number is not None else None


def _number(value: str | None) -> float | None:
    """A header's non-negative finite number, else None (a header is no promise)."""
    try:
        number = float((value or "").strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


def header_delay(response: httpx.Response) -> float | None:
    """The answer's Retry-After, in seconds."""
    return parse_retry_after(response.headers.get("Retry-After"))


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After value: delay-seconds or an HTTP date (RFC 9110,
    10.2.3); a date in the past is 0, and anything else None (the engine's backoff)."""
    if not value or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if when.tzinfo is None:
        # "-0000" parses without a zone; an HTTP date is always in GMT.
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The answer's JSON object, or {} when it has none."""
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def named_effect(response: httpx.Response, asked: str) -> Effect:
    """A successful answer's effect: the object its `id` names, else the one `asked` about
    (an update's record, a merge's survivor)."""
    return Effect(
        ref=str(json_object(response).get("id", asked)), reply=http_reply(response.status_code)
    )


def _unclear(*, safe: bool) -> Classification:
    """A request whose fate is unknown: a write may have been applied; a read may not matter."""
    return Classification.RETRYABLE if safe else Classification.AMBIGUOUS


class HttpAdapter:
    """What every HTTP adapter shares: it sends to `base_url` within `timeout`, through
    the gate the core sets to the destination's budget, with its credentials' headers
    (`_auth`) under those the call names."""

    # Set by the core to the destination's budget (integrations.http.send).
    gate: RequestGate | None = None
    base_url: str
    timeout: httpx.Timeout

    def _auth(self) -> dict[str, str]:
        """The headers every request carries (none by default)."""
        return {}

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**self._auth(), **(kwargs.pop("headers", None) or {})}
        return send(
            method,
            self.base_url + path,
            timeout=self.timeout,
            gate=self.gate,
            headers=headers,
            **kwargs,
        )


def path_segment(value: str, refused: str) -> str:
    """`value` as one path segment: every `/`, `?`, `#` and `%` encoded, so that a typed
    reference like ../../_sandbox/stats stays where it was put. Dot segments are refused
    (PERMANENT, "`value` `refused`"): encoding leaves dots alone, and clients resolve
    `..` before sending."""
    if value in ("", ".", ".."):
        raise DestinationError(f"{value!r} {refused}", classification=Classification.PERMANENT)
    return quote(value, safe="")
