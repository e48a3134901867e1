"""A reconciliation process killed mid-listing (SIGKILL), then run again: the run
resumes where its last committed page left it and finds what an uninterrupted run
finds. Real processes: the command runs as a subprocess against the test database
and the sandbox over HTTP, so the commits (`transaction=True`) must be real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from idempotency_core.models import ReconciliationFinding, ReconciliationRun
from tests.factories import completed
from tests.support.processes import REPO, app_env, wait_for

PAGE_SIZE = 10
LEGACY_RECORDS = 3000  # 300+ pages: long enough to be killed in the middle


def reconcile_command(since: str, until: str) -> list[str]:
    return [
        sys.executable,
        str(REPO / "manage.py"),
        "reconcile",
        "--since",
        since,
        "--until",
        until,
        "--dry-run",
        "--json",
        "--no-progress",
    ]


def plant_one_removed_record_among_legacy_ones(sandbox) -> None:
    """Two completed events, the record of one deleted in the CRM behind Onefold's back,
    and LEGACY_RECORDS records nobody accounts for (orphans), to make the listing long."""
    completed("kept-1")
    deleted = completed("deleted")
    record = deleted.operations.get(step="create_enquiry").destination_ref
    sandbox.client.delete(f"/crm/records/{record}").raise_for_status()
    sandbox.client.post(
        "/_sandbox/seed", json={"count": LEGACY_RECORDS, "prefix": "legacy-"}
    ).raise_for_status()


def kill_while_listing(command: list[str], env: dict[str, str]) -> ReconciliationRun:
    """Starts the command, SIGKILLs it once its run has listed a few pages; the run."""
    first = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    run = wait_for(
        lambda: ReconciliationRun.objects.filter(pages_fetched__gte=5).first(),
        timeout=60,
        interval=0.01,
        what="the run to list a few pages",
    )
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    run.refresh_from_db()
    return run


def run_to_the_end(command: list[str], env: dict[str, str]) -> dict:
    """Runs the command to completion; its JSON summary."""
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def kinds_and_subjects(run_id: int) -> set[tuple[str, str]]:
    return set(ReconciliationFinding.objects.filter(run_id=run_id).values_list("kind", "subject"))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_killed_reconcile_process_resumes_with_the_same_findings(sandbox):
    plant_one_removed_record_among_legacy_ones(sandbox)
    now = timezone.now()
    since = (now - timedelta(days=1)).isoformat()
    until = (now + timedelta(minutes=1)).isoformat()
    env = {
        **os.environ,
        **app_env(sandbox),
        "ONEFOLD_RECONCILE_PAGE_SIZE": str(PAGE_SIZE),
        "ONEFOLD_RECONCILE_LEASE_SECONDS": "2",
    }
    command = reconcile_command(since, until)

    run = kill_while_listing(command, env)
    assert run.status == "listing"
    assert 5 <= run.pages_fetched < LEGACY_RECORDS / PAGE_SIZE
    killed_at = run.pages_fetched

    # The dead process still holds the lease until it expires; then the same
    # command takes the run over from its last committed page.
    wait_for(
        lambda: ReconciliationRun.objects.get(pk=run.pk).lease_expires_at < timezone.now(),
        timeout=10,
        what="the lease to expire",
    )
    resumed_summary = run_to_the_end(command, env)
    assert resumed_summary["run_id"] == run.pk
    run.refresh_from_db()
    assert run.status == "completed" and run.pages_fetched > killed_at

    fresh_summary = run_to_the_end(command, env)
    assert fresh_summary["run_id"] != run.pk
    assert resumed_summary["findings"] == fresh_summary["findings"]
    assert resumed_summary["destination_records"] == fresh_summary["destination_records"]
    assert resumed_summary["findings"]["orphan"] == LEGACY_RECORDS
    assert resumed_summary["findings"]["removed"] == 1
    assert kinds_and_subjects(run.pk) == kinds_and_subjects(fresh_summary["run_id"])
