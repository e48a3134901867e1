"""`manage.py remap --source NAME --since ISO [--dry-run]`: re-run a corrected field map.

Unreadable submissions kept since then that the map now reads are admitted: they run
as ordinary submissions under their original keys (intake/remap.py)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from idempotency_core.intake.remap import events_remap
from idempotency_core.management.instants import parse_instant
from idempotency_core.models import Source


class Command(BaseCommand):
    help = (
        "Re-run a source's field map over the deliveries it kept; an enquiry already in "
        "the CRM is updated, never created twice, and an unreadable submission the map now "
        "reads is processed under its original key. --dry-run shows what would change."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--source", required=True)
        parser.add_argument("--since", required=True, help="ISO date or date-time.")
        parser.add_argument("--dry-run", action="store_true")

    def handle(self, *args: Any, source: str, since: str, dry_run: bool, **options: Any) -> None:
        found = Source.objects.filter(name=source).first()
        if found is None:
            raise CommandError(f"No source {source!r}.")
        if found.profile == "api":
            raise CommandError(f"{source!r} posts the JSON API: it has no field map to re-run.")
        try:
            start = parse_instant(since)
        except ValueError:
            raise CommandError(f"--since {since!r} is not an ISO date or date-time.") from None
        changes = errors = 0

        def progress(number: int) -> None:
            if number % 1000 == 0:
                self.stderr.write(f"… {number} events read")

        for change in events_remap(source=found, since=start, dry_run=dry_run, progress=progress):
            if change.error:
                errors += 1
                self.stdout.write(f"{change.key}: cannot re-map ({change.error})")
                continue
            changes += 1
            if change.repeat_of:
                verb = "would be settled" if dry_run else "settled"
                self.stdout.write(
                    f"{change.key}: the same delivery as event {change.repeat_of}, {verb} "
                    "as a repeat of it"
                )
                continue
            if change.admitted:
                verb = "would be processed" if dry_run else "processed, first step queued"
                self.stdout.write(f"{change.key}: unreadable until now, {verb}")
                continue
            update = (
                f"; CRM record updated by operation {change.update_operation_id}"
                if change.update_operation_id
                else ""
            )
            verb = "would change" if dry_run else "changed"
            self.stdout.write(f"{change.key}: {verb} {', '.join(change.changed)}{update}")
        what = "would change" if dry_run else "changed"
        self.stdout.write(f"{changes} event(s) {what}, {errors} could not be re-mapped.")
