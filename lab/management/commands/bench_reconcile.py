"""`manage.py bench_reconcile`: reconcile a million events and say how fast, in how much memory.

Run it on a database of its own; it empties Onefold's tables there (the
benchmark, its seed and what it measures: lab/bench/reconcile.py)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/onefold_bench_recon \\
        .venv/bin/python manage.py ensure_database
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/onefold_bench_recon \\
        .venv/bin/python manage.py migrate
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/onefold_bench_recon \\
        .venv/bin/python manage.py bench_reconcile --events 1000000
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.bench.reconcile import (
    BenchmarkError,
    bench_reconcile,
    bench_reconcile_database_check,
    bench_reconcile_report,
)


class Command(BaseCommand):
    help = "Benchmark reconciliation: seed N events and matching CRM records, reconcile, report."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--events", type=int, default=1_000_000)
        parser.add_argument(
            "--baseline", type=int, default=100_000, help="Smaller size measured first (0: none)."
        )
        parser.add_argument("--rounds", type=int, default=1, help="Reconcile runs per size.")
        parser.add_argument(
            "--force", action="store_true", help="Allow a database whose name lacks 'bench'."
        )

    def handle(
        self, *args: Any, events: int, baseline: int, rounds: int, force: bool, **options: Any
    ) -> None:
        try:
            bench_reconcile_database_check(force=force)
            results = bench_reconcile(
                sizes=[n for n in (baseline, events) if n > 0],
                rounds=rounds,
                progress=self.stderr.write,
            )
        except BenchmarkError as exc:
            raise CommandError(str(exc)) from exc
        for line in bench_reconcile_report(results):
            self.stdout.write(line)
