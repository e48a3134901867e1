"""Request rates: per source, and for the hooks per client address."""

from __future__ import annotations

import hashlib
import ipaddress
import time
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache

from idempotency_core.models import Source

WINDOW_SECONDS = 60


def source_rate_key(source_id: int, window: int) -> str:
    return f"rate:source:{source_id}:{window}"


def source_rate_wait(source: Source, *, clock: Callable[[], float] = time.time) -> float | None:
    """Counts one request; None when it is admitted, else seconds until the next window."""
    limit = source.rate_per_minute or settings.ONEFOLD_DEFAULT_RATE_PER_MINUTE
    return _counted_wait(lambda window: source_rate_key(source.pk, window), limit, clock())


def address_rate_wait(address: str, *, clock: Callable[[], float] = time.time) -> float | None:
    """Counts one hook request from a client address (see `address_bucket`); None
    when it is admitted, else seconds until the next window."""
    bucket = address_bucket(address)
    limit = settings.ONEFOLD_HOOK_RATE_PER_ADDRESS_PER_MINUTE
    return _counted_wait(lambda window: f"rate:address:{bucket}:{window}", limit, clock())


def address_bucket(address: str) -> str:
    """What one client is counted as: its IPv4 address, or its IPv6 /64 (one host is
    given a whole /64 and could post from a new address each time). Anything else (a
    proxy that writes a name) is counted by its digest, so the cache key stays short."""
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return "h" + hashlib.sha256(address.encode("utf-8", "replace")).hexdigest()[:32]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def _counted_wait(key_of: Callable[[int], str], limit: int, now: float) -> float | None:
    window = int(now // WINDOW_SECONDS)
    key = key_of(window)
    count = _count_one(key)
    if count <= limit:
        return None
    return (window + 1) * WINDOW_SECONDS - now


def _count_one(key: str) -> int:
    """Adds one to the window's count, opening it at 1 if no request has yet: one cache
    call a request once the window is open, instead of an `add` before every `incr`."""
    for _ in range(3):
        try:
            return cache.incr(key)
        except ValueError:  # no count yet (or evicted): open it, unless a racer just did
            # The key outlives its window a little, so it never expires while counted.
            if cache.add(key, 1, timeout=WINDOW_SECONDS + 5):
                return 1
    # Opened and evicted again between each call, three times over: a cache this short of
    # room counts nothing reliably; admit the request rather than refuse it unseen.
    return 1
