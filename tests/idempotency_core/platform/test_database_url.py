"""DATABASE_URL names a PostgreSQL database, or is absent and the quick start's embedded
server is meant; any other engine stops the process before it starts
(`database_from_url`, `database_url_default`, `database_url_of` in
idempotency_core/platform/env.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from idempotency_core.platform.env import database_from_url, database_url_default, database_url_of


@pytest.mark.parametrize("url", ["sqlite:///x", "mysql://root@127.0.0.1/onefold"])
def test_manage_py_refuses_any_other_engine_naming_postgresql(url: str) -> None:
    checked = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=settings.BASE_DIR,
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode != 0
    # One line for the person who ran it, not a traceback (manage.py words it).
    assert "Traceback" not in checked.stderr
    assert "DATABASE_URL must name a PostgreSQL database" in checked.stderr
    assert f"got {url.partition(':')[0]!r}" in checked.stderr


def test_a_url_without_a_scheme_is_refused_too() -> None:
    with pytest.raises(ImproperlyConfigured, match="PostgreSQL only"):
        database_from_url("onefold.db")


def test_without_database_url_the_default_is_the_embedded_servers_socket(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    base = tmp_path / "Checkout"  # a capital letter: a path's case must survive the URL
    monkeypatch.delenv("ONEFOLD_DATA_DIR", raising=False)
    db = database_from_url(database_url_default(base))
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["HOST"], db["PORT"], db["NAME"], db["USER"], db["PASSWORD"]) == (
        str(base.resolve() / "var" / "pgdata"),
        "",
        "onefold",
        "postgres",
        "",
    )


def test_onefold_data_dir_moves_the_embedded_servers_data_and_socket(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ONEFOLD_DATA_DIR", str(tmp_path / "Data Dir"))
    host = database_from_url(database_url_default(Path("/elsewhere")))["HOST"]
    assert host == str(tmp_path / "Data Dir" / "pgdata")
    # A relative one is taken from the checkout, wherever a command runs from.
    monkeypatch.setenv("ONEFOLD_DATA_DIR", "state")
    host = database_from_url(database_url_default(tmp_path))["HOST"]
    assert host == str(tmp_path.resolve() / "state" / "pgdata")


def test_the_settings_default_is_that_of_this_checkout() -> None:
    """The settings module's own default, read in a process without DATABASE_URL."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "ONEFOLD_DATA_DIR"}}
    code = (
        "from django.conf import settings; d = settings.DATABASES['default']; "
        "print(d['ENGINE'], d['HOST'], d['NAME'], d['USER'], repr(d['PORT']))"
    )
    shown = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=settings.BASE_DIR,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    pgdata = Path(settings.BASE_DIR).resolve() / "var" / "pgdata"
    shown_last = shown.stdout.strip().splitlines()[-1]
    assert shown_last == f"config.postgresql {pgdata} onefold postgres ''"


@pytest.mark.parametrize(
    "entry",
    [
        {"HOST": "db.example.com", "PORT": 5433, "USER": "onefold", "PASSWORD": "", "NAME": "of"},
        {"HOST": "127.0.0.1", "PORT": "", "USER": "postgres", "PASSWORD": "", "NAME": "onefold"},
        {"HOST": "/srv/Onefold/var/pgdata", "PORT": "", "USER": "postgres", "NAME": "onefold"},
        {"HOST": "/run/postgresql", "PORT": 5433, "USER": "app", "NAME": "onefold"},
        {"HOST": "::1", "PORT": 5432, "USER": "app", "PASSWORD": "p@ss:w/rd%", "NAME": "x"},
    ],
    ids=["tcp-port", "tcp-default-port", "socket", "socket-port", "ipv6-password"],
)
def test_an_entry_survives_the_round_trip_through_its_url(entry: dict[str, object]) -> None:
    url = database_url_of(entry)
    back = database_from_url(url)
    expected_port = entry["PORT"] or ("" if str(entry["HOST"]).startswith("/") else 5432)
    assert (back["HOST"], back["PORT"], back["USER"], back["NAME"]) == (
        entry["HOST"],
        expected_port,
        entry["USER"],
        entry["NAME"],
    )
    assert back["PASSWORD"] == entry.get("PASSWORD", "")


def test_a_socket_directory_is_percent_encoded_in_the_host() -> None:
    entry = {"HOST": "/path/to/pgdata", "PORT": "", "USER": "postgres", "NAME": "onefold"}
    assert database_url_of(entry) == "postgres://postgres@%2Fpath%2Fto%2Fpgdata/onefold"
