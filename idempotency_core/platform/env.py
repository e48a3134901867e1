"""Small helpers that read settings from the environment and fail loudly on bad values."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit

import dj_database_url
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
    return _env_number(name, default, int, "an integer", minimum)


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    return _env_number(name, default, float, "a number", minimum)


_Number = TypeVar("_Number", int, float)


def _env_number(
    name: str, default: _Number, parse: type[_Number], kind: str, minimum: _Number | None
) -> _Number:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not {kind}") from None
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


# What DATABASE_URL may name: Onefold runs on PostgreSQL only (docs/architecture.md), so that the
# engine a newcomer's quick start meets is the one the tests prove.
_POSTGRESQL_SCHEMES = {"postgres", "postgresql", "pgsql"}
# The embedded server of the quick start (`make run`): its data directory under
# ONEFOLD_DATA_DIR, its Unix socket in that directory, its superuser without a password.
EMBEDDED_DATABASE_NAME = "onefold"
EMBEDDED_DATABASE_USER = "postgres"


def embedded_database_dir(base_dir: Path) -> Path:
    """The embedded PostgreSQL server's data directory, which also holds its socket
    (`.s.PGSQL.5432`): `$ONEFOLD_DATA_DIR/pgdata`, the data directory defaulting to
    `var/` of the checkout (a relative one is taken from there too, not from wherever
    a command happens to run)."""
    data_dir = base_dir / Path(os.environ.get("ONEFOLD_DATA_DIR") or "var").expanduser()
    return (data_dir / "pgdata").resolve()


def database_url_default(base_dir: Path) -> str:
    """The DATABASE_URL of the embedded server, when none is set."""
    return database_url_of(
        {
            "NAME": EMBEDDED_DATABASE_NAME,
            "USER": EMBEDDED_DATABASE_USER,
            "HOST": str(embedded_database_dir(base_dir)),
            "PORT": "",
        }
    )


def database_from_url(url: str, **options: Any) -> dict[str, Any]:
    """DATABASE_URL as a DATABASES entry (dj_database_url, with `options`), refused
    unless it names PostgreSQL.

    A Unix-socket directory travels percent-encoded in the host part
    (`postgres://postgres@%2Fsrv%2Fpgdata/onefold`, as libpq reads it too);
    dj_database_url lowercases every host, which would change such a path, so the
    directory is decoded here from the URL as written."""
    scheme = urlsplit(url).scheme
    if scheme not in _POSTGRESQL_SCHEMES:
        raise ImproperlyConfigured(
            "DATABASE_URL must name a PostgreSQL database (postgres://...); Onefold runs "
            f"on PostgreSQL only, got {scheme or url!r}"
        )
    db: dict[str, Any] = dict(dj_database_url.parse(url, **options))
    host = urlsplit(url).netloc.rpartition("@")[2]
    if host[:3].upper() == "%2F":
        db["HOST"] = unquote(host.partition(":")[0])
    return db


def database_url_of(db: Mapping[str, Any]) -> str:
    """A DATABASES entry as the DATABASE_URL that names it (`database_from_url` reads it
    back the same), for a child process (a worker cluster) that must use the same
    database. A socket directory's slashes are percent-encoded: the host part of a URL
    cannot hold them."""
    user = quote(db.get("USER") or "postgres", safe="")
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT")
    if host.startswith("/"):  # the socket's name holds the port: kept only when set
        netloc = quote(host, safe="") + (f":{port}" if port else "")
    else:
        netloc = f"[{host}]" if ":" in host else host  # an IPv6 address, bracketed
        netloc += f":{port or 5432}"
    return f"postgres://{user}{password}@{netloc}/{quote(db['NAME'], safe='')}"
