"""Fixtures of the console tests: one user per role, and ambiguous cases made the real way.

Cases come from the engine itself (event_ingest, operation_execute against the
sandbox) or from `review_case_open`, never from hand-written rows, so the
console is tested on the states production produces. The plain builders
(`permanent_case`, `duplicate_case`, `make_user`...) live in tests/factories.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import Operation, ReviewCase
from tests.factories import PASSWORD, crm_without_recognition, ingest, make_user


@pytest.fixture
def users(db: None) -> dict[str, User | None]:
    """One user per role. The non-staff user is even in Reviewers: staff is what counts."""
    return {
        "anonymous": None,
        "nonstaff": make_user("nora", groups=("Reviewers",), staff=False),
        "reviewer": make_user("rita", groups=("Reviewers",)),
        "replay_admin": make_user("rex", groups=("Replay admins",)),
        "superuser": User.objects.create_superuser("sue", password=PASSWORD),
    }


@pytest.fixture
def ambiguous_case(sandbox) -> Callable[..., ReviewCase]:
    """Makes an ambiguous-outcome case for real: the first create fails in `mode`."""

    def make(key: str = "amb-1", mode: str = "drop_response_after_commit") -> ReviewCase:
        crm_without_recognition(sandbox)
        sandbox.fault("create_record", mode)
        event = ingest(key, message=f"Please call me back ({key}).")
        operation = event.operations.get(step="create_enquiry")
        assert operation_execute(operation_id=operation.pk) == "ambiguous"
        operation.refresh_from_db()
        assert operation.status == Operation.Status.NEEDS_REVIEW
        return ReviewCase.objects.get(operation=operation, kind=ReviewCase.Kind.AMBIGUOUS)

    return make
