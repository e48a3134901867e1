"""System checks that refuse settings under which Onefold would be unsafe to run."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder


@register(Tags.compatibility)
def check_task_queue_timings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    q = settings.Q_CLUSTER
    errors: list[CheckMessage] = []
    workers = int(q.get("workers", 1))
    timeout = q.get("timeout")
    retry = q.get("retry")
    queue_limit = q.get("queue_limit", workers)
    if timeout is None or retry is None:
        return [Error("Q_CLUSTER needs both 'timeout' and 'retry'.", id="onefold.E001")]
    floor = timeout * (1 + math.ceil((queue_limit + 1) / workers))
    if retry <= floor:
        errors.append(
            Error(
                f"Q_CLUSTER retry={retry}s must exceed timeout x (1 + ceil((queue_limit+1)/"
                f"workers)) = {floor}s, or a queued task is handed out twice.",
                hint="Raise ONEFOLD_Q_RETRY or lower ONEFOLD_Q_TIMEOUT.",
                id="onefold.E002",
            )
        )
    if q.get("bulk", 1) != 1:
        errors.append(Error("Q_CLUSTER bulk must be 1.", id="onefold.E003"))
    if queue_limit > workers:
        errors.append(Error("Q_CLUSTER queue_limit must not exceed workers.", id="onefold.E004"))
    lease = settings.ONEFOLD_LEASE_SECONDS
    if lease <= timeout:
        errors.append(
            Error(
                f"ONEFOLD_LEASE_SECONDS={lease} must exceed the task timeout ({timeout}s): "
                "a lease that expires while its worker may still be calling the destination "
                "lets a second attempt start beside it.",
                id="onefold.E005",
            )
        )
    if timeout <= settings.ONEFOLD_HTTP_TIMEOUT_SECONDS + settings.ONEFOLD_BUDGET_MAX_WAIT_SECONDS:
        errors.append(
            Error(
                "ONEFOLD_HTTP_TIMEOUT_SECONDS plus ONEFOLD_BUDGET_MAX_WAIT_SECONDS must be below "
                "the task timeout, so a call that waited for its destination's rate limit and "
                "then hung ends before the worker is killed.",
                id="onefold.E006",
            )
        )
    if settings.ONEFOLD_RETRY_MAX_SECONDS < settings.ONEFOLD_RETRY_BASE_SECONDS:
        errors.append(
            Error(
                "ONEFOLD_RETRY_MAX_SECONDS is below ONEFOLD_RETRY_BASE_SECONDS.", id="onefold.E007"
            )
        )
    return errors


def is_loopback(host: str) -> bool:
    """Whether an ALLOWED_HOSTS entry can only be reached from this machine."""
    name = host.strip().lower().lstrip(".").rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    # "testserver" is the name Django's test client sends; nothing resolves it.
    if name in {"localhost", "testserver"} or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@register(Tags.security)
def check_secret_key(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """The development key is public (it is in this repository): anyone who reads it
    can sign session and messages cookies. On loopback only it is a warning, so
    `make run` needs no setup; a server that names any other host refuses to start
    (an Error stops `check`, `migrate`, `runserver` and every command)."""
    if settings.DEBUG or settings.SECRET_KEY != settings.INSECURE_SECRET_KEY:
        return []
    public = [host for host in settings.ALLOWED_HOSTS if not is_loopback(host)]
    if public:
        return [
            Error(
                "SECRET_KEY is the built-in development key, and ALLOWED_HOSTS names "
                f"{', '.join(public)} beyond loopback: anyone could forge session and "
                "messages cookies.",
                hint="Set SECRET_KEY in the environment (docs/operations.md, Security).",
                id="onefold.E008",
            )
        ]
    return [
        Warning(
            "SECRET_KEY is the built-in development key.",
            hint="Set SECRET_KEY in the environment before serving real traffic.",
            id="onefold.W001",
        )
    ]


@register(Tags.database)
def check_squashed_migrations(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """A squashed migration applies to a database with none or all of the migrations it
    replaces. With some, Django drops the app's migrations from its plan and fails
    later, unclearly; `migrate` runs this check first and stops with the way forward."""
    errors: list[CheckMessage] = []
    for alias in databases or []:
        connection = connections[alias]
        recorder = MigrationRecorder(connection)
        if not recorder.has_table():
            continue
        applied = recorder.applied_migrations()
        loader = MigrationLoader(None, ignore_no_migrations=True)
        for (app, name), migration in sorted(loader.replacements.items()):
            done = sum(1 for key in migration.replaces if key in applied)
            if 0 < done < len(migration.replaces) and (app, name) not in applied:
                errors.append(
                    Error(
                        f"The database has {done} of the {len(migration.replaces)} "
                        f"migrations that {app}.{name} replaces, not all of them.",
                        hint="Migrate it with the last release that has those migrations "
                        "first (docs/operations.md, Upgrading from 0.1.0).",
                        id="onefold.E009",
                    )
                )
    return errors
