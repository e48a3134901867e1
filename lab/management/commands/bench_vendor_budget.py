"""`manage.py bench_vendor_budget`: the share of a vendor's rate limit Onefold uses,
beside the bound measured in the same run (the benchmark: lab/bench/vendor_budget.py)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/onefold_bench_pipeline \\
        .venv/bin/python manage.py bench_vendor_budget [--submissions 60]
        [--limit 40] [--window 10]
"""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.bench.pipeline import BenchmarkError, bench_pipeline_database_check, sandbox_running
from lab.bench.vendor_budget import bench_vendor_budget


class Command(BaseCommand):
    help = "Times a burst through one cluster against the HubSpot emulator's lowered limit."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--submissions", type=int, default=60, help="posted at once")
        parser.add_argument("--limit", type=int, default=40, help="requests per window")
        parser.add_argument("--window", type=float, default=10.0, help="the window, seconds")

    def handle(
        self, *args: Any, submissions: int, limit: int, window: float, **options: Any
    ) -> None:
        if submissions < 1 or limit < 1 or window <= 0:
            raise CommandError("--submissions, --limit and --window must be positive")
        try:
            bench_pipeline_database_check()
            call_command("migrate", verbosity=0)
            with sandbox_running() as sandbox:
                bench_vendor_budget(
                    sandbox, count=submissions, limit=limit, window=window, out=self.stdout.write
                )
        except BenchmarkError as exc:
            raise CommandError(str(exc)) from exc
