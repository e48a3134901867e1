"""HTTP plumbing shared by every HTTP adapter: one client per process, one error rule.

`httpx.request()` builds a new client, connection pool and TLS context for every
call (`ssl.create_default_context` was half of a worker's CPU under load). All
adapters send through `shared_client()` instead: one pooled client per process,
rebuilt after a fork (django-q2 forks its workers from a parent that may have
used it) and never shared across processes.

`send()` turns transport failures into the engine's vocabulary, the same way
for every vendor: no connection means nothing was sent (RETRYABLE); a request
sent whose answer was lost may have been applied (AMBIGUOUS), unless it was a
read.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import httpx

from integrations.base import Classification, DestinationError

_lock = threading.Lock()
_client: httpx.Client | None = None
_client_pid: int | None = None

# Enough for a worker's threads and the console's lookups; idle sockets are cheap.
_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=30)
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def shared_client() -> httpx.Client:
    """This process's pooled client (timeouts are given per request)."""
    global _client, _client_pid
    pid = os.getpid()
    if _client is not None and _client_pid == pid:
        return _client
    with _lock:
        if _client is None or _client_pid != pid:
            # A client inherited over fork shares sockets with the parent: drop it unclosed.
            _client = httpx.Client(limits=_LIMITS, follow_redirects=False)
            _client_pid = pid
        return _client


def timeout_of(seconds: float) -> httpx.Timeout:
    """Connect failures happen before a byte is sent, so they get a shorter bound."""
    return httpx.Timeout(seconds, connect=min(seconds, 5.0))


def send(method: str, url: str, *, timeout: httpx.Timeout, **kwargs: Any) -> httpx.Response:
    """One request through the shared client, transport failures classified."""
    try:
        return shared_client().request(method, url, timeout=timeout, **kwargs)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        # No connection, so nothing was sent.
        raise DestinationError(
            f"{type(exc).__name__}: {exc}", classification=Classification.RETRYABLE
        ) from exc
    except httpx.TransportError as exc:
        # Sent, then the answer was lost (timeout, reset, closed): it may have been applied.
        raise DestinationError(
            f"{type(exc).__name__}: {exc or 'no response'}",
            classification=Classification.RETRYABLE
            if method.upper() in _SAFE_METHODS
            else Classification.AMBIGUOUS,
        ) from exc


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The answer's JSON object, or {} when it has none."""
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
