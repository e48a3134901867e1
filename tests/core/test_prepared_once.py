"""What the hot paths prepare once instead of per statement: `prepared_cursor`'s idle
cursor per connection (idempotency_core/sql.py), and a new attempt's constant columns
(execution/statements.py)."""

from __future__ import annotations

import uuid

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from idempotency_core.execution import statements
from idempotency_core.models import Attempt
from idempotency_core.sql import prep_value, prepared_cursor

pytestmark = pytest.mark.django_db


def _raw(cursor) -> object:
    return cursor.cursor  # Django's wrapper around the psycopg cursor


def test_the_next_statement_reuses_the_idle_cursor_and_still_answers():
    with prepared_cursor() as cursor:
        cursor.execute("SELECT %s::int + 1", [1])
        first = _raw(cursor)
        assert cursor.fetchone() == (2,)
    with prepared_cursor() as cursor:
        cursor.execute("SELECT %s::text", ["two"])
        assert _raw(cursor) is first
        assert cursor.fetchone() == ("two",)


def test_a_nested_use_gets_a_cursor_of_its_own():
    with prepared_cursor() as outer:
        outer.execute("SELECT 1")
        with prepared_cursor() as inner:
            inner.execute("SELECT 2")
            assert _raw(inner) is not _raw(outer)
            assert inner.fetchone() == (2,)
        assert outer.fetchone() == (1,)


def test_a_statement_that_fails_closes_its_cursor_and_the_next_gets_a_new_one():
    with prepared_cursor() as cursor:
        cursor.execute("SELECT 1")
        kept = _raw(cursor)
    with pytest.raises(DatabaseError), transaction.atomic(), prepared_cursor() as cursor:
        assert _raw(cursor) is kept
        cursor.execute("SELECT 1 / %s::int", [0])
    assert kept.closed
    with prepared_cursor() as cursor:
        assert _raw(cursor) is not kept
        cursor.execute("SELECT 3")
        assert cursor.fetchone() == (3,)


@pytest.mark.django_db(transaction=True)
def test_a_new_connection_gets_a_new_cursor():
    with prepared_cursor() as cursor:
        cursor.execute("SELECT 1")
        kept = _raw(cursor)
    old = connection.connection
    connection.close()
    connection.connect()
    assert connection.connection is not old
    with prepared_cursor() as cursor:
        assert _raw(cursor) is not kept
        cursor.execute("SELECT 4")
        assert cursor.fetchone() == (4,)


def test_a_new_attempts_values_are_what_a_whole_template_would_give():
    columns = statements._attempt_columns()
    for _ in range(3):
        token, now = uuid.uuid4(), timezone.now()
        template = Attempt(claim_token=token, started_at=now)
        expected = [prep_value(c.field, template) for c in columns]
        assert statements._attempt_params(token, now) == expected
    # Each call has a list of its own: the kept defaults are never changed.
    assert statements._attempt_params(token, now) is not statements._attempt_params(token, now)
    assert statements._attempt_defaults()[statements._attempt_varying()[0]] == uuid.UUID(int=0)
