"""`manage.py bench_pipeline`: submissions fully processed per second by real worker
clusters, beside a bare client driving the same effects into the sandbox (the
benchmark itself: lab/bench/pipeline.py)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/onefold_bench_pipeline \\
        .venv/bin/python manage.py bench_pipeline [--submissions 300] [--clusters 1 2]
        [--rounds 1] [--poll 0.05 0.2 1] [--in-process [--profile FILE]]
        [--without-queue]
"""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.bench.pipeline import (
    BenchmarkError,
    bench_pipeline_database_check,
    bench_pipeline_in_process,
    bench_pipeline_measure,
    bench_pipeline_poll,
)


class Command(BaseCommand):
    help = "Times a burst of submissions through real worker clusters, beside a bare client."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--submissions", type=int, default=300, help="posted at once")
        parser.add_argument(
            "--clusters", type=int, nargs="+", default=[1, 2], help="worker clusters per run"
        )
        parser.add_argument("--rounds", type=int, default=1, help="rounds per figure (median)")
        parser.add_argument(
            "--poll",
            type=float,
            nargs="*",
            default=[],
            help="also measure these poll intervals (seconds), one cluster each",
        )
        parser.add_argument(
            "--in-process",
            action="store_true",
            help="instead: the pipelines one after the other in this process, its CPU alone",
        )
        parser.add_argument(
            "--profile", metavar="FILE", help="with --in-process: cProfile's statistics here"
        )
        parser.add_argument(
            "--without-queue",
            action="store_true",
            help="instead of the clusters: the same chains in as many plain processes as "
            "they have workers, no django-q2 (the engine's own ceiling)",
        )

    def handle(
        self,
        *args: Any,
        submissions: int,
        clusters: list[int],
        rounds: int,
        poll: list[float],
        in_process: bool,
        profile: str | None,
        without_queue: bool,
        **options: Any,
    ) -> None:
        if submissions < 1 or rounds < 1 or min(clusters) < 1 or any(p <= 0 for p in poll):
            raise CommandError("--submissions, --rounds, --clusters and --poll must be positive")
        try:
            bench_pipeline_database_check()
            call_command("migrate", verbosity=0)
            if in_process:
                bench_pipeline_in_process(
                    count=submissions, rounds=rounds, out=self.stdout.write, profile=profile
                )
                return
            bench_pipeline_measure(
                count=submissions,
                clusters=clusters,
                rounds=rounds,
                out=self.stdout.write,
                without_queue=without_queue,
            )
            if poll:
                bench_pipeline_poll(polls=poll, count=submissions, out=self.stdout.write)
        except BenchmarkError as exc:
            raise CommandError(str(exc)) from exc
