"""System checks refuse django-q2 timings under which a task could run twice unseen."""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings
from django.test import override_settings

from idempotency_core.checks import check_task_queue_timings


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
    env = {**os.environ, "DATABASE_URL": "sqlite:///:memory:", "CACHE_URL": "memcached://x:1"}
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
