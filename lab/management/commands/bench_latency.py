"""`manage.py bench_latency`: submit-to-confirmation latency at steady rates, beside the
bare path at the same rates, and where Onefold's time goes at the last rate (the
benchmark itself: lab/bench/latency.py)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/onefold_bench_latency \\
        .venv/bin/python manage.py bench_latency [--rates 10 30 50] [--seconds 20]
"""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.bench.latency import bench_latency_measure
from lab.bench.pipeline import BenchmarkError, bench_pipeline_database_check


class Command(BaseCommand):
    help = "Times submit-to-confirmation at steady rates, beside the bare path."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rates", type=float, nargs="+", default=[10, 30, 50], help="submissions/s"
        )
        parser.add_argument("--seconds", type=float, default=20, help="how long each rate")

    def handle(self, *args: Any, rates: list[float], seconds: float, **options: Any) -> None:
        if min(rates) <= 0 or seconds <= 0:
            raise CommandError("--rates and --seconds must be positive")
        try:
            bench_pipeline_database_check()
            call_command("migrate", verbosity=0)
            bench_latency_measure(rates=rates, seconds=seconds, out=self.stdout.write)
        except BenchmarkError as exc:
            raise CommandError(str(exc)) from exc
