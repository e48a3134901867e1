"""`manage.py person export|erase --email ADDRESS`: a person's requests about their data.

- `export` prints one JSON document with everything Onefold holds about the address;
  exit 1 with "no data" when there is none.
- `erase --reason TEXT [--crm] [--dry-run]` removes the person's data from every table
  that holds it, keeps keys, fingerprints, statuses and decisions, and prints what was
  removed; `--crm` also deletes the person at the CRM, once (idempotency_core/privacy/).

Both are audited by a keyed digest of the address, under the operating-system user
who ran them; the address itself is never written to the audit trail.
"""

from __future__ import annotations

import getpass
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.serializers.json import DjangoJSONEncoder

from idempotency_core.privacy.crm import crm_erasures_run
from idempotency_core.privacy.erasure import (
    ErasureReport,
    PersonBusyError,
    PersonNotFoundError,
    person_erase,
    person_erase_preview,
)
from idempotency_core.privacy.export import person_export


class Command(BaseCommand):
    help = "Export or erase everything Onefold holds about one email address."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        export = actions.add_parser("export", help="Print the person's data as JSON.")
        export.add_argument("--email", required=True)
        erase = actions.add_parser("erase", help="Erase the person's data.")
        erase.add_argument("--email", required=True)
        erase.add_argument("--reason", required=True, help="Why (the request), for the audit.")
        erase.add_argument(
            "--crm", action="store_true", help="Also delete the person at the CRM (once)."
        )
        erase.add_argument(
            "--dry-run", action="store_true", help="Count what would go; change nothing."
        )

    def handle(self, *args: Any, action: str, email: str, **options: Any) -> None:
        system = f"person {action} (os user {getpass.getuser()})"
        if action == "export":
            document = person_export(address=email, system=system)
            if document is None:
                raise CommandError("no data")
            self.stdout.write(json.dumps(document, cls=DjangoJSONEncoder, indent=2))
            return
        if not options["reason"].strip():
            raise CommandError("--reason must say why (the request)")
        self._erase(email, system=system, **options)

    def _erase(
        self, email: str, *, system: str, reason: str, crm: bool, dry_run: bool, **_: Any
    ) -> None:
        try:
            if dry_run:
                preview = person_erase_preview(address=email, reason=reason, crm=crm)
                self._summary(preview, verb="would remove")
                return
            report = person_erase(address=email, reason=reason, system=system, crm=crm)
        except (PersonNotFoundError, PersonBusyError) as exc:
            raise CommandError(str(exc)) from exc
        self._summary(report, verb="removed")
        if report.crm_operations:
            statuses = crm_erasures_run(list(report.crm_operations))
            for operation_id, status in statuses.items():
                self.stdout.write(f"CRM deletion (operation {operation_id}): {status}")

    def _summary(self, report: ErasureReport, *, verb: str) -> None:
        self.stdout.write(f"{report.events} submissions of the person (digest {report.digest})")
        for what, count in report.removed.items():
            self.stdout.write(f"{verb} {count} {what}")
        if verb == "removed":
            self.stdout.write(f"audit entry person_erased: {report.entry_id}")
        elif report.crm_operations:
            self.stdout.write(
                f"would ask the CRM to delete the person ({len(report.crm_operations)} enquiries)"
            )
