"""`manage.py drill`: the failure drill; exit status 0 only when every cell holds.

`--destination hubspot|salesforce|pipedrive|dataverse` runs the matrix against
that vendor's emulator (started in this process) instead of the sandbox's
profiles; a vendor whose package is not installed is a clear error, exit 2.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.drill import (
    CASES,
    PROFILES,
    Cell,
    DrillDestinationError,
    drill_destinations,
    drill_matrix,
    drill_run,
    drill_table,
)


class Command(BaseCommand):
    help = (
        "Run every interruption case under every destination capability profile against a "
        "private sandbox, and print expected and observed effects per cell."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--case", action="append", choices=sorted(CASES), dest="cases")
        parser.add_argument("--profile", action="append", choices=sorted(PROFILES), dest="profiles")
        parser.add_argument(
            "--cluster",
            action="store_true",
            help="Leave the recovery after each interruption to a real django-q2 cluster "
            "that the drill starts on a private queue (default: the engine in this process).",
        )
        parser.add_argument(
            "--destination",
            default="sandbox",
            choices=drill_destinations(),
            help="The CRM to drill: the sandbox under every profile (default), or a "
            "vendor's emulator with its adapter as configured.",
        )

    def handle(
        self,
        *args: Any,
        cases: list[str] | None,
        profiles: list[str] | None,
        cluster: bool = False,
        destination: str = "sandbox",
        **options: Any,
    ) -> None:
        columns = len(profiles or PROFILES) if destination == "sandbox" else 1
        total = len(cases or CASES) * columns
        done = 0

        def progress(cell: Cell) -> None:
            nonlocal done
            done += 1
            mark = "." if cell.holds else "F"
            self.stderr.write(
                f"\r[{done}/{total}] {mark} {cell.case} / {cell.profile}".ljust(80), ending=""
            )
            self.stderr.flush()

        # One "Enqueued" line per task would bury the progress line.
        logging.getLogger("django-q").setLevel(logging.WARNING)
        try:
            cells = drill_run(
                cases=cases,
                profiles=profiles,
                progress=progress,
                cluster=cluster,
                destination=destination,
            )
        except DrillDestinationError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        self.stderr.write("")
        self.stdout.write(drill_table(cells))
        self.stdout.write("")
        self.stdout.write(drill_matrix(cells))
        failed = [cell for cell in cells if not cell.holds]
        self.stdout.write(f"{len(cells) - len(failed)} passed, {len(failed)} failed")
        if failed:
            sys.exit(1)
