"""`manage.py rotate_key NAME [--overlap-seconds N]`: a new API key for a source.

The new key is printed alone on the last line. The source's working keys keep
working N seconds more (default 86400), so the sender can switch without a gap,
then get 401. `--overlap-seconds 0` ends them at once (a leaked key: see also
`revoke_key`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from idempotency_core.intake.sources import SourceNotFoundError, source_api_key_rotate

DEFAULT_OVERLAP_SECONDS = 86400
# A year: beyond it an "overlap" is a second permanent key, which is not rotation.
MAX_OVERLAP_SECONDS = 366 * 86400


class Command(BaseCommand):
    help = (
        "Issue a new API key for a source; its current keys keep working --overlap-seconds "
        "(default 86400), then are refused. Prints the new key alone on the last line."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument(
            "--overlap-seconds",
            type=int,
            default=DEFAULT_OVERLAP_SECONDS,
            help="How long the current keys keep working (0: not at all).",
        )

    def handle(self, *args: Any, name: str, overlap_seconds: int, **options: Any) -> None:
        if not 0 <= overlap_seconds <= MAX_OVERLAP_SECONDS:
            raise CommandError(
                f"--overlap-seconds is between 0 and {MAX_OVERLAP_SECONDS}, not {overlap_seconds}."
            )
        try:
            rotation = source_api_key_rotate(name=name, overlap=timedelta(seconds=overlap_seconds))
        except SourceNotFoundError as exc:
            raise CommandError(f"{exc} Create it with `manage.py create_source {name}`.") from exc
        for prefix, ends in rotation.retiring:
            self.stdout.write(f"Old key {prefix}… works until {ends:%Y-%m-%d %H:%M:%S} UTC.")
        if not rotation.retiring:
            self.stdout.write("The source had no working key.")
        self.stdout.write(f"New API key for {name!r} (shown once):")
        self.stdout.write(rotation.key)
