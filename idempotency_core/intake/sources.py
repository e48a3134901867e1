"""Sources and their API keys."""

from __future__ import annotations

from django.db import transaction

from idempotency_core.execution.steps import pipeline_validate
from idempotency_core.keys import api_key_digest, new_api_key, new_source_salt
from idempotency_core.models import Source, SourceApiKey


def source_get_or_create(*, name: str) -> tuple[Source, bool]:
    return Source.objects.get_or_create(name=name, defaults={"key_salt": new_source_salt()})


def source_api_key_issue(*, source: Source) -> str:
    """Creates a new API key and returns it in clear: the only time it is ever seen."""
    key = new_api_key()
    SourceApiKey.objects.create(source=source, prefix=key[:10], digest=api_key_digest(key))
    return key


def source_for_api_key(key: str) -> Source | None:
    found = (
        SourceApiKey.objects.select_related("source")
        .filter(digest=api_key_digest(key), revoked_at__isnull=True)
        .first()
    )
    return found.source if found else None


def source_pipeline_set(*, source: Source, steps: list[str], form: str = "*") -> Source:
    """Sets the steps for one form of the source ("*": every form not named)."""
    validated = pipeline_validate(steps)
    source.pipelines = {**(source.pipelines or {}), form: list(validated)}
    source.save(update_fields=["pipelines"])
    return source


@transaction.atomic
def source_create_with_key(*, name: str) -> tuple[Source, bool, str]:
    source, created = source_get_or_create(name=name)
    return source, created, source_api_key_issue(source=source)
