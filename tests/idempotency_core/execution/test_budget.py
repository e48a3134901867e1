"""The shared request budget (execution/budget.py): its shape, its settings, and that
workers in separate processes on PostgreSQL never exceed it together."""

from __future__ import annotations

import bisect
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idempotency_core.execution.budget import (
    Budget,
    BudgetGate,
    BudgetSettingError,
    Turn,
    _shape,
    budget_finish,
    budget_for,
    budget_rate_limited,
    budget_reserve,
    budget_take,
    budget_wait,
)
from idempotency_core.models import Destination, DestinationBudget, DestinationRequest
from idempotency_core.observability.figures import destinations_rate_limited
from integrations.base import RequestBudget
from tests.support.processes import REPO, app_env

HUBSPOT = RequestBudget(requests=100, per_seconds=10, source="https://example.invalid/doc")


def _most_in_a_window(times: list[float], window: float) -> int:
    """The most of `times` (sorted) in any half-open window (t - window, t]."""
    return max(
        (i + 1 - bisect.bisect_right(times, t - window) for i, t in enumerate(times)), default=0
    )


@given(
    requests=st.integers(min_value=1, max_value=500),
    per_seconds=st.floats(min_value=0.5, max_value=120),
)
@settings(max_examples=300, deadline=None)
def test_the_cell_rate_spreads_the_whole_budget_over_each_window(requests, per_seconds):
    """Greedy senders (each request as early as the pace allows, for three windows) are
    spread over each window, a short one without any burst, and use the whole budget;
    the pace alone is off by at most one (a clock's rounding): the cap is the request
    log's (test_the_log_never_lets_more_than_the_budget_into_a_window)."""
    spacing, tolerance = _shape(requests, per_seconds)
    if per_seconds <= 60:
        assert tolerance == 0
    next_free, now, sent = 0.0, 0.0, []
    while now < 3 * per_seconds:
        now = max(now, next_free - tolerance)
        sent.append(now)
        next_free = max(next_free, now) + spacing
    assert _most_in_a_window(sent, per_seconds) <= requests + 1
    assert len(sent) >= 3 * (requests - max(1, requests // 10))


def test_the_budget_is_the_documented_one_unless_a_setting_replaces_it(monkeypatch):
    crm = Destination(name="crm")
    assert budget_for(crm, HUBSPOT) == Budget(100, 10.0, "documented")
    assert budget_for(crm, None) is None
    monkeypatch.setenv("ONEFOLD_RATE_LIMIT_CRM", "190/10")
    assert budget_for(crm, HUBSPOT) == Budget(190, 10.0, "configured")
    assert budget_for(crm, None) == Budget(190, 10.0, "configured")
    monkeypatch.setenv("ONEFOLD_RATE_LIMIT_CRM", "off")
    assert budget_for(crm, HUBSPOT) is None
    for wrong in ("100", "0/10", "100/0", "ten/10", "100/-1", "100/nan"):
        monkeypatch.setenv("ONEFOLD_RATE_LIMIT_CRM", wrong)
        with pytest.raises(BudgetSettingError, match="ONEFOLD_RATE_LIMIT_CRM must be"):
            budget_for(crm, HUBSPOT)


@pytest.mark.django_db
def test_requests_are_reserved_in_turn_and_a_turn_too_far_away_is_not_taken():
    crm = Destination.objects.get(name="crm")
    budget = Budget(2, 1.0, "configured")
    started = time.monotonic()
    first = budget_reserve(crm.pk, budget)
    assert first is not None and first.delay == 0
    assert budget_reserve(crm.pk, budget) is None  # the next turn is half a second away
    second = budget_reserve(crm.pk, budget, within=1.0)
    # The turns are half a second apart; each delay is counted from its own call, so
    # what a loaded machine spent between the calls comes off it.
    elapsed = time.monotonic() - started
    assert second is not None and 0.4 - elapsed < second.delay <= 0.6
    assert 0.4 < (second.at - first.at).total_seconds() <= 0.6
    wait = budget_wait(crm.pk)
    elapsed = time.monotonic() - started
    assert 0.4 - elapsed < wait.seconds <= 1.1 and wait.pause == ""
    row = DestinationBudget.objects.get(destination=crm)
    assert (row.requests, row.per_seconds, row.origin) == (2, 1.0, "configured")


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
@pytest.mark.serial
def test_workers_in_six_processes_share_one_budget_and_never_exceed_it():
    """Six processes, each as greedy as it can be, for four seconds, against a budget of
    30 requests a second: taken together (by the database's one clock), no second holds
    more than 30, and the budget is used, not starved."""
    crm = Destination.objects.get(name="crm")
    command = [sys.executable, "-m", "tests.support.budget_taker", str(crm.pk), "4", "30", "1"]
    env = {**os.environ, **app_env()}
    workers = [
        subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(6)
    ]
    outputs = [worker.communicate(timeout=60) for worker in workers]
    assert [worker.returncode for worker in workers] == [0] * 6, outputs[0][1][-2000:]
    per_worker = [json.loads(output) for output, _ in outputs]
    taken = sorted(t for times in per_worker for t in times)
    assert _most_in_a_window(taken, 1.0) <= 30
    # Django's start takes part of the four seconds; the rest is used at the budget's pace.
    assert len(taken) >= 2 * 27
    assert sum(1 for times in per_worker if times) >= 4  # shared, not taken by one


def _fresh_destination() -> Destination:
    """A destination of its own: other tests' processes commit the default one's budget
    and request log, which no rollback removes."""
    return Destination.objects.create(
        name=f"budget-{uuid.uuid4().hex[:8]}", kind=Destination.Kind.HUBSPOT
    )


@pytest.mark.django_db
def test_a_request_holds_its_place_until_its_answer_plus_the_window():
    """Three in any second: the fourth goes a second after the first one's answer, not
    after its start; while the place to free is a request still unanswered, none is
    reserved, and the waiter is told the place is in flight."""
    crm = _fresh_destination()
    budget = Budget(3, 1.0, "configured")
    taken = [budget_reserve(crm.pk, budget, within=2.0) for _ in range(3)]
    assert all(taken)
    turn = budget_take(crm.pk, budget, within=5.0)
    assert isinstance(turn, Turn) and turn.in_flight
    time.sleep(0.3)
    for reservation in taken:
        budget_finish(crm.pk, reservation)
    last_answer = DestinationRequest.objects.filter(destination=crm).latest("finished_at")
    fourth = budget_reserve(crm.pk, budget, within=5.0)
    assert fourth is not None
    first_answer = DestinationRequest.objects.filter(destination=crm).earliest("finished_at")
    assert (fourth.at - first_answer.finished_at).total_seconds() >= 1.0
    assert fourth.at <= last_answer.finished_at + timedelta(seconds=1)


@pytest.mark.django_db
def test_requests_the_vendor_counted_and_onefold_did_not_send_take_places():
    """An answer saying 9 of 10 are used while Onefold sent one: 8 places are taken for
    the other client's requests, for a window from the answer."""
    crm = _fresh_destination()
    budget = Budget(10, 10.0, "configured")
    reservation = budget_reserve(crm.pk, budget)
    assert reservation is not None
    budget_finish(crm.pk, reservation, used=9, limit=10)
    assert DestinationRequest.objects.filter(destination=crm).count() == 9
    assert budget_reserve(crm.pk, budget, within=1.0) is not None  # the tenth
    assert budget_reserve(crm.pk, budget, within=5.0) is None  # then none for a window


@pytest.mark.django_db
def test_a_429_after_the_budget_is_known_is_counted_on_metrics():
    crm = _fresh_destination()
    budget_reserve(crm.pk, Budget(10, 10.0, "configured"))
    budget_rate_limited(crm.pk, known=True)
    budget_rate_limited(crm.pk, known=False)
    budget_rate_limited(crm.pk, known=True)
    figure = destinations_rate_limited()
    assert figure.name == "onefold_destination_rate_limited_total"
    assert ((crm.name, "true"), 2.0) in figure.samples
    assert ((crm.name, "false"), 1.0) in figure.samples


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("documented", "headers", "learned", "places"),
    [
        # Salesforce: the org's requests of the last 24 hours, 120 of 5,000 used (a
        # day's usage is left to the vendor's refusal and the pause it brings).
        (
            Budget(15_000, 86_400.0, "documented"),
            {"Sforce-Limit-Info": "api-usage=120/5000"},
            (5000, 86_400.0),
            1,
        ),
        # HubSpot: 40 in any 10 seconds, 37 left after this one.
        (
            Budget(100, 10.0, "documented"),
            {
                "X-HubSpot-RateLimit-Max": "40",
                "X-HubSpot-RateLimit-Remaining": "37",
                "X-HubSpot-RateLimit-Interval-Milliseconds": "10000",
            },
            (40, 10.0),
            3,
        ),
        # Resend: its documented second, 4 requests in it, 3 left.
        (
            Budget(2, 1.0, "documented"),
            {"ratelimit-limit": "4", "ratelimit-remaining": "3", "ratelimit-reset": "1"},
            (4, 1.0),
            1,
        ),
    ],
)
def test_the_first_answers_headers_set_the_budget_and_what_the_vendor_counted(
    documented, headers, learned, places
):
    crm = _fresh_destination()
    gate = BudgetGate(crm, documented)
    gate.before("GET", "https://vendor.example/x")
    gate.after(httpx.Response(200, headers=headers, request=httpx.Request("GET", "https://x")))
    row = DestinationBudget.objects.get(destination=crm)
    assert (row.requests, row.per_seconds, row.origin) == (*learned, "learned")
    assert DestinationRequest.objects.filter(destination=crm).count() == places
