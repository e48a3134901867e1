"""Hand-written statements on the hot paths, and what they share."""

from __future__ import annotations

import re
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from functools import cache, lru_cache
from typing import Any, TypeVar

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

M = TypeVar("M", bound=models.Model)

_PLACEHOLDER = re.compile(r"%(.)", re.DOTALL)


@lru_cache(maxsize=256)
def native(query: str) -> bytes:
    """`query` with PostgreSQL's own `$n` placeholders for its `%s` (`%%` a literal
    `%`), once per statement: the statements here are a small fixed set, and psycopg's
    own conversion is cached only for short ones with few parameters."""
    numbers = iter(range(1, query.count("%s") + 1))

    def one(match: re.Match[str]) -> str:
        if match.group(1) == "s":
            return f"${next(numbers)}"
        if match.group(1) == "%":
            return "%"
        raise ValueError(f"only %s placeholders, not %{match.group(1)}: {query[:80]}")

    return _PLACEHOLDER.sub(one, query).encode()


class _PreparedCursor(psycopg.RawCursor[Any]):
    """A server-binding cursor that prepares what it executes: PostgreSQL parses and
    plans each statement once per connection (settings: DATABASE_PREPARED_STATEMENTS).
    Takes `%s` placeholders, as Django's cursors do, and sends them as `$n`."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if params is not None and isinstance(query, str):
            query = native(query)
        return super().execute(query, params, prepare=True, **kwargs)


# One idle cursor per connection, kept for the next statement: a psycopg cursor finds
# the dumper of each parameter's type and the loader of each column's type once, and a
# new cursor for each statement would do so every time.
_idle: weakref.WeakKeyDictionary[psycopg.Connection[Any], _PreparedCursor] = (
    weakref.WeakKeyDictionary()
)


@contextmanager
def prepared_cursor(alias: str = DEFAULT_DB_ALIAS) -> Iterator[Any]:
    """A prepared-statement cursor on `alias`'s connection, in Django's wrapper (its
    query log included). Joins the connection's transaction, if one is open, like any
    cursor. The connection's idle cursor when it has one (taken while in use: a nested
    use gets a new one), kept again after a body that ended without an error, closed
    after one that raised."""
    db = connections[alias]
    db.close_if_health_check_failed()
    if db.connection is None:  # else ensure_connection has nothing to do but its check
        db.ensure_connection()
    raw = _idle.pop(db.connection, None)
    if raw is None or raw.closed:
        raw = _PreparedCursor(db.connection)
    db.validate_thread_sharing()
    wrap = db.make_debug_cursor if db.queries_logged else db.make_cursor
    unwrapped: Any = raw  # django-stubs types the cursor these take as Django's wrapper
    try:
        with db.wrap_database_errors:
            yield wrap(unwrapped)
    except BaseException:
        raw.close()
        raise
    if raw.connection is db.connection and not raw.closed:
        _idle[db.connection] = raw


def plain(value: object) -> object:
    """A parameter as psycopg dumps it fastest: a choices member (a `str` subclass) as its
    `str` value, whose dumper psycopg finds at once instead of walking the MRO."""
    return value.value if isinstance(value, Enum) else value


@dataclass(frozen=True)
class Column:
    field: Field[Any, Any]
    name: str  # quoted
    db_type: str
    # The exact types of the values that this column's preparation gives back unchanged
    # (`_UNCHANGED`): those skip it.
    unchanged: tuple[type, ...] = ()

    # The field's `pre_save` only reads the attribute (`_pre_save_reads_attribute`):
    # then this is read directly.
    attname: str = ""
    # A DateTimeField: its preparation gives an aware datetime back unchanged too (a
    # naive one is made aware, with a warning: it takes the field's path).
    aware_unchanged: bool = False
    # A DateTimeField with `auto_now` or `auto_now_add`: on an insert its `pre_save`
    # sets it to the time of the call (`values` may be given one time for all rows).
    stamped: bool = False

    def values(
        self, rows: Sequence[models.Model], db: BaseDatabaseWrapper, now: datetime | None = None
    ) -> list[object]:
        """`prep_value` of this column for each row, without the field's preparation
        for a value it would give back as it is (`pre_save` still runs where the field
        has its own: `auto_now` and the like). With `now`, a stamped column is set to
        it on every row, as its `pre_save` would set it to the time of each call: the
        rows of one statement then share one moment."""
        if self.attname:
            raw = [getattr(row, self.attname) for row in rows]
        elif self.stamped and now is not None:
            for row in rows:
                setattr(row, self.field.attname, now)
            raw = [now] * len(rows)
        else:
            raw = [self.field.pre_save(row, True) for row in rows]
        return self.prepared(raw, db)

    def prepared(self, raw: list[object], db: BaseDatabaseWrapper) -> list[object]:
        """Each of `raw` (attribute values, as `pre_save` gives them) as the field's
        preparation gives it, skipping the preparation for a value it would give back
        as it is."""
        unchanged, prepare = self.unchanged, self.field.get_db_prep_save
        if self.aware_unchanged:
            return [
                value
                if type(value) in unchanged
                or (type(value) is datetime and value.utcoffset() is not None)
                else prepare(value, db)
                for value in raw
            ]
        return [value if type(value) in unchanged else prepare(value, db) for value in raw]


# Field classes, and the exact types of values their preparation gives back unchanged
# on PostgreSQL in Django 5.2: a string for a CharField (`to_python`), a bool for a
# BooleanField, an int for an automatic primary key (and so for a ForeignKey, which is
# its target's), None for each. Not an IntegerField's int: the backend wraps it in
# psycopg's Int2/Int4/Int8, which name its exact type. Everything else (dates, JSON,
# UUIDs, a subclass) takes the field's own path, but for an aware datetime
# (`Column.aware_unchanged`). Preparing every value of ingest's rows through each
# field's path is the slow way; tests/idempotency_core/test_prepared_once.py holds
# each class and type here to the field's own preparation.
_NONE = type(None)
_UNCHANGED: dict[type[Field[Any, Any]], tuple[type, ...]] = {
    models.CharField: (str, _NONE),
    models.TextField: (str, _NONE),
    models.BooleanField: (bool, _NONE),
    **dict.fromkeys((models.AutoField, models.BigAutoField, models.SmallAutoField), (int, _NONE)),
    **dict.fromkeys(
        (
            models.IntegerField,
            models.SmallIntegerField,
            models.BigIntegerField,
            models.PositiveIntegerField,
            models.PositiveSmallIntegerField,
            models.PositiveBigIntegerField,
            models.DateTimeField,
            models.JSONField,
            models.UUIDField,
        ),
        (_NONE,),
    ),
}


def unchanged_types(field: Field[Any, Any], db: BaseDatabaseWrapper) -> tuple[type, ...]:
    """The exact types of `field`'s values that its preparation gives back unchanged."""
    if type(field) is models.ForeignKey:
        return unchanged_types(field.target_field, db)
    return _UNCHANGED.get(type(field), ())


