"""The worker's statements send their lists as array literals (statements._array)."""

from __future__ import annotations

import pytest
from django.db import connection

from idempotency_core.execution import statements
from idempotency_core.execution.confirmations import BY_PERSON
from idempotency_core.models import Operation, ReviewCase


def test_a_list_is_written_as_the_array_literal_postgresql_reads():
    assert statements._array([]) == "{}"
    assert statements._array([3, 41]) == "{3,41}"
    assert statements._array([Operation.Status.PENDING, "retrying"]) == "{pending,retrying}"


@pytest.mark.parametrize("word", ["", "a b", 'a"b', "a,b", "{a}", "a\\b", "NULL", "null", "é"])
def test_a_word_that_would_need_quoting_is_refused(word):
    with pytest.raises(ValueError):
        statements._array([word])


@pytest.mark.django_db
def test_each_literal_reads_back_as_its_list():
    expected = [
        (statements._CLAIMABLE, "text", [str(s.value) for s in Operation.CLAIMABLE]),
        (statements._OPEN_STATUSES, "text", [str(s.value) for s in ReviewCase.OPEN_STATUSES]),
        (statements._BY_PERSON, "text", list(BY_PERSON)),
        (statements._array([]), "bigint", []),
        (statements._array([7, 9]), "bigint", [7, 9]),
    ]
    with connection.cursor() as cursor:
        for literal, element, values in expected:
            cursor.execute(f"SELECT %s::{element}[]", [literal])
            assert cursor.fetchone()[0] == values, literal
