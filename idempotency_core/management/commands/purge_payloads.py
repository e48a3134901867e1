"""`manage.py purge_payloads`: null event payloads past ONEFOLD_PAYLOAD_RETENTION_DAYS.

Keys, fingerprints and every record of what happened stay (retention.py).
Daily by django-q2 schedule; run by hand with --dry-run to see what would go.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from idempotency_core.reconciliation.retention import payloads_purge


class Command(BaseCommand):
    help = "Purge event payloads older than the payload retention period (keeps keys)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Count only; purge nothing.")
        parser.add_argument("--batch-size", type=int, default=1000, help="Events per UPDATE.")

    def handle(self, *args: Any, dry_run: bool, batch_size: int, **options: Any) -> None:
        def progress(done: int, total: int) -> None:
            self.stderr.write(f"\rpurged {done}/{total}", ending="")
            self.stderr.flush()

        report = payloads_purge(dry_run=dry_run, batch_size=max(1, batch_size), progress=progress)
        if report.purged:
            self.stderr.write("")
        verb = "would purge" if dry_run else "purged"
        self.stdout.write(
            f"{verb} {report.candidates if dry_run else report.purged} payloads of events "
            f"received before {report.cutoff:%Y-%m-%d %H:%M:%S} "
            f"(retention {settings.ONEFOLD_PAYLOAD_RETENTION_DAYS} days)"
        )
