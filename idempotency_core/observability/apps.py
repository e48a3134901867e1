"""App config: the ids on a worker's log lines and the system check for /metrics."""

from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "idempotency_core.observability"
    label = "observability"
    verbose_name = "Onefold observability"

    def ready(self) -> None:
        from django_q.signals import post_execute_in_worker, pre_execute

        from idempotency_core.observability import checks  # noqa: F401  (registers the check)
        from idempotency_core.observability.logcontext import task_finished, task_started

        pre_execute.connect(task_started, dispatch_uid="onefold-log-ids-start")
        post_execute_in_worker.connect(task_finished, dispatch_uid="onefold-log-ids-end")
