"""`manage.py create_source NAME`: creates the source and prints how to send."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from idempotency_core.execution.steps import InvalidPipelineError, pipeline_validate
from idempotency_core.intake.senders.captcha import PROVIDERS as CAPTCHA_PROVIDERS
from idempotency_core.intake.senders.profiles import API, PROFILE_NAMES
from idempotency_core.intake.sources import (
    HookSetup,
    InvalidProfileError,
    SourceExistsError,
    source_api_key_issue,
    source_create,
    source_duplicates_set,
    source_hook_configure,
    source_pipeline_set,
    thank_you_url_check,
)
from idempotency_core.models import Source


class Command(BaseCommand):
    help = (
        "Create a source. Prints its API key alone on the last line, or, with --profile, "
        "the hook's path. An existing source is refused: see rotate_key."
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
        parser.add_argument(
            "--thank-you",
            default="",
            help="Where html forms land (303): an absolute https:// URL (http:// only on "
            "localhost).",
        )
        parser.add_argument(
            "--captcha",
            default="",
            choices=("", *CAPTCHA_PROVIDERS),
            help="html profile only: require this CAPTCHA's token in every submission, "
            "checked by the provider's siteverify before anything is stored.",
        )
        parser.add_argument(
            "--captcha-secret",
            default="",
            help="The CAPTCHA's secret key (from the provider's dashboard), for siteverify.",
        )
        parser.add_argument(
            "--duplicates",
            default="flag",
            choices=("flag", "hold"),
            help="Same contact, form and message again within ONEFOLD_DUPLICATE_WINDOW_SECONDS: "
            "flag (both written, a case offers a merge) or hold (the later one waits, "
            "unwritten, for a reviewer's 'same' or 'separate enquiry').",
        )

    def handle(self, *args: Any, name: str, pipeline: str | None, **options: Any) -> None:
        if (options["captcha"] or options["captcha_secret"]) and options["profile"] != "html":
            raise CommandError("--captcha is for the html profile (a form in a browser).")
        steps = [s.strip() for s in (pipeline or "").split(",") if s.strip()]
        # Both checked before anything is created.
        try:
            if pipeline:
                pipeline_validate(steps)
            thank_you_url_check(options["thank_you"])
        except (InvalidPipelineError, InvalidProfileError) as exc:
            raise CommandError(str(exc)) from exc
        try:
            # One transaction: a refused secret leaves no half-made source behind, which
            # a second run would then refuse as existing.
            with transaction.atomic():
                source = source_create(name=name)
                if steps:
                    source_pipeline_set(source=source, steps=steps)
                if options["profile"] == API:
                    source_duplicates_set(source=source, policy=options["duplicates"])
                    key = source_api_key_issue(source=source)
                else:
                    setup = _configure(source, options)
        except (SourceExistsError, InvalidProfileError) as exc:
            raise CommandError(str(exc)) from exc
        if steps:
            self.stdout.write(f"Pipeline: {' -> '.join(steps)}")
        if options["duplicates"] == "hold":
            self.stdout.write(
                "Suspected duplicates: held before the CRM write until a reviewer decides."
            )
        if options["profile"] == API:
            self.stdout.write(f"Created source {source.name!r}. New API key (shown once):")
            self.stdout.write(key)
            return
        self.stdout.write(f"Created source {source.name!r} with profile {options['profile']}.")
        if source.captcha_provider:
            provider = CAPTCHA_PROVIDERS[source.captcha_provider]
            self.stdout.write(
                f"CAPTCHA required: {provider.label}, its token in the form field "
                f"{provider.field}, checked by siteverify before anything is stored."
            )
        for number, secret in enumerate(setup.secrets, 1):
            self.stdout.write(f"Signing secret {number} (shown once): {secret}")
        if setup.token:
            self.stdout.write("The hook's path carries its token (shown once); post to:")
        else:
            self.stdout.write("Post to:")
        self.stdout.write(setup.path)


def _configure(source: Source, options: dict[str, Any]) -> HookSetup:
    return source_hook_configure(
        source=source,
        profile=options["profile"],
        secrets=options["secret"],
        form=options["form"],
        thank_you_url=options["thank_you"],
        duplicates=options["duplicates"],
        captcha=options["captcha"],
        captcha_secret=options["captcha_secret"],
    )
