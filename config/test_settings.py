"""Settings for the test suite: the real settings with short timings.

Tests and the worker clusters they start both use this module, so a qcluster
subprocess sees exactly the timings the test expects.
"""

import os

for name, value in {
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/onefold",
    "ONEFOLD_LEASE_SECONDS": "6",
    "ONEFOLD_HTTP_TIMEOUT_SECONDS": "1.5",
    "ONEFOLD_Q_TIMEOUT": "4",
    # Within the task timeout with the HTTP timeout (onefold.E006).
    "ONEFOLD_BUDGET_MAX_WAIT_SECONDS": "2",
    "ONEFOLD_RETRY_BASE_SECONDS": "0.2",
    "ONEFOLD_RETRY_MAX_SECONDS": "2",
    "ONEFOLD_MAX_ATTEMPTS": "4",
    "ONEFOLD_SWEEP_SECONDS": "0.5",
    "ONEFOLD_Q_POLL": "0.05",
    # The suite's gunicorn runs 16 threads a process, and a persistent connection is
    # kept per thread: several servers at once would exhaust PostgreSQL's 100
    # connections (docs/operations.md, "Database connections"). Tests about persistence set it.
    "DATABASE_CONN_MAX_AGE": "0",
    # The suite's factories write to one address (ada@example.com) and from one source
    # far more than the product allows in a day; the tests of those limits
    # (tests/idempotency_core/execution/test_confirmation_limits*.py) put the
    # product's defaults back.
    "ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY": "1000000",
    "ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY": "1000000",
}.items():
    os.environ.setdefault(name, value)

from config.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Django's flush between transactional tests empties every table with TRUNCATE, which
# the audit trail's guard refuses to any session that does not say so
# (idempotency_core/migrations/sql/0.2.0/audit_trail.sql).
DATABASES["default"].setdefault("OPTIONS", {})["options"] = (  # noqa: F405
    "-c onefold.audit_truncate=allowed"
)
