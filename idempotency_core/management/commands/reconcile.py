"""`manage.py reconcile`: compare a period's events with the CRM's records (docs/operations.md).

A progress bar goes to stderr and a summary table to stdout; with --json,
stdout carries exactly one JSON object and nothing else. Running the same
command again after an interruption resumes the unfinished run of that period
(or name it with --resume RUN_ID).
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from idempotency_core.management.instants import parse_instant
from idempotency_core.models import Destination, ReconciliationRun, Source
from idempotency_core.reconciliation.compare import (
    FINDING_KINDS,
    Progress,
    ReconciliationError,
    reconcile,
    run_summary,
)


class ProgressBar:
    """One self-rewriting line on a terminal; a line every few pages otherwise."""

    def __init__(self, stream: OutputWrapper, *, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.last_line = 0.0

    def __call__(self, progress: Progress) -> None:
        if not self.enabled:
            return
        elapsed = max(time.monotonic() - self.started, 1e-6)
        width = 30
        filled = int(width * progress.fraction)
        line = (
            f"run {progress.run.pk} {progress.phase:<9} "
            f"[{'#' * filled}{'.' * (width - filled)}] {progress.fraction:4.0%} "
            f"pages {progress.pages} records {progress.records} "
            f"({progress.records / elapsed:,.0f}/s)"
        )
        if self.tty:
            self.stream.write("\r" + line, ending="")
            self.stream.flush()
        elif time.monotonic() - self.last_line >= 2 or progress.phase != "listing":
            self.stream.write(line)
            self.stream.flush()
            self.last_line = time.monotonic()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("")
            self.stream.flush()


class Command(BaseCommand):
    help = (
        "Compare the events of a period with the CRM destination's records; "
        "every mismatch becomes a review case."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", help="Start of the period (ISO 8601, inclusive).")
        parser.add_argument("--until", help="End of the period (ISO 8601, exclusive).")
        parser.add_argument("--source", help="Only this source's events (and its CRM).")
        parser.add_argument(
            "--destination",
            help="The CRM destination to list (default: the source's CRM, else 'crm').",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Compute and print; open no cases."
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object only.")
        parser.add_argument("--resume", type=int, metavar="RUN_ID", help="Continue this run.")
        parser.add_argument("--no-progress", action="store_true", help="No progress on stderr.")

    def handle(self, *args: Any, **options: Any) -> None:
        source = destination = since = until = None
        if options["resume"] is None:
            if not options["since"] or not options["until"]:
                raise CommandError("--since and --until are required (or --resume RUN_ID)")
            try:
                since, until = parse_instant(options["since"]), parse_instant(options["until"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        if options["source"]:
            source = Source.objects.filter(name=options["source"]).first()
            if source is None:
                raise CommandError(f"no source named {options['source']}")
        if options["destination"]:
            destination = Destination.objects.filter(name=options["destination"]).first()
            if destination is None:
                raise CommandError(f"no destination named {options['destination']}")
        bar = ProgressBar(self.stderr, enabled=not options["no_progress"])
        try:
            run = reconcile(
                since=since,
                until=until,
                source=source,
                destination=destination,
                dry_run=options["dry_run"],
                resume_run_id=options["resume"],
                progress=bar,
            )
        except ReconciliationError as exc:
            raise CommandError(str(exc)) from None
        finally:
            bar.close()
        if options["json"]:
            self.stdout.write(json.dumps(run_summary(run)))
            return
        self._table(run)

    def _table(self, run: ReconciliationRun) -> None:
        seconds = (run.finished_at - run.started_at).total_seconds() if run.finished_at else 0
        scope = run.source.name if run.source else "all sources"
        self.stdout.write(
            f"Reconciliation run {run.pk}{' (dry run)' if run.dry_run else ''}: "
            f"{run.since:%Y-%m-%d %H:%M:%S} to {run.until:%Y-%m-%d %H:%M:%S}, "
            f"{scope}, destination {run.destination.name}"
        )
        self.stdout.write(
            f"  events {run.events_count or 0}, destination records {run.records_staged}, "
            f"pages {run.pages_fetched}, {seconds:.1f} s since the run started"
        )
        new_label = "would open" if run.dry_run else "new cases"
        self.stdout.write(f"  {'finding':<10} {'found':>8} {new_label:>10}")
        for kind in FINDING_KINDS:
            self.stdout.write(
                f"  {kind:<10} {run.findings_total.get(kind, 0):>8} "
                f"{run.findings_new.get(kind, 0):>10}"
            )
        self.stdout.write(
            f"  {'total':<10} {sum(run.findings_total.values()):>8} "
            f"{sum(run.findings_new.values()):>10}"
        )
