"""`manage.py demo_setup [--new-credentials]`: the quick start's demo source and staff user.

Creates them if absent and prints their credentials then, the only time they
exist in clear. `--new-credentials` gives existing ones a new API key and a new
password and prints those: the way back in when the first ones are lost.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from idempotency_core.demo import demo_setup


class Command(BaseCommand):
    help = (
        "Create the demo source and staff user if absent, printing their credentials; "
        "--new-credentials issues new ones (the old key and password stop working)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--new-credentials",
            action="store_true",
            help="A new API key for the demo source and a new password for the demo user.",
        )

    def handle(self, *args: Any, new_credentials: bool, **options: Any) -> None:
        made = demo_setup(new_credentials=new_credentials)
        if made.api_key:
            self.stdout.write(f"Demo source {made.source!r} API key: {made.api_key}")
        else:
            self.stdout.write(f"Demo source {made.source!r} exists (its key was printed once).")
        if made.password:
            self.stdout.write(f"Staff user {made.username!r} password: {made.password}")
        else:
            self.stdout.write(
                f"Staff user {made.username!r} exists (its password was printed once)."
            )
        if made.api_key:
            self.stdout.write(f"KEY={made.api_key}")
        if not (made.api_key and made.password):
            self.stdout.write("New ones: manage.py demo_setup --new-credentials")
