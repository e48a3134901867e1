"""App config for the staff review console."""

from django.apps import AppConfig


class ReviewConsoleConfig(AppConfig):
    name = "review_console"
    verbose_name = "Review console"
