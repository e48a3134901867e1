"""`manage.py bench_instructions`: the instructions an ingest request and a worker's
chain execute, counted by valgrind's callgrind (lab/bench/instructions.py); beside
ingest, `bench_ingest`'s two baselines (`bare`, `service`), which split a request's
instructions into the bare server's, the service's and the API's own::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/onefold_bench_pipeline \\
        .venv/bin/python manage.py bench_instructions [--kind ingest bare service pipeline]
        [--count 30] [--compare DIR]

`--compare` counts a checkout of another commit too, on the same database (its
migrations must be this checkout's), for a before and after that the machine's load
does not move::

    git worktree add /tmp/before <commit>
    ... manage.py bench_instructions --compare /tmp/before
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.bench.instructions import KINDS, InstructionsError, bench_instructions


class Command(BaseCommand):
    help = (
        "Counts the instructions of ingest requests, their baselines and worker chains (valgrind)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--kind", nargs="+", choices=KINDS, default=list(KINDS))
        parser.add_argument(
            "--count", type=int, default=30, help="counted after as many warm-ups, per kind"
        )
        parser.add_argument(
            "--compare", type=Path, default=None, help="also count this checkout (another commit)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["count"] < 1:
            raise CommandError("--count must be positive")
        compare = options["compare"]
        if compare is not None and not (compare / "config" / "wsgi.py").is_file():
            raise CommandError(f"--compare {compare}: not a checkout of Onefold")
        try:
            bench_instructions(
                kinds=tuple(options["kind"]),
                count=options["count"],
                compare=compare.resolve() if compare is not None else None,
                out=lambda line: self.stdout.write(line, ending="\n"),
            )
        except InstructionsError as exc:
            raise CommandError(str(exc)) from exc
