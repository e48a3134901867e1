"""Small helpers that read settings from the environment and fail loudly on bad values."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below its minimum of {minimum}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below its minimum of {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_origins(name: str) -> list[str]:
    """A comma list of origins as Django's CSRF_TRUSTED_ORIGINS needs them: each with
    its scheme (`https://onefold.example.com`), which Django would otherwise only
    report as a system check error after the process has started."""
    origins = env_list(name, [])
    for origin in origins:
        scheme, sep, host = origin.partition("://")
        if not sep or scheme not in {"http", "https"} or not host or "/" in host:
            raise ImproperlyConfigured(
                f"{name}: {origin!r} is not an origin (scheme and host, e.g. https://example.com)"
            )
    return origins


def env_header_pair(name: str) -> tuple[str, str] | None:
    """`HEADER,value` as Django's SECURE_PROXY_SSL_HEADER tuple.

    The header may be written as the proxy sends it (`X-Forwarded-Proto,https`) or as
    Django's request.META key (`HTTP_X_FORWARDED_PROTO,https`); both name the same one.
    """
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    parts = [part.strip() for part in raw.split(",")]
    if len(parts) != 2 or not all(parts):
        raise ImproperlyConfigured(
            f"{name}={raw!r} must be HEADER,value (e.g. X-Forwarded-Proto,https)"
        )
    header, value = parts
    meta_key = header.upper().replace("-", "_")
    if not all(ch.isalnum() or ch == "_" for ch in meta_key):
        raise ImproperlyConfigured(f"{name}: {header!r} is not a header name")
    if not meta_key.startswith("HTTP_"):
        meta_key = f"HTTP_{meta_key}"
    return meta_key, value


def database_url_of(db: Mapping[str, Any]) -> str:
    """A DATABASES entry as the DATABASE_URL that names it, for a child process
    (a worker cluster) that must use the same database."""
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT") or 5432
    return f"postgres://{db.get('USER') or 'postgres'}{password}@{host}:{port}/{db['NAME']}"
