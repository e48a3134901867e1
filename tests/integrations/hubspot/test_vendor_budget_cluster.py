"""The destination budget on real parts: a qcluster on PostgreSQL sends a burst of
submissions to the HubSpot emulator, in a process of its own, whose rolling limit is
lowered; the budget learns the limit from the first answer's headers and then keeps
every window, as the emulator counts it, within the limit while using nearly all of it.
The window is shortened (HubSpot's is ten seconds; X-HubSpot-RateLimit-Interval-
Milliseconds says which), so the run lasts several windows in a few seconds."""

from __future__ import annotations

import pytest

from lab.bench.pipeline import sandbox_running
from lab.bench.vendor_budget import budget_run


@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the default destinations
@pytest.mark.serial
def test_a_cluster_uses_nine_tenths_of_hubspots_rolling_limit_and_is_never_refused():
    with sandbox_running() as sandbox:
        run = budget_run(sandbox, count=24, limit=10, window=2.0)
    assert run.refused == 0 and run.refused_after_learning == 0
    assert run.window_peak <= 10
    assert run.duplicates == 0
    # Every submission reached HubSpot at least for its contact, deal and task.
    assert run.per_submission >= 3
    assert run.share >= 0.9, run
