"""The reconciliation benchmark: reconcile a million events and say how fast, in how much memory.

Run it on a database of its own (`manage.py bench_reconcile`, which says how);
it empties Onefold's tables there.

For each size (the baseline first, then --events) it seeds, with
generate_series, N events, each with its three operations succeeded, starts a
private sandbox CRM and fills it with matching records through
`POST /_sandbox/seed`, plants a few of each mismatch, and runs the real
`manage.py reconcile --json` as a child process: wall time, events per second
and the child's peak resident memory (ru_maxrss from wait4). The baseline in
the same run lets a noisy machine cancel out: compare per-event time and peak
memory between the two sizes.

Benchmark shortcut, on purpose: `POST /_sandbox/seed` names records
`<prefix>0 .. <prefix>N-1`, so the create_enquiry operation keys here are
`bench-<i>` rather than the HMAC-derived `opk_...` of real events. The
comparison only ever joins on equality of key and external reference, so the
shape of the key does not change the work.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.db import connection

from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Destination

REPO = Path(settings.BASE_DIR)
# Mismatches planted at every size (absolute, so both sizes open the same cases).
PLANTED = {"missing": 50, "duplicate": 50, "orphan": 50, "removed": 50, "changed": 50, "stuck": 50}
SANDBOX_ARGS = ["sandbox", "--http-port", "0", "--smtp-port", "0"]
TABLES = [
    "idempotency_core_reconciliationfinding",
    "idempotency_core_reconciliationrecord",
    "idempotency_core_reconciliationrun",
    "idempotency_core_auditentry",
    "idempotency_core_reviewcase",
    "idempotency_core_attempt",
    "idempotency_core_delivery",
    "idempotency_core_operation",
    "idempotency_core_event",
]


class BenchmarkError(Exception):
    """The benchmark cannot run here, or a run did not find what was planted."""


def bench_reconcile_database_check(*, force: bool = False) -> None:
    """Refuses a database not named for benchmarks: the seed empties Onefold's tables."""
    name = settings.DATABASES["default"]["NAME"]
    if "bench" not in str(name) and not force:
        raise BenchmarkError(
            f"refusing to empty database {name!r}: use one whose name contains 'bench'"
        )


def bench_reconcile(
    *,
    sizes: list[int],
    rounds: int = 1,
    progress: Callable[[str], None] = lambda line: None,
) -> list[dict[str, Any]]:
    """Seeds and reconciles each size in turn (the baseline first) with one private
    sandbox CRM; returns one result per size. Empties Onefold's tables."""
    sandbox, url = _start_sandbox()
    results = []
    try:
        for size in sizes:
            results.append(_measure(size, url, rounds=max(1, rounds), progress=progress))
    finally:
        sandbox.terminate()
        sandbox.wait(timeout=20)
    return results


