"""Rendered once: an operation's content is made when it is first attempted, stored on
the operation before its destination is called, and sent as stored ever after.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any

from django.db import transaction
from django.utils import timezone

from idempotency_core.configuration.versions import ConfigVersion, config_current
from idempotency_core.execution.rendering import RenderInput, TurnUnavailableError
from idempotency_core.execution.steps import (
    EDIT_PIPELINE,
    STEPS,
    StepContext,
    pipeline_for,
    step_of,
)
from idempotency_core.models import AssigneeTurn, Event, Operation
from idempotency_core.sql import prepared_cursor, table_of
from integrations.base import Classification, DestinationError


def content_ensure(ctx: StepContext, *, now: datetime | None = None) -> dict[str, Any] | None:
    """The operation's content: as stored, else rendered and stored now (committed
    before this returns). None for a step that renders nothing (a merge). Call with the
    operation claimed, outside any transaction."""
    operation = ctx.operation
    if operation.content is not None:
        return dict(operation.content)
    render = step_of(operation).render
    if render is None:
        return None
    # Read before any transaction: inside one the cache is not used (config_cache.py).
    version = config_current()
    inp = render_input(ctx, now=now or timezone.now())
    try:
        # Most content takes no turn: one statement, committed on its own.
        content = render(inp, version, _turn_refused)
        stored = _content_store(operation, content)
    except TurnUnavailableError:
        with transaction.atomic():
            content = render(inp, version, _turn_take)
            stored = _content_store(operation, content)
            if not stored:
                transaction.set_rollback(True)  # and with it the turn taken
    if not stored:
        # This claim was lost (a lease that expired meanwhile): what a newer attempt
        # stored is what the operation sends; with none stored, nothing is called.
        kept = Operation.objects.filter(pk=operation.pk).values_list("content", flat=True).first()
        if kept is None:
            raise DestinationError(
                "the operation's content could not be stored: its claim was lost; not called",
                classification=Classification.RETRYABLE,
            )
        content = dict(kept)
    operation.content = content
    return content


def render_input(ctx: StepContext, *, now: datetime) -> RenderInput:
    source = ctx.event.source
    return RenderInput(
        payload=ctx.payload,
        source=source.name,
        default_assignee=source.task_assignee,
        refs=ctx.refs,
        now=now,
    )


def next_content_render(
    operation: Operation, *, refs: dict[str, str] | None, destination_ref: str, now: datetime
) -> tuple[str, dict[str, Any]] | None:
    """The content of the step the success of `operation` releases, rendered now for the
    statement that claims it, as (that step, its content); None when there is nothing to
    render ahead (the last step, a step that needs a turn, a payload purged, a template
    that fails: each is then rendered, or refused, when the step is claimed)."""
    event = operation.event
    source = event.source
    steps = EDIT_PIPELINE if event.revises_id else pipeline_for(source, event.form)
    if operation.step not in steps or steps[-1] == operation.step or event.payload is None:
        return None
    following = steps[steps.index(operation.step) + 1]
    render = STEPS[following].render
    if render is None or refs is None:
        return None
    inp = RenderInput(
        payload=event.payload,
        source=source.name,
        default_assignee=source.task_assignee,
        refs={**refs, operation.step: destination_ref},
        now=now,
    )
    try:
        content = render(inp, config_current(), _turn_refused)
    except (TurnUnavailableError, DestinationError):
        return None
    return following, content


def _turn_refused(scope: str) -> int:
    raise TurnUnavailableError(scope)


def _turn_take(scope: str) -> int:
    """The round robin's counter for `scope`, advanced by one: its new value. In the
    caller's transaction, so it is taken exactly when the content is stored."""
    with prepared_cursor() as cursor:
        cursor.execute(_turn_sql(), [scope])
        (turns,) = cursor.fetchone()
    return int(turns)


@cache
def _turn_sql() -> str:
    # One atomic upsert: concurrent workers wait for the row's lock, each then adds one
    # to what the one before it committed.
    table = table_of(AssigneeTurn)
    return (
        f'INSERT INTO {table} ("scope", "turns") VALUES (%s, 1) ON CONFLICT ("scope") '
        f'DO UPDATE SET "turns" = {table}."turns" + 1 RETURNING "turns"'
    )


def _content_store(operation: Operation, content: dict[str, Any]) -> bool:
    """Stores the content if the claim still holds and none is stored yet."""
    with prepared_cursor() as cursor:
        cursor.execute(
            _store_sql(),
            [json.dumps(content), operation.pk, operation.claim_token],
        )
        return cursor.fetchone() is not None


@cache
def _store_sql() -> str:
    return (
        f'UPDATE {table_of(Operation)} SET "content" = %s::jsonb '
        'WHERE "id" = %s AND "claim_token" = %s AND "status" = \'running\' '
        'AND "content" IS NULL RETURNING 1'
    )


def content_preview(
    *, event: Event, step: str, version: ConfigVersion, refs: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """What `step` of `event` would send if attempted now under `version`, stored nowhere
    and taking no round-robin turn (the console's preview). None for a step that renders
    nothing; DestinationError when the payload is purged or a template fails."""
    render = STEPS[step.partition(":")[0]].render
    if render is None:
        return None
    if event.payload is None:
        raise DestinationError(
            "the submission's payload was purged after its retention period",
            classification=Classification.PERMANENT,
        )
    if refs is None:
        refs = dict(
            event.operations.filter(status=Operation.Status.SUCCEEDED).values_list(
                "step", "destination_ref"
            )
        )

    def next_turn(scope: str) -> int:
        row = AssigneeTurn.objects.filter(scope=scope).values_list("turns", flat=True).first()
        return int(row or 0) + 1

    inp = RenderInput(
        payload=event.payload,
        source=event.source.name,
        default_assignee=event.source.task_assignee,
        refs=refs,
        now=timezone.now(),
    )
    return render(inp, version, next_turn)
