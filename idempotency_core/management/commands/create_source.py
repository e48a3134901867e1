"""`manage.py create_source NAME`: creates the source if absent and prints how to send.

With the default profile `api`, the last line is a new API key. With a sender's
profile (CONTRACT.md, "Senders"), the last line is the hook's path, alone; the
signing secret (or the token inside the path) is printed once, before it.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from idempotency_core.execution.steps import InvalidPipelineError, pipeline_validate
from idempotency_core.intake.senders.profiles import API, PROFILE_NAMES
from idempotency_core.intake.sources import (
    InvalidProfileError,
    source_create_with_key,
    source_get_or_create,
    source_hook_configure,
    source_pipeline_set,
)


class Command(BaseCommand):
    help = (
        "Create a source (if absent). Prints a new API key alone on the last line, or, "
        "with --profile, the hook's path."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument(
            "--pipeline",
            help="Comma-separated steps for every form, e.g. create_enquiry,send_confirmation "
            "(default create_enquiry,assign_task,send_confirmation).",
        )
        parser.add_argument(
            "--profile", default=API, choices=PROFILE_NAMES, help="How the sender posts."
        )
        parser.add_argument(
            "--secret",
            action="append",
            default=[],
            help="The sender's signing secret; twice while rotating (both verify). "
            "A signing profile without one gets a new random secret.",
        )
        parser.add_argument("--form", default="", help="Form name when a delivery names none.")
        parser.add_argument("--thank-you", default="", help="Where html forms land (303).")
        parser.add_argument("--duplicates", default="flag", choices=("flag", "hold"))

    def handle(self, *args: Any, name: str, pipeline: str | None, **options: Any) -> None:
        steps = [s.strip() for s in (pipeline or "").split(",") if s.strip()]
        if pipeline:
            try:
                pipeline_validate(steps)  # before anything is created
            except InvalidPipelineError as exc:
                raise CommandError(str(exc)) from exc
        if options["duplicates"] == "hold":
            # Not built yet (the reviewer-experience issue): refusing beats pretending.
            raise CommandError("--duplicates hold is not available yet; use flag.")
        if options["profile"] == API:
            source, created, key = source_create_with_key(name=name)
        else:
            source, created = source_get_or_create(name=name)
        if steps:
            source_pipeline_set(source=source, steps=steps)
            self.stdout.write(f"Pipeline: {' -> '.join(steps)}")
        verb = "Created" if created else "Found"
        if options["profile"] == API:
            self.stdout.write(f"{verb} source {source.name!r}. New API key (shown once):")
            self.stdout.write(key)
            return
        try:
            setup = source_hook_configure(
                source=source,
                profile=options["profile"],
                secrets=options["secret"],
                form=options["form"],
                thank_you_url=options["thank_you"],
                duplicates=options["duplicates"],
            )
        except InvalidProfileError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{verb} source {source.name!r} with profile {options['profile']}.")
        for number, secret in enumerate(setup.secrets, 1):
            self.stdout.write(f"Signing secret {number} (shown once): {secret}")
        if setup.token:
            self.stdout.write("The hook's path carries its token (shown once); post to:")
        else:
            self.stdout.write("Post to:")
        self.stdout.write(setup.path)
