"""`manage.py create_source NAME`: creates the source if absent and issues an API key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from idempotency_core.sources import source_create_with_key


class Command(BaseCommand):
    help = "Create a source (if absent) and print a new API key alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, name: str, **options: Any) -> None:
        source, created, key = source_create_with_key(name=name)
        verb = "Created" if created else "Found"
        self.stdout.write(f"{verb} source {source.name!r}. New API key (shown once):")
        self.stdout.write(key)