def _measure(
    size: int, url: str, *, rounds: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    progress(f"seeding {size:,} events (3 operations each) and CRM records ...")
    started = time.monotonic()
    period = _seed(size, url)
    progress(f"  seeded in {time.monotonic() - started:.1f} s")
    timings, peaks, summaries = [], [], []
    for round_number in range(rounds):
        wall, peak_kb, summary = _reconcile(period, url)
        expected_new = PLANTED if round_number == 0 else dict.fromkeys(PLANTED, 0)
        expected_records = size - PLANTED["missing"] - PLANTED["removed"]
        expected_records += PLANTED["duplicate"] + PLANTED["orphan"]
        if (
            summary["findings"] != expected_new
            or summary["events"] != size
            or summary["destination_records"] != expected_records
        ):
            raise BenchmarkError(f"unexpected result at {size:,} events: {summary}")
        timings.append(wall)
        peaks.append(peak_kb)
        summaries.append(summary)
        progress(
            f"  round {round_number + 1}: {wall:.1f} s, {size / wall:,.0f} events/s, "
            f"peak RSS {peak_kb / 1024:.0f} MiB, findings {summary['findings']}"
        )
    wall = statistics.median(timings)
    return {
        "events": size,
        "seconds": wall,
        "events_per_second": size / wall,
        "peak_rss_mib": max(peaks) / 1024,
        "first_run": summaries[0],
    }


def bench_reconcile_report(results: list[dict[str, Any]]) -> list[str]:
    """The table, the ratio between the two sizes, and the results as one JSON line."""
    lines = [
        f"reconcile benchmark, {os.cpu_count()} CPUs shared by PostgreSQL, the sandbox CRM "
        "and the reconcile process",
        f"{'events':>10} {'seconds':>8} {'events/s':>10} {'peak RSS MiB':>13}",
    ]
    for r in results:
        lines.append(
            f"{r['events']:>10,} {r['seconds']:>8.1f} {r['events_per_second']:>10,.0f} "
            f"{r['peak_rss_mib']:>13.0f}"
        )
    if len(results) == 2:
        small, big = results
        lines.append(
            f"x{big['events'] / small['events']:.0f} events: "
            f"x{big['seconds'] / small['seconds']:.1f} time, "
            f"x{big['peak_rss_mib'] / small['peak_rss_mib']:.2f} peak memory"
        )
    lines.append(json.dumps({"results": results}, default=str))
    return lines


def _start_sandbox() -> tuple[subprocess.Popen[str], str]:
    """A private sandbox CRM in its own process (its memory is not the reconciler's)."""
    process = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), *SANDBOX_ARGS],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        match = re.search(r"Sandbox CRM listening on (http://[\d.]+:\d+)", line)
        if match:
            return process, match.group(1)
        if not line and process.poll() is not None:
            break
    process.kill()
    raise BenchmarkError("the sandbox did not start")


# The seed's statements: every row is generated inside PostgreSQL.
SEED_EVENTS = """
INSERT INTO idempotency_core_event
    (id, source_id, key, fingerprint, payload, form, contact_digest,
     submitted_at, received_at, payload_purged_at)
SELECT md5('bench-event-' || i)::uuid, %(source)s, 'bench-' || i,
       md5(i::text) || md5(i::text), '{"form": "contact"}'::jsonb, 'contact', '',
       NULL, %(since)s + i * (%(spacing)s * interval '1 microsecond'), NULL
FROM generate_series(0, %(last)s) AS i
"""

# Three operations per event: succeeded, but for the planted missing (needs review,
# no reference), changed (another reference) and stuck (running, claim expired) ones.
SEED_OPERATIONS = """
INSERT INTO idempotency_core_operation
    (event_id, step, position, destination_id, key, status, recovery,
     attempt_count, destination_ref, last_error, created_at, updated_at,
     completed_at, next_attempt_at, claim_token, lease_expires_at)
SELECT md5('bench-event-' || i)::uuid, s.step, s.position,
       CASE WHEN s.step = 'send_confirmation' THEN %(email)s ELSE %(crm)s END,
       CASE WHEN s.position = 0 THEN 'bench-' || i
            ELSE 'benchop-' || s.position || '-' || i END,
       st.status, '', 1,
       CASE WHEN s.position = 0 AND i >= %(missing_from)s THEN ''
            WHEN s.position = 0 AND i >= %(changed_from)s AND i < %(changed_to)s
            THEN 'rec_replaced_' || i
            WHEN s.position = 0
            THEN 'rec_' || lpad((i + 1)::text, greatest(6, length((i + 1)::text)), '0')
            ELSE 'ref-' || s.position || '-' || i END,
       '', t.at, t.at,
       CASE WHEN st.status = 'succeeded' THEN t.at + interval '1 second' END,
       t.at,
       -- A worker died holding these claims.
       CASE WHEN st.status = 'running' THEN md5('claim-' || i)::uuid END,
       CASE WHEN st.status = 'running' THEN t.at + interval '2 minutes' END
FROM generate_series(0, %(last)s) AS i
CROSS JOIN (VALUES ('create_enquiry', 0), ('assign_task', 1),
                   ('send_confirmation', 2)) AS s(step, position)
CROSS JOIN LATERAL (
    SELECT %(since)s + i * (%(spacing)s * interval '1 microsecond') AS at) AS t
CROSS JOIN LATERAL (
    SELECT CASE WHEN s.position = 0 AND i >= %(missing_from)s THEN 'needs_review'
                WHEN s.position = 1 AND i >= %(stuck_from)s AND i < %(stuck_to)s
                THEN 'running'
                ELSE 'succeeded' END AS status) AS st
"""


