"""`manage.py bench_console`: seed a million events in a bench database and time the
console's pages (the benchmark itself: lab/bench/console.py)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/onefold_bench_console \\
        .venv/bin/python manage.py bench_console [--rounds 40] [--reseed] [--events 1000000]
"""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.bench.console import (
    EVENTS,
    BenchmarkError,
    bench_console_database_check,
    bench_console_measure,
    bench_console_seed,
)


class Command(BaseCommand):
    help = "Seeds a million events in a bench database and times the console's queue page."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rounds", type=int, default=40, help="timed renders per page")
        parser.add_argument("--reseed", action="store_true", help="truncate and seed again")
        parser.add_argument(
            "--events",
            type=int,
            default=EVENTS,
            help="events to seed, a tenth of them with an open case (smaller: a quick check, "
            "not a figure to compare)",
        )

    def handle(self, *args: Any, rounds: int, reseed: bool, events: int, **options: Any) -> None:
        if events < 1 or rounds < 1:
            raise CommandError("--events and --rounds must be positive")
        try:
            bench_console_database_check()
            call_command("migrate", verbosity=0)
            bench_console_seed(events=events, reseed=reseed, out=self.stdout.write)
            bench_console_measure(rounds=rounds, out=self.stdout.write)
        except BenchmarkError as exc:
            raise CommandError(str(exc)) from exc
