"""A new submission's rows in one statement."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache, lru_cache
from typing import cast

from django.db import DEFAULT_DB_ALIAS, connection, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.conf import Conf

from idempotency_core.broker import HeldTasks, SkipLockedORM, tasks_held
from idempotency_core.execution.enqueue import operation_enqueue
from idempotency_core.models import Delivery, Event, Operation
from idempotency_core.sql import Column, columns_of, plain, prepared_cursor, table_of

# Operation ids taken from the sequence at once: a submission uses one per step.
ID_BLOCK = 96


def rows_insert(
    *, event: Event, operations: Sequence[dict[str, object]], delivery: dict[str, object]
) -> bool:
    """Inserts the event and, if it was new, its operations and its delivery (their
    columns' values by attribute name, every other column its field's default) and the
    first operation's task (queued by `async_task`, written by the broker class into
    this statement), in one statement; with a broker elsewhere, the task after the
    commit. True when the event was new. Gives each operation its `id`."""
    for operation, pk in zip(operations, _operation_ids(len(operations)), strict=True):
        operation["id"] = pk
    db = connections[DEFAULT_DB_ALIAS]
    # One moment for the statement's rows (their `received_at`, `created_at`, ...).
    now = timezone.now()
    tables = [
        _Rows.of(Event, [event], db, now),
        _Rows.given(Operation, operations, db, now),
        _Rows.given(Delivery, [delivery], db, now),
    ]
    params = [value for rows in tables for value in rows.params]
    shapes = tuple(rows.shape for rows in tables)
    first = cast(int, operations[0]["id"])
    if _tasks_join_statements(db.alias):
        with tasks_held() as held:
            operation_enqueue(first)
        statement = _statement(shapes, len(held.tasks))
        created = _rows_write(db.alias, statement, params + held.params(now))
    else:
        created = _rows_write(db.alias, _statement(shapes), params)
        if created:
            transaction.on_commit(lambda: operation_enqueue(first), using=db.alias)
    if created:
        event._state.adding = False
        event._state.db = db.alias
    return created


def _tasks_join_statements(alias: str) -> bool:
    """django-q2's queue is in this database and its broker is the class that can hold
    a task for the caller's statement. Not with `sync`: `async_task` then runs the task
    at once, which must come after the rows it reads."""
    return alias == Conf.ORM and not Conf.SYNC and _holds_tasks(Conf.BROKER_CLASS)


@lru_cache(maxsize=4)
def _holds_tasks(broker_class: str | None) -> bool:
    # The class, not an instance: making a broker closes the thread's old connections.
    broker = import_string(broker_class) if broker_class else None
    return isinstance(broker, type) and issubclass(broker, SkipLockedORM)


def _rows_write(alias: str, sql: str, params: list[object]) -> bool:
    with prepared_cursor(alias) as cursor:
        cursor.execute(sql, params)
        (created,) = cursor.fetchone()
    return bool(created)


# A column whose default `_Rows.given` cannot use (see `_defaults_prepared`).
_GIVEN = object()

# A column's value in the statement: one for every row, or one per row (in a VALUES list).
_ONE, _EACH = "one", "each"

# The table, each column with how it is passed and its type, and the number of rows.
_Shape = tuple[str, tuple[tuple[str, str, str], ...], int]


@dataclass(frozen=True)
class _Rows:
    """One table's rows as the statement's parameters. `shape` is all its SQL depends
    on, so the SQL is built once per shape. Columns that are NULL in every row are left
    to their default. Every parameter is a scalar: psycopg dumps a list parameter (an
    array) element by element, searching each for its type, at several times the cost."""

    shape: _Shape
    params: list[object]

    @classmethod
    def of(
        cls,
        model: type[models.Model],
        rows: Sequence[models.Model],
        db: BaseDatabaseWrapper,
        now: datetime,
    ) -> _Rows:
        """The rows of instances (the event): each column's value as the field's
        `pre_save` gives it, then as `given`. A stamped column (`auto_now`) is set to
        `now` on the instances too, as `pre_save` would set it."""
        for column in columns_of(model):
            if column.stamped:
                for row in rows:
                    setattr(row, column.field.attname, now)
        return cls.given(model, [_values_of(row) for row in rows], db, now)

    @classmethod
    def given(
        cls,
        model: type[models.Model],
        rows: Sequence[Mapping[str, object]],
        db: BaseDatabaseWrapper,
        now: datetime,
    ) -> _Rows:
        """Rows given as their columns' values by attribute name (each row the same
        names), every other column its field's default, a stamped column `now`: the
        same shape and parameters as instances holding those values give (`of`),
        without building the instances and reading every column of each
        (docs/benchmarks.md, "What the profiles found")."""
        names = rows[0].keys()
        columns: list[tuple[str, str, str]] = []
        ones: list[object] = []
        each: list[list[object]] = []
        for column, default in _defaults_prepared(model):
            name = column.field.attname
            if column.stamped:  # as its `pre_save` would, whatever is given
                value: object = now
            elif name in names:
                values = column.prepared([row[name] for row in rows], db)
                if _all_none(values):
                    continue
                if len(rows) > 1 and not _all_alike(values):
                    columns.append((column.name, _EACH, column.db_type))
                    each.append(values)
                    continue
                value = values[0]
            elif default is None:
                continue
            elif default is _GIVEN:
                raise TypeError(f"{column.field} has a callable default: give its value")
            else:
                value = default
            columns.append((column.name, _ONE, column.db_type))
            ones.append(value)
        by_row = [value for row in zip(*each, strict=True) for value in row]
        return cls(shape=(table_of(model), tuple(columns), len(rows)), params=ones + by_row)


def _values_of(row: models.Model) -> dict[str, object]:
    """An instance's columns' values by attribute name, as their `pre_save` gives them
    (a stamped column is `given`'s to set)."""
    return {
        column.field.attname: getattr(row, column.attname)
        if column.attname
        else column.field.pre_save(row, True)
        for column in columns_of(row.__class__)
        if not column.stamped
    }


@cache
def _defaults_prepared(model: type[models.Model]) -> tuple[tuple[Column, object], ...]:
    """Each column of `model` with its field's default as prepared for the statement,
    for `_Rows.given`. A column that `given` rows must name instead (a callable default,
    whose value would differ per row) has the marker `_GIVEN`; one without a default,
    None (left to the database, NULL)."""
    db = connections[DEFAULT_DB_ALIAS]
    return tuple(
        (
            column,
            _GIVEN
            if column.field.has_default() and callable(column.field.default)
            else plain(column.field.get_db_prep_save(column.field.get_default(), db)),
        )
        for column in columns_of(model)
    )


# Loops, not `all()` over a generator: a generator that `all()` leaves early is closed
# by throwing GeneratorExit into it, 25 exceptions a submission.
def _all_none(values: list[object]) -> bool:
    for value in values:  # noqa: SIM110 (see above)
        if value is not None:
            return False
    return True


def _all_alike(values: list[object]) -> bool:
    """Every value the first's, of its exact type (1 and True are not alike)."""
    first = values[0]
    for value in values:  # noqa: SIM110 (see above)
        if type(value) is not type(first) or value != first:
            return False
    return True


@lru_cache(maxsize=64)
def _statement(shapes: tuple[_Shape, ...], tasks: int = 0) -> str:
    """The event's INSERT, then one guarded INSERT per other table and for the `tasks`
    held tasks: `FROM event` is empty when the event was not inserted, so they insert
    nothing then. Every value is
    cast to its column's type, which a SELECT list or a VALUES list does not infer."""
    (event_table, event_columns, _), *others = shapes
    names = ", ".join(column for column, _, _ in event_columns)
    placeholders = ", ".join("%s" for _ in event_columns)
    parts = [
        f"event AS (INSERT INTO {event_table} ({names}) VALUES ({placeholders}) "
        "ON CONFLICT DO NOTHING RETURNING 1)"
    ]
    for n, (table, columns, count) in enumerate(others):
        select: list[str] = []
        casts: list[str] = []
        for _column, passed, db_type in columns:
            if passed == _ONE:
                select.append(f"%s::{db_type}")
            else:
                casts.append(f"%s::{db_type}")
                select.append(f"v.c{len(casts)}")
        source = "event"
        if casts:
            aliases = ", ".join(f"c{i + 1}" for i in range(len(casts)))
            values = ", ".join(f"({', '.join(casts)})" for _ in range(count))
            source += f", (VALUES {values}) AS v({aliases})"
        names = ", ".join(column for column, _, _ in columns)
        parts.append(
            f"t{n} AS (INSERT INTO {table} ({names}) SELECT {', '.join(select)} FROM {source})"
        )
    if tasks:
        parts.append(f"q AS ({HeldTasks.sql(tasks, 'event')})")
    return "WITH " + ", ".join(parts) + " SELECT count(*) FROM event"


_ids_lock = threading.Lock()
_ids: deque[int] = deque()
_ids_pid = 0


def _operation_ids(count: int) -> list[int]:
    """`count` operation ids from this process's block, taking a new block when it runs
    short (a forked child starts with none: its parent's block is its parent's)."""
    global _ids_pid
    with _ids_lock:
        if _ids_pid != os.getpid():
            _ids.clear()
            _ids_pid = os.getpid()
        if len(_ids) < count:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                    [Operation._meta.db_table, max(ID_BLOCK, count)],
                )
                _ids.extend(row[0] for row in cursor.fetchall())
        return [_ids.popleft() for _ in range(count)]


def operation_ids_forget() -> None:
    """Drops this process's block: the next submission takes a new one. For a sequence
    that was reset (`TRUNCATE ... RESTART IDENTITY`, which nothing in Onefold runs)
    and for tests."""
    with _ids_lock:
        _ids.clear()
