"""`manage.py check_destinations`: each declared capability, checked against the destination."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from idempotency_core.execution.destinations import (
    destination_checks,
    destination_name_checks,
    destinations_in_use,
    kind_of,
)
from idempotency_core.models import Destination


class Command(BaseCommand):
    help = (
        "Check every destination in use (the default crm and email, and those active "
        "sources name) against the live service: one line per declared capability."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "names",
            nargs="*",
            metavar="NAME",
            help="Destinations to check (default: every destination in use).",
        )

    def handle(self, *args: Any, names: list[str], **options: Any) -> None:
        if names:
            destinations = list(Destination.objects.filter(name__in=names).order_by("name"))
            unknown = sorted(set(names) - {d.name for d in destinations})
            if unknown:
                raise CommandError(f"no such destination: {', '.join(unknown)}")
        else:
            destinations = destinations_in_use()
        refused = []
        for destination in destinations:
            checks = destination_checks(destination)
            kind = kind_of(destination)
            if not checks:
                self.stdout.write(
                    f"{destination.name}\t-\tverified\t{kind}: declares no recovery capability"
                )
            reachable = all(check.capability != "reachable" for check in checks)
            # A CRM that could not be reached is asked nothing more.
            checks = checks + (destination_name_checks(destination) if reachable else [])
            for check in checks:
                verdict = "verified" if check.verified else "refused"
                self.stdout.write(f"{destination.name}\t{check.capability}\t{verdict}\t{check.how}")
            if any(not check.verified for check in checks):
                refused.append(destination.name)
        if refused:
            raise CommandError(f"refused: {', '.join(refused)}", returncode=1)
