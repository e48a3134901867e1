"""`manage.py create_source NAME`: creates the source if absent and issues an API key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from idempotency_core.execution.steps import InvalidPipelineError, pipeline_validate
from idempotency_core.intake.sources import source_create_with_key, source_pipeline_set


class Command(BaseCommand):
    help = "Create a source (if absent) and print a new API key alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument(
            "--pipeline",
            help="Comma-separated steps for every form, e.g. create_enquiry,send_confirmation "
            "(default create_enquiry,assign_task,send_confirmation).",
        )

    def handle(self, *args: Any, name: str, pipeline: str | None, **options: Any) -> None:
        steps = [s.strip() for s in (pipeline or "").split(",") if s.strip()]
        if pipeline:
            try:
                pipeline_validate(steps)  # before anything is created
            except InvalidPipelineError as exc:
                raise CommandError(str(exc)) from exc
        source, created, key = source_create_with_key(name=name)
        if steps:
            source_pipeline_set(source=source, steps=steps)
            self.stdout.write(f"Pipeline: {' -> '.join(steps)}")
        verb = "Created" if created else "Found"
        self.stdout.write(f"{verb} source {source.name!r}. New API key (shown once):")
        self.stdout.write(key)
