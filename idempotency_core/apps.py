"""App config: registers Onefold's system checks."""

from django.apps import AppConfig


class IdempotencyCoreConfig(AppConfig):
    name = "idempotency_core"
    verbose_name = "Onefold core"

    def ready(self) -> None:
        from idempotency_core import checks  # noqa: F401  (registers the checks)
