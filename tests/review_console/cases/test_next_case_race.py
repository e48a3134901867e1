"""Two reviewers never take the same case with "Next case".

Real transactions on PostgreSQL, in real threads each with its own connection: every
round, six reviewers start together behind a barrier and keep pressing "Next case"
(`case_take_next`, the console's own service) until nothing is left. Every case ends
with exactly one owner, taken by exactly one reviewer, with exactly one audit entry;
no reviewer got a case another one also got. A plain `django_db` test runs in one
transaction, where no race can happen: hence `transaction=True`.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.contrib.auth.models import User
from django.db import connection

from idempotency_core.models import AuditEntry, ReviewCase
from idempotency_core.review.cases import case_take_next
from review_console.cases.selectors import next_case_candidates
from tests.factories import make_user, permanent_case

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

REVIEWERS = 6
CASES = 15
ROUNDS = 4


def _press_until_empty(user: User, barrier: threading.Barrier, got: list[int]) -> None:
    try:
        barrier.wait(timeout=30)
        while True:
            case = case_take_next(actor=user, candidates=next_case_candidates())
            if case is None:
                return
            got.append(case.pk)
    finally:
        connection.close()


def test_reviewers_pressing_next_case_together_never_share_a_case(_seed_restored):
    reviewers = [make_user(f"racer-{n}", groups=("Reviewers",)) for n in range(REVIEWERS)]
    for round_ in range(ROUNDS):
        cases = [permanent_case(f"race-{round_}-{i}").pk for i in range(CASES)]
        barrier = threading.Barrier(REVIEWERS)
        taken: dict[int, list[int]] = {u.pk: [] for u in reviewers}
        threads = [
            threading.Thread(target=_press_until_empty, args=(u, barrier, taken[u.pk]))
            for u in reviewers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        every = [pk for got in taken.values() for pk in got]
        assert sorted(every) == sorted(cases), "each case taken once, none twice"
        assert sum(1 for got in taken.values() if got) >= 2, "the reviewers did compete"
        owners = dict(ReviewCase.objects.filter(pk__in=cases).values_list("pk", "owner_id"))
        for user_pk, got in taken.items():
            assert all(owners[pk] == user_pk for pk in got)
        entries = Counter(
            AuditEntry.objects.filter(case_id__in=cases, action="case_taken").values_list(
                "case_id", flat=True
            )
        )
        assert entries == Counter(cases), "one audit entry per case"
        assert set(ReviewCase.objects.filter(pk__in=cases).values_list("status", flat=True)) == {
            "in_progress"
        }
