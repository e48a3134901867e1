"""App config for the staff review console."""

from django.apps import AppConfig


class ReviewConsoleConfig(AppConfig):
    name = "review_console"
    verbose_name = "Review console"

    def ready(self) -> None:
        # Notifications name a case's kind in the console's words; the core never
        # imports the console, so the console hands them over.
        from idempotency_core.review.notice_content import KIND_WORDS
        from review_console.glossary import CASE_KINDS

        KIND_WORDS.update(CASE_KINDS)