def _seed(size: int, url: str) -> tuple[datetime, datetime]:
    """N events with three succeeded operations each, matching records, planted mismatches."""
    source, _ = source_get_or_create(name="bench")
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    since, until = day - timedelta(days=2), day - timedelta(days=1)
    missing_from = size - PLANTED["missing"]
    params: dict[str, Any] = {
        "source": source.pk,
        "crm": Destination.objects.get(name="crm").pk,
        "email": Destination.objects.get(name="email").pk,
        "since": since,
        "spacing": int(timedelta(days=1) / timedelta(microseconds=1) / size),
        "last": size - 1,
        "missing_from": missing_from,
        "changed_from": 1000,
        "changed_to": 1000 + PLANTED["changed"],
        "stuck_from": 2000,
        "stuck_to": 2000 + PLANTED["stuck"],
    }
    with connection.cursor() as cursor:
        # The audit trail's guard refuses TRUNCATE (and a CASCADE reaching it) to any
        # session but one that says so: this is the bench's own reset.
        cursor.execute("SELECT set_config('onefold.audit_truncate', 'allowed', false)")
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} CASCADE")
        cursor.execute(SEED_EVENTS, params)
        cursor.execute(SEED_OPERATIONS, params)
        cursor.execute("ANALYZE idempotency_core_event")
        cursor.execute("ANALYZE idempotency_core_operation")
    _seed_crm(url, records=missing_from, stamp=(since + timedelta(hours=1)).isoformat())
    return since, until


def _seed_crm(url: str, *, records: int, stamp: str) -> None:
    """The sandbox CRM's records: one per event Onefold created, plus the planted
    duplicates and orphans, minus the planted removals."""
    p = PLANTED
    with httpx.Client(base_url=url, timeout=300) as client:
        client.post("/_sandbox/reset").raise_for_status()
        client.post(
            "/_sandbox/seed", json={"count": records, "prefix": "bench-", "created_at": stamp}
        ).raise_for_status()
        # The same prefix again: records bench-0.. a second time, i.e. duplicates.
        client.post(
            "/_sandbox/seed",
            json={"count": p["duplicate"], "prefix": "bench-", "created_at": stamp},
        ).raise_for_status()
        client.post(
            "/_sandbox/seed", json={"count": p["orphan"], "prefix": "stray-", "created_at": stamp}
        ).raise_for_status()
        # Deleted behind Onefold's back (events well clear of the other plantings).
        for i in range(5000, 5000 + p["removed"]):
            client.delete(f"/crm/records/rec_{i + 1:06d}").raise_for_status()


def _reconcile(period: tuple[datetime, datetime], url: str) -> tuple[float, int, dict[str, Any]]:
    """The real command in a child process: wall time, peak RSS (KiB), its JSON."""
    since, until = period
    with tempfile.TemporaryFile("w+") as err:
        started = time.monotonic()
        process = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "manage.py"),
                "reconcile",
                "--since",
                since.isoformat(),
                "--until",
                until.isoformat(),
                "--json",
                "--no-progress",
            ],
            cwd=REPO,
            env={**os.environ, "DESTINATION_URL": url},
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        assert process.stdout is not None
        out = process.stdout.read()
        # wait4, not wait(): it also gives this child's own peak resident memory.
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            err.seek(0)
            raise BenchmarkError(f"reconcile failed ({process.returncode}):\n{err.read()[-4000:]}")
    return wall, usage.ru_maxrss, json.loads(out)