def _pre_save_reads_attribute(field: Field[Any, Any]) -> bool:
    """The field's `pre_save` only reads its attribute: Django's own, or a date's or a
    datetime's without `auto_now` or `auto_now_add` (DateField.pre_save)."""
    if type(field).pre_save is Field.pre_save:
        return True
    return type(field) in (models.DateField, models.DateTimeField) and not (
        field.auto_now or field.auto_now_add  # type: ignore[attr-defined]
    )


def _stamped(field: Field[Any, Any]) -> bool:
    """A datetime that its `pre_save` sets to the time of an insert."""
    return (
        isinstance(field, models.DateTimeField)
        and type(field) is models.DateTimeField
        and (field.auto_now or field.auto_now_add)
    )


@cache
def columns_of(model: type[models.Model]) -> tuple[Column, ...]:
    """The model's concrete columns, in field order."""
    db = connections[DEFAULT_DB_ALIAS]
    return tuple(
        Column(
            field,
            db.ops.quote_name(str(field.column)),
            field.db_type(db) or "",
            unchanged_types(field, db),
            field.attname if _pre_save_reads_attribute(field) else "",
            type(field) is models.DateTimeField,
            _stamped(field),
        )
        for field in model._meta.concrete_fields
    )


@cache
def _defaults(model: type[models.Model]) -> tuple[tuple[str, Any, bool], ...]:
    """Each concrete field's attribute name and default, in field order: the default's
    value where every instance gets that same value (Django's own `get_default` hands
    out one object for a default that is not callable), else the field's `get_default`,
    called for each instance (flagged True)."""
    return tuple(
        (field.attname, field.get_default, True)
        if field.has_default() and callable(field.default)
        else (field.attname, field.get_default(), False)
        for field in model._meta.concrete_fields
    )


def instance_new(model: type[M], values: dict[str, object]) -> M:
    """`model(**values)`, with `values` by attribute name (`event_id`, not `event`),
    through the positional path that Django's `from_db` takes: every field's value in
    field order. Django's keyword path looks each field up in the keywords and asks it
    for its default, several times the cost
    (tests/idempotency_core/test_prepared_once.py holds the two to the same instance).
    A name that is no field's attribute raises TypeError, as the keyword would."""
    if not values.keys() <= _attribute_names(model):
        unknown = sorted(values.keys() - _attribute_names(model))
        raise TypeError(f"{model.__name__} has no field attribute {', '.join(unknown)}")
    return model(
        *[
            values[name] if name in values else (default() if fresh else default)
            for name, default, fresh in _defaults(model)
        ]
    )


@cache
def _attribute_names(model: type[models.Model]) -> frozenset[str]:
    return frozenset(name for name, _, _ in _defaults(model))


@cache
def table_of(model: type[models.Model]) -> str:
    return connections[DEFAULT_DB_ALIAS].ops.quote_name(str(model._meta.db_table))


def prep_value(
    field: Field[Any, Any], row: models.Model, db: BaseDatabaseWrapper | None = None
) -> object:
    """A row's value for `field` as Django's INSERT compiler prepares it. `db`, the
    default connection, saves a lookup per value to a caller that prepares many."""
    if db is None:
        db = connections[DEFAULT_DB_ALIAS]
    return field.get_db_prep_save(field.pre_save(row, True), db)


def model_from_row(model: type[M], values: Sequence[object]) -> M:
    """An instance from the values of `columns_of(model)`, in that order, converted as
    Django's compiler converts what it reads (JSON text to objects, and so on)."""
    db = connections[DEFAULT_DB_ALIAS]
    attnames, converters = _row_reading(model)
    converted = [
        value if convert is None or value is None else convert(value, None, db)
        for convert, value in zip(converters, values, strict=True)
    ]
    return model.from_db(db.alias, attnames, converted)


@cache
def _row_reading(model: type[models.Model]) -> tuple[list[str], tuple[Any, ...]]:
    """`columns_of(model)`'s attribute names, and each column's `from_db_value` or None,
    found once per model: a claim reads rows of several models, each of many columns."""
    columns = columns_of(model)
    return (
        [column.field.attname for column in columns],
        tuple(getattr(column.field, "from_db_value", None) for column in columns),
    )
