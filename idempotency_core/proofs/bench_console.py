"""Benchmark of the console's queue page at production scale (not a unit test).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/onefold_bench_console \\
        .venv/bin/python manage.py bench_console [--rounds 40] [--reseed]

Seeds, once, 1,000,000 events with one operation each, 100,000 open review cases
(plus 50,000 resolved or closed ones) and an attempt per case operation, generated
inside PostgreSQL with `INSERT ... SELECT generate_series` (no rows travel through
Python, so the seed takes about a minute on two cores). Then renders console
pages through Django's test client, several rounds each, and prints p50/p95 in
milliseconds next to a baseline page (the login form: same middleware and
template engine, no queries) measured in the same run, so a noisy machine shows
as a higher baseline rather than as a slower queue.

Only the first pipeline step gets an operation: the queue joins a case to at most
one operation, so two million more operation rows would lengthen the seed
without changing the queue's plans (their indexes are by primary key).

It refuses to run on a database whose name does not contain "bench": the seed is
bulk and the reseed truncates.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Destination, Event, ReviewCase

EVENTS = 1_000_000
OPEN_CASES = 100_000
DONE_CASES = 50_000
KINDS = [
    "ambiguous_outcome",
    "permanent_failure",
    "retries_exhausted",
    "interrupted_send",
    "recon_missing",
    "suspected_duplicate",
]


class Command(BaseCommand):
    help = "Seeds a million events in a bench database and times the console's queue page."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rounds", type=int, default=40, help="timed renders per page")
        parser.add_argument("--reseed", action="store_true", help="truncate and seed again")

    def handle(self, *args: Any, rounds: int, reseed: bool, **options: Any) -> None:
        name = settings.DATABASES["default"]["NAME"]
        if connection.vendor != "postgresql" or "bench" not in str(name):
            raise CommandError(
                f"refusing to seed {name!r}: use a PostgreSQL database named like "
                "onefold_bench_console (DATABASE_URL)"
            )
        call_command("migrate", verbosity=0)
        if reseed:
            self._truncate()
        seeded = ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES).count()
        if seeded < OPEN_CASES or Event.objects.count() < EVENTS:
            self._truncate()
            self._seed()
        self._measure(rounds)

    # -- seed -------------------------------------------------------------------

    def _truncate(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "TRUNCATE review_console_bulkreplayitem, review_console_bulkreplayjob, "
                "idempotency_core_attempt, idempotency_core_delivery, "
                "idempotency_core_reviewcase, idempotency_core_operation, "
                "idempotency_core_event CASCADE"
            )
            # Audit entries refuse DELETE (a trigger); TRUNCATE is the bench's own reset.
            cursor.execute("TRUNCATE idempotency_core_auditentry")

    def _step(self, label: str, sql: str, params: list[Any]) -> None:
        started = time.monotonic()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            count = cursor.rowcount
        self.stdout.write(f"  {label}: {count:,} rows in {time.monotonic() - started:.1f} s")

    def _seed(self) -> None:
        self.stdout.write("Seeding (generated inside PostgreSQL)…")
        started = time.monotonic()
        sources = [source_get_or_create(name=f"bench-site-{n}")[0].pk for n in range(4)]
        crm = Destination.objects.get(name="crm").pk
        user_model = get_user_model()
        owner, _ = user_model.objects.get_or_create(
            username="bench-reviewer", defaults={"is_staff": True}
        )
        self._step(
            "events",
            """
            INSERT INTO idempotency_core_event
                (id, source_id, key, fingerprint, payload, form, contact_digest,
                 submitted_at, received_at)
            SELECT md5('event' || i)::uuid,
                   (%s::bigint[])[1 + i %% 4],
                   'bench-' || i,
                   md5('fp' || i),
                   jsonb_build_object(
                       'form', 'contact',
                       'contact', jsonb_build_object(
                           'name', 'Person ' || (i %% 300000),
                           'email', 'p' || (i %% 300000) || '@example.com',
                           'phone', '+44 20 7946 ' || lpad((i %% 10000)::text, 4, '0')),
                       'message', 'Please quote for a kitchen refit.'),
                   'contact',
                   md5('contact' || (i %% 300000)),
                   now() - (i || ' seconds')::interval,
                   now() - (i || ' seconds')::interval
            FROM generate_series(1, %s) AS i
            """,
            [sources, EVENTS],
        )
        self._step(
            "operations",
            """
            INSERT INTO idempotency_core_operation
                (event_id, step, position, destination_id, key, status, recovery,
                 attempt_count, destination_ref, last_error, created_at, updated_at,
                 completed_at, first_presented_at, next_attempt_at)
            SELECT md5('event' || i)::uuid, 'create_enquiry', 0, %s,
                   'opk_bench_' || md5('op' || i),
                   CASE WHEN i <= %s THEN 'needs_review' ELSE 'succeeded' END,
                   CASE WHEN i <= %s THEN 'review' ELSE '' END,
                   1,
                   CASE WHEN i <= %s THEN '' ELSE 'rec_' || i END,
                   '',
                   now() - (i || ' seconds')::interval,
                   now() - (i || ' seconds')::interval,
                   CASE WHEN i <= %s THEN NULL ELSE now() - (i || ' seconds')::interval END,
                   now() - (i || ' seconds')::interval,
                   NULL
            FROM generate_series(1, %s) AS i
            """,
            [crm, OPEN_CASES, OPEN_CASES, OPEN_CASES, OPEN_CASES, EVENTS],
        )
        self._step(
            "attempts",
            """
            INSERT INTO idempotency_core_attempt
                (operation_id, number, claim_token, trigger, recovery, started_at,
                 finished_at, outcome, error_class, error_message, destination_ref, adopted)
            SELECT o.id, 1, md5('claim' || o.id)::uuid, 'worker', '',
                   o.created_at, o.created_at, 'ambiguous', 'RemoteProtocolError',
                   'Server disconnected without sending a response.', '', false
            FROM idempotency_core_operation o
            WHERE o.status = 'needs_review'
            """,
            [],
        )
        # Open cases: one per needs-review operation, ages spread over 60 days,
        # a tenth owned; then resolved and closed ones on succeeded operations.
        self._step(
            "open cases",
            """
            INSERT INTO idempotency_core_reviewcase
                (kind, status, subject, event_id, operation_id, summary, evidence,
                 owner_id, resolution_code, resolution_note, created_at, updated_at)
            SELECT (%s::text[])[1 + o.id %% 6],
                   CASE WHEN o.id %% 10 = 0 THEN 'in_progress' ELSE 'open' END,
                   'operation:' || o.id, o.event_id, o.id,
                   'create_enquiry may have been applied and the destination cannot tell.',
                   '{}'::jsonb,
                   CASE WHEN o.id %% 10 = 0 THEN %s ELSE NULL END,
                   '', '',
                   now() - ((o.id * 51) %% 5184000 || ' seconds')::interval,
                   now()
            FROM idempotency_core_operation o
            WHERE o.status = 'needs_review'
            """,
            [KINDS, owner.pk],
        )
        self._step(
            "resolved and closed cases",
            """
            INSERT INTO idempotency_core_reviewcase
                (kind, status, subject, event_id, operation_id, summary, evidence,
                 owner_id, resolution_code, resolution_note, created_at, updated_at,
                 resolved_at)
            SELECT (%s::text[])[1 + o.id %% 6],
                   CASE WHEN o.id %% 2 = 0 THEN 'resolved' ELSE 'closed' END,
                   'operation:' || o.id, o.event_id, o.id, 'Handled.', '{}'::jsonb,
                   %s, 'other', 'bench', o.created_at, now(), now()
            FROM idempotency_core_operation o
            WHERE o.status = 'succeeded'
            ORDER BY o.id
            LIMIT %s
            """,
            [KINDS, owner.pk, DONE_CASES],
        )
        with connection.cursor() as cursor:
            # What autovacuum does for a live table: statistics, and the visibility
            # map that lets counts by status use index-only scans.
            cursor.execute("VACUUM ANALYZE")
        self.stdout.write(f"Seeded in {time.monotonic() - started:.0f} s.")

    # -- measure ----------------------------------------------------------------

    def _measure(self, rounds: int) -> None:
        user_model = get_user_model()
        admin, _ = user_model.objects.get_or_create(
            username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
        )
        client = Client()
        client.force_login(admin)
        open_cases = ReviewCase.objects.filter(status__in=ReviewCase.OPEN_STATUSES)
        sample = open_cases.select_related("event", "operation").order_by("created_at", "id")[5000]
        deep_cursor = self._cursor_at_depth(client, pages=40)
        pages: list[tuple[str, str]] = [
            ("queue, default (open, oldest first)", "/console/cases/"),
            ("queue, page 41 (keyset cursor)", f"/console/cases/?after={deep_cursor}"),
            ("queue, newest first", "/console/cases/?sort=newest"),
            ("queue, kind=ambiguous_outcome", "/console/cases/?kind=ambiguous_outcome"),
            ("queue, owner=nobody, step", "/console/cases/?owner=nobody&step=create_enquiry"),
            ("queue, sorted by kind", "/console/cases/?sort=kind"),
            ("queue, opened in a 7-day range", "/console/cases/?opened_after=2026-10-01"),
            ("queue, search exact event key", f"/console/cases/?q={sample.event.key}"),
            ("queue, search operation key", f"/console/cases/?q={sample.operation.key}"),
            ("case page", f"/console/cases/{sample.pk}/"),
            ("dashboard", "/console/"),
        ]
        self.stdout.write(
            f"\n{Event.objects.count():,} events, {open_cases.count():,} open cases, "
            f"{ReviewCase.objects.count():,} cases in all. {rounds} rounds per page after 3 "
            "warm-up renders; Django test client in-process, PostgreSQL on the same 2-core "
            "machine.\n"
        )
        self.stdout.write(
            f"{'page':<40} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} {'queries':>7} "
            f"{'base p50':>8} {'ratio':>6}"
        )
        baseline_url = "/accounts/login/"
        for label, url in pages:
            # The baseline is rendered alternately with the page, round by round,
            # so both see the same machine load; the ratio is the figure to compare.
            timings, queries, base = self._time(
                lambda url=url: client.get(url), lambda: client.get(baseline_url), rounds
            )
            p50 = statistics.median(timings)
            base_p50 = statistics.median(base)
            self.stdout.write(
                f"{label:<40} {p50:>7.1f} {_percentile(timings, 95):>7.1f} "
                f"{max(timings):>7.1f} {queries:>7} {base_p50:>8.1f} {p50 / base_p50:>5.0f}x"
            )

    def _cursor_at_depth(self, client: Client, *, pages: int) -> str:
        # Follows the page's own "Next" link, as a reviewer would (no test-runner
        # instrumentation here, so the cursor is read from the HTML).
        cursor = ""
        for _ in range(pages):
            response = client.get("/console/cases/", {"after": cursor} if cursor else {})
            found = re.search(r"after=([A-Za-z0-9_-]+)", response.content.decode())
            if found is None:
                raise CommandError("the queue page has no Next link")
            cursor = found.group(1)
        return cursor

    def _time(
        self, render: Callable[[], Any], baseline: Callable[[], Any], rounds: int
    ) -> tuple[list[float], int, list[float]]:
        for _ in range(3):
            self._ok(render())
            self._ok(baseline())
        timings: list[float] = []
        base: list[float] = []
        queries = 0
        for _ in range(rounds):
            started = time.perf_counter()
            self._ok(baseline())
            base.append((time.perf_counter() - started) * 1000)
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                self._ok(render())
                timings.append((time.perf_counter() - started) * 1000)
            queries = len(captured)
        return timings, queries, base

    @staticmethod
    def _ok(response: Any) -> None:
        if response.status_code != 200:
            raise CommandError(f"{response.request['PATH_INFO']} answered {response.status_code}")


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]
