"""The worker's claim, its outcome and the release of the next step: one statement each."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import Enum
from functools import cache
from typing import Any, Literal, NamedTuple, cast

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

from idempotency_core.execution.confirmations import BY_PERSON
from idempotency_core.models import Attempt, Destination, Event, Operation, ReviewCase, Source
from idempotency_core.sql import (
    Column,
    columns_of,
    model_from_row,
    plain,
    prep_value,
    prepared_cursor,
    table_of,
)

# A claimed operation (with its event, source and destination), its attempt's id, and
# the references of the event's earlier succeeded steps.
Taken = tuple[Operation, int, dict[str, str]]
# What `onefold_confirmation_allow` answered for a claimed step (`_ALLOWANCE_COLUMNS`).
Decided = tuple[bool, bool, int, int, bool]
# What `claim_take` answers when its `unless` condition held: nothing claimed.
SCREENED: Literal["screened"] = "screened"


_ARRAY_ELEMENT = re.compile(r"[A-Za-z0-9_]+")


def _array(values: Iterable[object]) -> str:
    """`values`, plain words or integers, as PostgreSQL's array literal: one text
    parameter that the statement casts (`%s::text[]`, `%s::bigint[]`). psycopg's list
    dumper would write the same literal after looking for each list's element type
    and its dumper, for each statement; the constant lists below are written once."""
    words = [str(plain(value)) for value in values]
    for word in words:
        # Unquoted, NULL (in any case) is a null element.
        if _ARRAY_ELEMENT.fullmatch(word) is None or word.upper() == "NULL":
            raise ValueError(f"{word!r} needs quoting in an array literal")
    return "{" + ",".join(words) + "}"


# Statuses and triggers, each list one array literal, written once.
_CLAIMABLE = _array(Operation.CLAIMABLE)
_OPEN_STATUSES = _array(ReviewCase.OPEN_STATUSES)
_BY_PERSON = _array(BY_PERSON)


def claim_take(
    operation_id: int,
    *,
    token: uuid.UUID,
    now: datetime,
    lease_until: datetime,
    unless: tuple[str, list[object]] | None = None,
) -> Taken | Literal["screened"] | None:
    """Claims the operation if due and unowned and records its attempt; returns the operation
    (with event, source, destination), the attempt's id and the earlier steps' references;
    None when not claimable, `SCREENED` where `unless` holds."""
    params: list[object] = [*unless[1], operation_id] if unless else []
    params += [token, lease_until, now, now, operation_id, _CLAIMABLE, now]
    params += _attempt_params(token, now)
    with prepared_cursor(connection.alias) as cursor:
        cursor.execute(_claim_sql(unless[0] if unless else ""), params)
        screened, *row = cursor.fetchone()
    if screened:
        return SCREENED
    return None if row[0] is None else _taken(row)


def _taken(values: list[Any], event: Event | None = None) -> Taken:
    """A claimed operation with its event, source and destination, its attempt's id and
    the earlier steps' references, from the columns `_claimed_select` names. `event`
    (with its source), when the statement claimed a step of an event the caller holds
    (`_claimed_select(event_known=True)`)."""
    operation = _take(Operation, values)
    (attempt_id,) = _take_n(values, 1)
    if event is None:
        event = _take(Event, values)
        event.source = _take(Source, values)
    operation.event = event
    operation.destination = _take(Destination, values)
    (refs,) = _take_n(values, 1)
    return operation, int(attempt_id), json.loads(refs) if isinstance(refs, str) else refs


class Written(NamedTuple):
    """What `outcome_write` did."""

    owned: bool  # the claim still owned the operation: the outcome is written
    cases_waiting: bool  # an open case waits on its success
    released: list[int]  # the next steps made due (or claimed)
    taken: list[Taken]  # those claimed for the caller (`claim_next`)
    # For each of those, the confirmation's decision made for it (`allowance`), or None.
    decided: list[Decided | None]


def outcome_write(
    operation_id: int,
    *,
    token: uuid.UUID,
    sets: dict[str, object],
    attempt_id: int,
    attempt_sets: dict[str, object],
    settles_case_ids: list[int],
    release_next: bool = False,
    claim_next: tuple[uuid.UUID, datetime] | None = None,
    next_content: str | None = None,
    allowance: tuple[str, list[object]] | None = None,
    event: Event | None = None,
    now: datetime,
) -> Written:
    """The outcome under the claim token, and the attempt's if it matched.

    `release_next`: the same statement releases the next step (writing nothing when a
    case waits); `claim_next` also claims it for the caller, storing `next_content` and
    asking the confirmation's `allowance` with the claim."""
    names = tuple(sets)
    attempt_names = tuple(attempt_sets)
    waiting = [operation_id, _array(settles_case_ids), _OPEN_STATUSES]
    params: list[object] = list(waiting)
    db = connections[DEFAULT_DB_ALIAS]
    params += _prepared(Operation, names, sets, db)
    params += [operation_id, token]
    params += _prepared(Attempt, attempt_names, attempt_sets, db)
    params += [attempt_id]
    claiming = release_next and claim_next is not None
    if release_next:
        params += _released_params(now, claim_next, next_content)
    if claiming:
        _event_required(event)
    allowing = claiming and allowance is not None
    if allowing:
        step, asked = cast(tuple[str, list[object]], allowance)
        params += [*asked, _BY_PERSON, step]
    with prepared_cursor(connection.alias) as cursor:
        cursor.execute(_outcome_sql(names, attempt_names, release_next, claiming, allowing), params)
        rows = cursor.fetchall()
    owned, cases_waiting, released = rows[0][:3]
    taken: list[Taken] = []
    decided: list[Decided | None] = []
    for row in rows if claiming else ():
        if row[3] is None:
            continue
        values = list(row[3:])
        # Takes its columns (the event's are `event`'s); what is left is the decision's.
        taken.append(_taken(values, event))
        decided.append(cast(Decided, tuple(values)) if allowing and values[0] is not None else None)
    return Written(bool(owned), bool(cases_waiting), list(released), taken, decided)


