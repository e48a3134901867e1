"""`manage.py revoke_key PREFIX`: stops an API key at once (401 from then on).

PREFIX is the key's first characters as `create_source` and `rotate_key` print
them (or the whole key). No key with it: exit 1. Several working keys with it:
exit 1, listing them, and nothing is revoked.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from idempotency_core.intake.sources import (
    ApiKeyAmbiguousError,
    ApiKeyNotFoundError,
    api_key_revoke,
)


class Command(BaseCommand):
    help = "Revoke the API key that starts with PREFIX, at once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: Any, prefix: str, **options: Any) -> None:
        try:
            revocation = api_key_revoke(prefix=prefix)
        except ApiKeyNotFoundError as exc:
            raise CommandError(str(exc)) from exc
        except ApiKeyAmbiguousError as exc:
            listed = "\n".join(
                f"  {key.prefix}…  source {key.source.name!r}, created "
                f"{key.created_at:%Y-%m-%d %H:%M:%S} UTC"
                for key in exc.matches
            )
            raise CommandError(f"{exc} Matches:\n{listed}") from exc
        if not revocation.was_working:
            self.stdout.write(
                f"Key {revocation.prefix}… of {revocation.source_name!r} had already stopped "
                f"working ({revocation.revoked_at:%Y-%m-%d %H:%M:%S} UTC); nothing changed."
            )
            return
        self.stdout.write(
            f"Revoked key {revocation.prefix}… of {revocation.source_name!r} at "
            f"{revocation.revoked_at:%Y-%m-%d %H:%M:%S} UTC; it is refused (401) from now on."
        )
