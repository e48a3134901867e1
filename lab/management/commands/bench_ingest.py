"""`manage.py bench_ingest`: Onefold's ingest beside a bare insert endpoint, and storms of
identical requests (the benchmark itself: lab/bench/ingest.py)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/onefold_bench_ingest \\
        .venv/bin/python manage.py bench_ingest [--rounds 5] [--requests 2000] [--profile DIR]
        [--compare DIR]

`--compare` serves a checkout of another commit too, in the same rounds, for a before
and after on a machine whose speed drifts between runs (its migrations must be this
checkout's: the servers share the database)::

    git worktree add /tmp/before <commit> && ln -s "$PWD/.venv" /tmp/before/.venv
    ... manage.py bench_ingest --compare /tmp/before
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.bench.ingest import (
    REPO,
    BenchmarkError,
    bench_ingest,
    bench_ingest_database_check,
    migrations_apart,
)


class Command(BaseCommand):
    help = "Times POST /api/v1/submissions/ beside a bare insert endpoint; storms of repeats."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
        parser.add_argument("--requests", type=int, default=2000, help="requests per round")
        parser.add_argument("--storms", type=int, default=20, help="storms of identical requests")
        parser.add_argument("--storm-size", type=int, default=50, help="requests per storm")
        parser.add_argument(
            "--profile", type=Path, default=None, help="also sample Onefold with py-spy into DIR"
        )
        parser.add_argument(
            "--compare",
            type=Path,
            default=None,
            help="also serve Onefold from this checkout (another commit) in the same rounds",
        )
        parser.add_argument(
            "--min-ratio",
            type=float,
            default=0.0,
            help="exit 1 when Onefold's median is below this share of the bare endpoint's",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if min(options["rounds"], options["requests"], options["storm_size"]) < 1:
            raise CommandError("--rounds, --requests and --storm-size must be positive")
        compare = options["compare"]
        if compare is not None:
            self._compare_check(compare)
        try:
            bench_ingest_database_check()
            call_command("migrate", verbosity=0)
            figures = bench_ingest(
                rounds=options["rounds"],
                requests=options["requests"],
                storms=options["storms"],
                storm_size=options["storm_size"],
                profile=options["profile"],
                out=self.stdout.write,
                compare=options["compare"],
            )
        except BenchmarkError as exc:
            raise CommandError(str(exc)) from exc
        if figures["duplicates"]:
            raise CommandError(f"{figures['duplicates']:.0f} duplicates")
        if figures["ratio"] < options["min_ratio"]:
            raise CommandError(f"ratio {figures['ratio']:.2f} is below {options['min_ratio']}")

    @staticmethod
    def _compare_check(compare: Path) -> None:
        """The other checkout is Onefold, and of this schema: its server shares the
        database."""
        if not (compare / "config" / "wsgi.py").is_file():
            raise CommandError(f"--compare {compare}: not a checkout of Onefold")
        apart = migrations_apart(REPO, compare)
        if apart:
            shown = ", ".join(apart[:5]) + (" …" if len(apart) > 5 else "")
            raise CommandError(
                f"--compare {compare}: its migrations are not this checkout's ({shown}), "
                "and the servers share one database. Run that checkout's own bench_ingest "
                "on a database of its own, alternating with this one (docs/benchmarks.md)."
            )