def release_write(
    operation_id: int,
    *,
    now: datetime,
    claim_next: tuple[uuid.UUID, datetime] | None = None,
    event: Event | None = None,
) -> tuple[list[int], list[Taken]]:
    """Releases the step after `operation_id`, whose success this transaction has
    recorded (`_released`): the ids released, and with `claim_next`, (token, lease
    end), those claimed for the caller, as `outcome_write` returns them, with `event`,
    the operation's (and so theirs)."""
    if claim_next is not None:
        _event_required(event)
    params = [operation_id, *_released_params(now, claim_next)]
    with prepared_cursor(connection.alias) as cursor:
        cursor.execute(_release_sql(claim_next is not None), params)
        rows = cursor.fetchall()
    taken = [_taken(list(row[1:]), event) for row in rows if len(row) > 1 and row[1] is not None]
    return list(rows[0][0]), taken


def _event_required(event: Event | None) -> None:
    """A statement that claims the next step reads no event (`event_known`): the caller
    must give the one it holds, whose step it is."""
    if event is None:
        raise TypeError("claiming the next step needs the event it belongs to")


def _attempt_params(token: uuid.UUID, now: datetime) -> list[object]:
    """The values of a new attempt's columns (`_attempt_insert`) for a claim by `token`:
    the token and the start prepared for this claim, every other column as prepared
    once (`_attempt_defaults`): building and preparing a whole template per claim
    showed in the worker's profile (docs/benchmarks.md)."""
    values = list(_attempt_defaults())
    token_at, started_at = _attempt_varying()
    db = connections[DEFAULT_DB_ALIAS]
    values[token_at], values[started_at] = _prepared(
        Attempt, _PER_CLAIM, {"claim_token": token, "started_at": now}, db
    )
    return values


# The attempt's columns that each claim sets; every other one holds its default.
_PER_CLAIM = ("claim_token", "started_at")


@cache
def _attempt_varying() -> tuple[int, int]:
    """Where the claim's token and start are among `_attempt_columns()`."""
    names = [c.field.name for c in _attempt_columns()]
    token_at, started_at = (names.index(name) for name in _PER_CLAIM)
    return token_at, started_at


