"""`manage.py check_upgrade`: a database upgraded from 0.1.0 equals a new install's.

Builds two throwaway databases on the configured server (lab/upgrade_check.py says
how), compares their schemas and seeded rows, and exits 1 naming every difference.
`--from COMMIT`: the old migrations of another commit than 0.1.0's last.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.upgrade_check import UpgradeCheckError, upgrade_check


class Command(BaseCommand):
    help = (
        "Migrate one new database, and one from 0.1.0's migrations then this checkout's; "
        "compare their schemas and seeded rows."
    )
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="old_commit", help="a commit with the old migrations")
        parser.add_argument("--keep", action="store_true", help="keep both databases")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            report = upgrade_check(
                repo=Path(settings.BASE_DIR),
                old_commit=options["old_commit"],
                keep=options["keep"],
                say=self.stdout.write,
            )
        except UpgradeCheckError as error:
            raise CommandError(str(error)) from error
        for difference in report.differences:
            self.stdout.write(difference)
        compared = ", ".join(f"{count} {what}" for what, count in report.rows.items())
        summary = f"{report.schema_objects} schema objects, {compared}"
        if report.differences:
            raise CommandError(f"{len(report.differences)} differences ({summary})")
        self.stdout.write(f"the same: {summary} (0.1.0 at {report.old_commit[:12]})")
