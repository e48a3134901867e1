"""A per-process cache of what every submission reads and almost nothing writes: the
source an API key names (with the key's end) and the destinations of a source's steps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections
from psycopg import pq

CHANNEL = "onefold_config"
MAX_AGE_SECONDS = 60.0
MAX_ENTRIES = 10_000

T = TypeVar("T")


class _ThreadCache(threading.local):
    """Django's connections are per thread; so is what was read on one."""

    def __init__(self) -> None:
        self.listening_on: Any = None  # the psycopg connection that LISTENs
        self.generation = 0
        self.entries: dict[Hashable, tuple[float, Any]] = {}

    def clear(self) -> None:
        self.generation += 1
        self.entries.clear()


_cache = _ThreadCache()


def config_cached(key: Hashable, read: Callable[[], T]) -> T:
    """`read()`'s value for `key`, from this thread's cache when it may be trusted (see
    docs/internals.md), else read now and kept when nothing changed meanwhile."""
    if not _usable():
        return read()
    now = time.monotonic()
    hit = _cache.entries.get(key)
    if hit is not None and now - hit[0] < MAX_AGE_SECONDS:
        value: T = hit[1]
        return value
    generation = _cache.generation
    value = read()
    # Nothing is kept for None (an unknown key: a flood of wrong keys must not churn
    # the cache), nor when a notification handled while `read()` ran may mean that it
    # read the old row.
    if value is not None and generation == _cache.generation and _usable():
        if len(_cache.entries) >= MAX_ENTRIES:
            _cache.entries.clear()
        _cache.entries[key] = (now, value)
    return value


def config_cache_clear() -> None:
    """Empties this thread's cache (a test's fresh start; notifications do it otherwise)."""
    _cache.clear()


def _usable() -> bool:
    # The connection looked up once: each `connection.<name>` is a lookup in asgiref's
    # thread-local, which raises and catches an exception (no running event loop)
    # every time.
    db = connections[DEFAULT_DB_ALIAS]
    if not db.settings_dict["CONN_MAX_AGE"] or db.in_atomic_block:
        return False
    if db.connection is None:  # else ensure_connection has nothing to do
        db.ensure_connection()
    raw = db.connection
    try:
        if raw is not _cache.listening_on:
            _listen(raw)
        _drain(raw)
    except psycopg.Error:
        # Broken (a restart, a terminated backend): closed here (no transaction is open),
        # so the next query opens a new connection, where the cache starts again.
        _cache.clear()
        _cache.listening_on = None
        db.close()
        return False
    # Everything the server sent has just been read without error. A restart, a
    # terminated backend or an idle timeout arrives as a FATAL message and the end of
    # the stream, and would have raised here: what Django's health check (SELECT 1,
    # one round trip a request) finds out. So it is skipped for this request.
    db.health_check_done = True  # type: ignore[attr-defined]  # Django 4.1+, untyped
    return True


def _listen(raw: Any) -> None:
    _cache.clear()
    _cache.listening_on = None
    raw.add_notify_handler(_on_notify)
    raw.execute(f"LISTEN {CHANNEL}")
    _cache.listening_on = raw


def _on_notify(notify: Any) -> None:
    if notify.channel == CHANNEL:
        _cache.clear()


def _drain(raw: Any) -> None:
    """Reads what has arrived on `raw` (no round trip) and handles its notifications;
    raises psycopg.Error when the connection is broken."""
    with raw.lock:
        pgconn = raw.pgconn
        pgconn.consume_input()
        if pgconn.status != pq.ConnStatus.OK:
            raise psycopg.OperationalError("the connection is no longer open")
        while (notify := pgconn.notifies()) is not None:
            if pgconn.notify_handler:
                pgconn.notify_handler(notify)
