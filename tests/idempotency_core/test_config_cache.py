"""A worker reads the configuration from its per-process cache, and a version applied
by another process is what it renders next (config_cache.py, the versions' NOTIFY).

Real commits (`transaction=True`): the cache is used only outside a transaction, on a
connection that persists, and a version applied "elsewhere" is committed on another
connection, as `manage.py config apply` in its own process would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from idempotency_core.config_cache import config_cache_clear
from idempotency_core.configuration.versions import config_current
from tests.factories import configured

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@pytest.fixture(autouse=True)
def _persistent_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in production (DATABASE_CONN_MAX_AGE, default 600); the suite runs with 0."""
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 600)
    config_cache_clear()


def elsewhere(action: Callable[[], Any]) -> None:
    """Runs `action` on another connection and commits it, as another process would."""

    def run() -> None:
        try:
            action()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    time.sleep(0.05)  # the NOTIFY reaches this connection just after that commit


def reads() -> int:
    with CaptureQueriesContext(connection) as captured:
        config_current()
    return sum("businessconfigversion" in q["sql"] for q in captured.captured_queries)


def test_the_configuration_is_read_once_then_served_from_the_cache() -> None:
    configured({"*": {"task": {"title": "One"}}})
    assert reads() == 1
    assert reads() == 0
    assert reads() == 0


def test_a_version_applied_elsewhere_is_the_next_one_read() -> None:
    configured({"*": {"task": {"title": "One"}}})
    assert config_current().number == 1
    elsewhere(lambda: configured({"*": {"task": {"title": "Two"}}}))
    current = config_current()
    assert current.number == 2
    assert current.document["sources"]["website"]["forms"]["*"]["task"]["title"] == "Two"