@cache
def _attempt_defaults() -> tuple[object, ...]:
    """`_attempt_columns()` prepared once from a template. Every column but the token
    and the start holds a constant default; one whose value could change between
    claims (a callable default, `auto_now`) is refused here, not kept stale."""
    for column in _attempt_columns():
        field = column.field
        if field.name in _PER_CLAIM:
            continue
        if (field.has_default() and callable(field.default)) or any(
            getattr(field, flag, False) for flag in ("auto_now", "auto_now_add")
        ):
            raise TypeError(f"{field} is not constant: prepare it per claim (_attempt_params)")
    template = Attempt(claim_token=uuid.UUID(int=0), started_at=datetime.fromtimestamp(0, UTC))
    return tuple(plain(prep_value(c.field, template)) for c in _attempt_columns())


def _prepared(
    model: type[models.Model],
    names: tuple[str, ...],
    values: Mapping[str, object],
    db: BaseDatabaseWrapper,
) -> list[object]:
    """`values` of `model`'s fields `names`, in that order, as each field sends it.
    `db` is the connection itself, taken once per statement (each `connection` lookup
    goes through asgiref's thread-local). A choices member is its plain value first (a
    CharField's preparation gives the member back, and psycopg sends its value); a
    value the preparation would give back as it is (sql.Column: an unchanged type, an
    aware datetime) skips it: most of an outcome's values are one or the other, and
    each field's path showed in the worker's profile. One loop over the statement's
    columns, not a call for each value: an outcome has twenty-one."""
    out = []
    for name, column in zip(names, _columns(model, names), strict=True):
        value = values[name]
        if isinstance(value, Enum):
            value = value.value
        if type(value) not in column.unchanged and not (
            column.aware_unchanged and type(value) is datetime and value.utcoffset() is not None
        ):
            value = plain(column.field.get_db_prep_save(value, db))
        out.append(value)
    return out


@cache
def _columns(model: type[models.Model], names: tuple[str, ...]) -> tuple[Column, ...]:
    """The columns of `model`'s fields `names`, in that order."""
    return tuple(_column(model, name) for name in names)


@cache
def _column(model: type[models.Model], name: str) -> Column:
    """The column of `model`'s field `name`."""
    (column,) = (c for c in columns_of(model) if c.field.name == name)
    return column


def _take(model: type[models.Model], values: list[Any]) -> Any:
    return model_from_row(model, _take_n(values, len(columns_of(model))))


def _take_n(values: list[Any], n: int) -> list[Any]:
    taken = values[:n]
    del values[:n]
    return taken


@cache
def _attempt_columns() -> tuple[Any, ...]:
    """The attempt's columns set from the template (the rest come from the claimed row,
    or are left to the sequence)."""
    from_row = {"id", "operation", "number", "trigger", "triggered_by", "recovery"}
    return tuple(c for c in columns_of(Attempt) if c.field.name not in from_row)


def _by_id_only(condition: str) -> str:
    """`condition` on an operation found by id, written so that no index serves it
    (`IS TRUE` is the same test in a WHERE clause). Written plainly, the planner could
    reach the row through the status index instead of the primary key: it does when its
    statistics say that status is rare (pending and running ones are, once a queue has
    drained), and then a statement reads every such row of a burst."""
    return f"({condition}) IS TRUE"


def _select(model: type[models.Model], alias: str) -> str:
    return ", ".join(f"{alias}.{c.name}" for c in columns_of(model))


_CLAIM_SET = (
    '"status" = \'running\', "claim_token" = %s, "lease_expires_at" = %s, '
    '"attempt_count" = {t}"attempt_count" + 1, '
    '"first_presented_at" = COALESCE({t}"first_presented_at", %s), "updated_at" = %s'
)


def _attempt_insert(source: str) -> str:
    """The attempt's INSERT for each operation claimed in CTE `source`."""
    template = _attempt_columns()
    names = ", ".join(c.name for c in template)
    casts = ", ".join(f"%s::{c.db_type}" for c in template)
    return (
        f'INSERT INTO {table_of(Attempt)} ("operation_id", "number", "trigger", '
        f'"triggered_by_id", "recovery", {names}) SELECT c."id", c."attempt_count", '
        f'c."next_trigger", c."next_triggered_by_id", c."recovery", {casts} '
        f'FROM {source} c RETURNING "id", "operation_id"'
    )


