"""System checks refuse django-q2 timings under which a task could run twice unseen,
and the public development SECRET_KEY on a server that answers beyond loopback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.test import override_settings

from idempotency_core.checks import check_secret_key, check_task_queue_timings


def ids(**q_overrides) -> set[str]:
    q = {**settings.Q_CLUSTER, **q_overrides}
    with override_settings(Q_CLUSTER=q):
        return {error.id for error in check_task_queue_timings()}


def test_the_shipped_settings_pass():
    assert not {i for i in ids() if i.startswith("onefold.E")}


def test_a_retry_shorter_than_a_queued_task_can_wait_is_refused():
    assert "onefold.E002" in ids(timeout=30, retry=60, workers=2, queue_limit=2)
    assert "onefold.E002" not in ids(timeout=30, retry=100, workers=2, queue_limit=2)


def test_bulk_and_queue_limit_are_checked():
    assert "onefold.E003" in ids(bulk=5)
    assert "onefold.E004" in ids(workers=2, queue_limit=8, retry=10_000)


def test_a_lease_shorter_than_the_task_timeout_is_refused():
    with override_settings(ONEFOLD_LEASE_SECONDS=3):
        assert "onefold.E005" in {e.id for e in check_task_queue_timings()}


def test_a_destination_timeout_longer_than_the_task_is_refused():
    with override_settings(ONEFOLD_HTTP_TIMEOUT_SECONDS=100):
        assert "onefold.E006" in {e.id for e in check_task_queue_timings()}


def test_a_cache_url_that_is_not_redis_is_refused_at_start():
    env = {**os.environ, "CACHE_URL": "memcached://x:1"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "CACHE_URL must be a redis:// URL" in result.stderr


def secret_key_ids(*, hosts: list[str], key: str | None = None, debug: bool = False) -> set[str]:
    with override_settings(
        ALLOWED_HOSTS=hosts, SECRET_KEY=key or settings.INSECURE_SECRET_KEY, DEBUG=debug
    ):
        return {message.id for message in check_secret_key()}


@pytest.mark.parametrize(
    "hosts",
    [
        ["127.0.0.1", "localhost", "[::1]", "testserver"],  # the quick start's default
        ["::1", "127.0.0.2", "LOCALHOST", "app.localhost", ".localhost"],
        [],
    ],
)
def test_the_development_key_on_loopback_only_is_a_warning(hosts: list[str]) -> None:
    assert secret_key_ids(hosts=hosts) == {"onefold.W001"}


@pytest.mark.parametrize(
    "hosts",
    [
        ["onefold.example.com"],
        ["127.0.0.1", "localhost", "onefold.example.com"],
        ["*"],
        [".example.com"],
        ["10.0.0.5"],
        ["0.0.0.0"],
    ],
)
def test_the_development_key_with_any_other_host_is_an_error(hosts: list[str]) -> None:
    assert secret_key_ids(hosts=hosts) == {"onefold.E008"}


def test_a_key_of_its_own_or_debug_raises_nothing() -> None:
    assert secret_key_ids(hosts=["onefold.example.com"], key="x" * 50) == set()
    assert secret_key_ids(hosts=["onefold.example.com"], debug=True) == set()


def _check_with(env_overrides: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=settings.BASE_DIR,
        env={
            **env,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            **env_overrides,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_public_host_without_a_secret_key_refuses_to_start() -> None:
    refused = _check_with({"ALLOWED_HOSTS": "onefold.example.com"})
    assert refused.returncode != 0
    assert "onefold.E008" in refused.stderr
    assert "ERRORS" in refused.stderr


def test_the_quick_start_without_a_secret_key_only_warns() -> None:
    # `make run`: no SECRET_KEY, no ALLOWED_HOSTS, DEBUG off.
    started = _check_with({})
    assert started.returncode == 0, started.stderr
    assert "onefold.W001" in started.stderr + started.stdout
    assert "onefold.E008" not in started.stderr + started.stdout


def test_an_empty_secret_key_counts_as_none() -> None:
    refused = _check_with({"ALLOWED_HOSTS": "onefold.example.com", "SECRET_KEY": ""})
    assert "onefold.E008" in refused.stderr
