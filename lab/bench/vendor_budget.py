"""Benchmark: the share of a vendor's rate limit that Onefold uses (not a unit test).

The HubSpot emulator runs in a process of its own with its rolling limit lowered
(`limit` requests in any `window` seconds per token); the CRM destination is pointed
at it and email goes to the sandbox's SMTP sink. A burst of submissions is stored at
once and timed until every step has succeeded, through one real `qcluster`.

The bound is measured in the same run: the requests the emulator let through during
the burst, divided by the submissions, is what one submission costs; the limit over
that cost is the most submissions a second any client could complete. The share is
the rate achieved over that bound. The emulator's own counts say whether the budget
held: its 429s (each one a request its window refused) and the most requests one
window held; Onefold's, the 429s it met after its budget was learned or configured.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Destination, DestinationBudget
from lab.bench.pipeline import (
    BenchmarkError,
    Sandbox,
    child_ready_wait,
    child_spawn,
    child_stop,
    clusters_running,
    outcomes_wait,
    submissions_store,
)
from lab.bench.tables import bench_tables_empty
from lab.emulators.hubspot_store import DEFAULT_TOKEN

Out = Callable[[str], None]
TARGET_SHARE = 0.9


@dataclass(frozen=True)
class BudgetRun:
    """One burst under a vendor's rolling limit of `limit` requests per `window` s."""

    submissions: int
    seconds: float
    requests: int  # let through by the emulator during the burst
    limit: int
    window: float
    refused: int  # 429s the emulator answered
    refused_after_learning: int  # those Onefold met after its budget was known
    window_peak: int  # the most requests one window held, as the emulator counts
    duplicates: int

    @property
    def per_submission(self) -> float:
        return self.requests / self.submissions

    @property
    def bound(self) -> float:
        """Submissions a second the limit allows at this run's cost per submission."""
        return self.limit / self.window / self.per_submission

    @property
    def rate(self) -> float:
        return self.submissions / self.seconds

    @property
    def share(self) -> float:
        return self.rate / self.bound


@contextmanager
def hubspot_running(*, limit: int, window: float) -> Iterator[httpx.Client]:
    """The HubSpot emulator in its own process, its rolling limit set; yields a client
    on its base URL."""
    with tempfile.TemporaryFile(mode="w+") as log:
        process = child_spawn(["emulator", "hubspot", "--port", "0"], log)
        try:

            def url(text: str) -> str | None:
                for line in text.splitlines():
                    if line.startswith("HubSpot emulator listening on "):
                        return line.rsplit(" ", 1)[1]
                return None

            base = child_ready_wait(process, log, url)
            with httpx.Client(base_url=base, timeout=60) as client:
                limits = {"ten_secondly": limit, "window_seconds": window}
                client.post("/_sandbox/config", json={"rate_limits": limits}).raise_for_status()
                yield client
        finally:
            child_stop(process)


def _hubspot_stats(client: httpx.Client) -> dict[str, Any]:
    response = client.get("/_sandbox/stats")
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def _duplicates(hubspot: dict[str, Any], sandbox: dict[str, Any]) -> int:
    counted = [
        hubspot["records_by_external_ref"],
        hubspot["tasks_by_external_ref"],
        sandbox["messages_by_recipient"],
    ]
    return sum(n - 1 for counts in counted for n in counts.values() if n > 1)


def budget_run(sandbox: Sandbox, *, count: int, limit: int, window: float) -> BudgetRun:
    """`count` submissions at once through one cluster whose CRM is the HubSpot emulator
    limited to `limit` requests in any `window` seconds."""
    # The budget's row and request log too: each run learns the limit from its first answer.
    bench_tables_empty("idempotency_core_destinationrequest", "idempotency_core_destinationbudget")
    sandbox.reset()
    mailer, _ = Destination.objects.update_or_create(
        name="bench-mail",
        defaults={"kind": Destination.Kind.SMTP, "base_url": f"127.0.0.1:{sandbox.smtp_port}"},
    )
    source, _ = source_get_or_create(name="bench-budget")
    source.crm, source.mailer = None, mailer
    source.save(update_fields=["crm", "mailer"])
    with hubspot_running(limit=limit, window=window) as hubspot:
        env = {
            "ONEFOLD_CRM": "hubspot",
            "HUBSPOT_BASE_URL": str(hubspot.base_url).rstrip("/"),
            "HUBSPOT_TOKEN": DEFAULT_TOKEN,
        }
        with clusters_running(1, env=env):
            before = _hubspot_stats(hubspot)
            started = submissions_store(source, run=uuid.uuid4().hex[:8], count=count)
            finished = outcomes_wait(timeout=max(120.0, 3 * count * 4 * window / limit))
            after = _hubspot_stats(hubspot)
    budget = DestinationBudget.objects.get(destination__name="crm")
    return BudgetRun(
        submissions=count,
        seconds=finished - started,
        requests=after["requests"]["admitted"] - before["requests"]["admitted"],
        limit=limit,
        window=window,
        refused=after["calls"]["rate_limited"],
        refused_after_learning=budget.rate_limited_known,
        window_peak=after["requests"]["window_peak"],
        duplicates=_duplicates(after, sandbox.stats(detail=True)),
    )


def bench_vendor_budget(
    sandbox: Sandbox, *, count: int, limit: int, window: float, out: Out
) -> BudgetRun:
    """One run, printed beside its bound."""
    run = budget_run(sandbox, count=count, limit=limit, window=window)
    out(
        f"HubSpot emulator limited to {limit} requests per {window:g} s, {count} submissions "
        f"at {run.per_submission:.2f} requests each: bound {run.bound:.3f} submissions/s"
    )
    out(
        f"  Onefold: {run.rate:.3f} submissions/s in {run.seconds:.1f} s = "
        f"{run.share:.2f}x the bound (target >= {TARGET_SHARE}x); 429s {run.refused} "
        f"({run.refused_after_learning} after learning), most in one window "
        f"{run.window_peak}/{limit}, duplicates {run.duplicates}"
    )
    if run.duplicates:
        raise BenchmarkError(f"{run.duplicates} duplicates")
    return run