def _claimed_select(refs_also: str = "", *, event_known: bool = False) -> str:
    """The columns `_taken` reads of claimed operation `c`, attempt `a`, event `e`, source
    `s` and destination `d` (not `e` and `s` with `event_known`), and the references of
    the event's earlier succeeded steps plus `refs_also`. The status is tested in the
    aggregate's FILTER, so the planner cannot pick the status index on stale statistics."""
    earlier = (
        f'SELECT o."step", o."destination_ref", o."status" FROM {table_of(Operation)} o '
        'WHERE o."event_id" = c."event_id" AND o."position" < c."position"'
    )
    if refs_also:
        earlier = f'{earlier} AND o."id" NOT IN (SELECT "id" FROM owned) UNION ALL {refs_also}'
    event = "" if event_known else f"{_select(Event, 'e')}, {_select(Source, 's')}, "
    return (
        f'{_select(Operation, "c")}, a."id", {event}{_select(Destination, "d")}, '
        '(SELECT COALESCE(json_object_agg(r."step", r."destination_ref") '
        "FILTER (WHERE r.\"status\" = 'succeeded'), '{}') "
        f"FROM ({earlier}) r)"
    )


@cache
def _claim_sql(unless: str) -> str:
    condition = _by_id_only('"status" = ANY(%s::text[]) AND "next_attempt_at" <= %s')
    screened = f"WITH screened AS (SELECT {unless} AS yes), " if unless else "WITH "
    return (
        f"{screened}claimed AS (UPDATE {table_of(Operation)} SET {_CLAIM_SET.format(t='')} "
        f'WHERE "id" = %s AND {condition}'
        f"{' AND NOT (SELECT yes FROM screened)' if unless else ''} RETURNING *), "
        f"attempt AS ({_attempt_insert('claimed')}) "
        f"SELECT {'(SELECT yes FROM screened)' if unless else 'false'}, "
        f"{_claimed_select()} {_claimed_from('claimed')}"
    )


def _claimed_from(source: str, joined: str = "") -> str:
    """FROM for `_claimed_select`: a row for each operation claimed in CTE `source`
    (with CTE `attempt`), or one row of NULLs when it claimed none; `joined` joins
    more to each."""
    return (
        f"FROM (SELECT 1) one LEFT JOIN {source} c ON true "
        'LEFT JOIN attempt a ON a."operation_id" = c."id" '
        f'LEFT JOIN {table_of(Event)} e ON e."id" = c."event_id" '
        f'LEFT JOIN {table_of(Source)} s ON s."id" = e."source_id" '
        f'LEFT JOIN {table_of(Destination)} d ON d."id" = c."destination_id" '
        f'{joined}ORDER BY c."position", c."id"'
    )


# What `onefold_confirmation_allow` answers (migrations/sql/0.2.0/), in its order.
_ALLOWANCE_COLUMNS = (
    "had_allowance",
    "allowed",
    "sent_to_recipient",
    "sent_from_source",
    "captcha_unchecked",
)


def _allowance_join() -> str:
    """The confirmation's decision (confirmations.py) for the claimed operation `c` if it
    is the step named, gated by a condition on `c` alone; it commits with this statement."""
    return (
        "LEFT JOIN LATERAL (SELECT * FROM onefold_confirmation_allow(%s::bigint, "
        'c."id", e."source_id", c."event_id", %s::varchar, %s::timestamptz, '
        "%s::timestamptz, %s::integer, %s::integer, %s::text, "
        'c."next_trigger" = ANY(%s::text[])) WHERE c."step" = %s) al ON true '
    )


_STILL_OWNED = '"claim_token" = %s AND "status" = \'running\''


