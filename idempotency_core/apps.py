"""App config: registers Onefold's system checks, and verifies destinations as workers start."""

from django.apps import AppConfig


class IdempotencyCoreConfig(AppConfig):
    name = "idempotency_core"
    verbose_name = "Onefold core"

    def ready(self) -> None:
        from django_q.signals import post_spawn

        from idempotency_core import checks  # noqa: F401  (registers the checks)
        from idempotency_core.execution.destinations import destinations_verify_all

        # Each worker process verifies the destinations in use as it starts
        # (logged; a refused one is refused again when a step would use it).
        post_spawn.connect(destinations_verify_all, dispatch_uid="onefold-verify-destinations")
