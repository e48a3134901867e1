"""The connection's health check (config/postgresql/base.py) reads the socket: no
SELECT 1, and a backend that PostgreSQL terminated is still found unusable."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

# Committing, like every test here that commits: serialized, so that the migrations'
# seed is restored after the flush (a flush without it re-seeds with new ids, and the
# next serialized test's restore then collides with them).
pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def test_a_healthy_connection_is_usable_without_a_query():
    connection.ensure_connection()
    with CaptureQueriesContext(connection) as captured:
        assert connection.is_usable()
    assert captured.captured_queries == []
    before = connection.connection.pgconn.transaction_status
    assert connection.is_usable()
    assert connection.connection.pgconn.transaction_status == before


def test_a_terminated_backend_is_unusable_and_the_next_request_reconnects():
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()
    deadline = time.monotonic() + 5
    while connection.is_usable() and time.monotonic() < deadline:
        time.sleep(0.01)  # the FATAL message is on its way
    assert not connection.is_usable()
    # What Django does at the start of a request or task (close_old_connections).
    connection.health_check_done = False
    connection.close_if_unusable_or_obsolete()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid


def test_a_failed_transaction_is_unusable_as_select_1_would_find():
    connection.ensure_connection()
    raw = connection.connection
    raw.autocommit = False
    try:
        with pytest.raises(psycopg.errors.DivisionByZero), raw.cursor() as cursor:
            cursor.execute("SELECT 1/0")
        assert not connection.is_usable()
    finally:
        raw.rollback()
        raw.autocommit = True
    assert connection.is_usable()