@cache
def _outcome_sql(
    names: tuple[str, ...],
    attempt_names: tuple[str, ...],
    release_next: bool,
    claiming: bool,
    allowing: bool = False,
) -> str:
    op, attempt, case = table_of(Operation), table_of(Attempt), table_of(ReviewCase)

    def assignments(model: type[models.Model], fields: tuple[str, ...]) -> str:
        out = []
        for name in fields:
            field = cast("Field[Any, Any]", model._meta.get_field(name))
            column = f'"{field.column}"'
            value = f"%s::{field.db_type(connection)}"
            if model is Operation and name == "destination_ref":
                value = f"COALESCE(NULLIF({value}, ''), {column})"  # kept unless a new one
            out.append(f"{column} = {value}")
        return ", ".join(out)

    guard = "AND NOT (SELECT yes FROM waiting) " if release_next else ""
    released = (
        _released(claiming)
        if release_next
        else 'released AS (SELECT NULL::bigint AS "id" WHERE false)'
    )
    result = (
        "SELECT (SELECT count(*) FROM owned), (SELECT yes FROM waiting), "
        'ARRAY(SELECT "id" FROM released)'
    )
    if claiming:  # one row per step claimed, or one of NULLs after the first three
        this_step = 'SELECT w."step", w."destination_ref", \'succeeded\' FROM owned w'
        result += f", {_claimed_select(refs_also=this_step, event_known=True)}"
        if allowing:
            result += ", " + ", ".join(f"al.{column}" for column in _ALLOWANCE_COLUMNS)
        result += f" {_claimed_from('released', _allowance_join() if allowing else '')}"
    return (
        f"WITH waiting AS (SELECT EXISTS (SELECT FROM {case} r WHERE "
        '(r."operation_id" = %s OR r."id" = ANY(%s::bigint[])) '
        'AND r."status" = ANY(%s::text[])) AS yes), '
        f"owned AS (UPDATE {op} SET {assignments(Operation, names)} "
        f'WHERE "id" = %s AND {_by_id_only(_STILL_OWNED)} '
        f'{guard}RETURNING "id", "event_id", "position", "step", "destination_ref"), '
        f"recorded AS (UPDATE {attempt} SET {assignments(Attempt, attempt_names)} "
        'WHERE "id" = %s AND "outcome" IS NULL AND EXISTS (SELECT FROM owned) RETURNING 1), '
        f"{released} {result}"
    )


def _released(claiming: bool) -> str:
    """The release of the step after the one in CTE `owned` (its id, event, position,
    step and reference), whose success is recorded: CTE `released`, that step made due,
    its task left to the caller; or, `claiming`, claimed for the caller (the claim's
    UPDATE, with CTE `attempt`, its attempt). Only a step still waiting for it (pending,
    not yet due) is released. Parameters: `_released_params`."""
    # The next step by its id, found by event (as in `_claimed_select`). The ids are an
    # uncorrelated subquery, so the planner computes them once and reaches the row by
    # the primary key; correlated with `owned` (in the UPDATE's FROM), no index could
    # serve `o."id"` and every operation of the table was read for each success.
    op = table_of(Operation)
    following = (
        f'WHERE o."id" = ANY(ARRAY(SELECT n."id" FROM owned w JOIN {op} n '
        'ON n."event_id" = w."event_id" AND n."position" = w."position" + 1)) '
        f"AND {_by_id_only(_NEXT_WAITING)}"
    )
    if claiming:
        # A claimed step's content, rendered ahead by the caller, where it has none yet.
        return (
            f"released AS (UPDATE {op} o SET {_CLAIM_SET.format(t='o.')}, "
            f'"next_attempt_at" = %s, "enqueued_at" = %s, '
            f'"content" = COALESCE(o."content", %s::jsonb -> o."step") {following} '
            f"RETURNING o.*), attempt AS ({_attempt_insert('released')})"
        )
    return (
        f'released AS (UPDATE {op} o SET "next_attempt_at" = %s, "enqueued_at" = %s, '
        f'"updated_at" = %s {following} RETURNING o."id")'
    )


def _released_params(
    now: datetime,
    claim_next: tuple[uuid.UUID, datetime] | None,
    next_content: str | None = None,
) -> list[object]:
    """`_released`'s parameters: `claim_next` is (token, lease end) when claiming, and
    `next_content` the claimed step's content (JSON `{step: content}`, or None)."""
    if claim_next is None:
        return [now, now, now]
    token, lease_until = claim_next
    return [token, lease_until, now, now, now, now, next_content, *_attempt_params(token, now)]


_NEXT_WAITING = 'o."status" = \'pending\' AND o."next_attempt_at" IS NULL'


@cache
def _release_sql(claiming: bool) -> str:
    """`_released` after operation %s, whose success this transaction has written (so
    the earlier steps' references, this one's included, are in the snapshot)."""
    owned = (
        f'owned AS (SELECT "id", "event_id", "position", "step", "destination_ref" '
        f'FROM {table_of(Operation)} WHERE "id" = %s)'
    )
    result = 'SELECT ARRAY(SELECT "id" FROM released)'
    if claiming:  # one row per step claimed, or one of NULLs after the first column
        result += f", {_claimed_select(event_known=True)} {_claimed_from('released')}"
    return f"WITH {owned}, {_released(claiming)} {result}"
