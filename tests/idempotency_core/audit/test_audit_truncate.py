"""The audit trail is append-only against TRUNCATE too: a statement that empties the
table, directly or by CASCADE from a table it refers to, is refused like a DELETE.

Only a session that says so (`onefold.audit_truncate`, set by the test suite's
connections for Django's flush between transactional tests, and by the benchmarks'
reset) may empty it; this test's savepoint takes that away first."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from idempotency_core.audit.entries import audit_record
from idempotency_core.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "statement",
    [
        "TRUNCATE idempotency_core_auditentry",
        "TRUNCATE idempotency_core_auditentry RESTART IDENTITY",
        "TRUNCATE idempotency_core_event CASCADE",
    ],
)
def test_truncate_is_refused(statement: str) -> None:
    audit_record(action="case_taken", system="test")
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        # The entry's deferred foreign-key checks, pending in this test's transaction,
        # would otherwise stop the TRUNCATE before any trigger is asked.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SELECT set_config('onefold.audit_truncate', '', true)")
        cursor.execute(statement)
    assert AuditEntry.objects.count() == 1
