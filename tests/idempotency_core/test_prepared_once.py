"""What the hot paths prepare once instead of per statement: `prepared_cursor`'s idle
cursor per connection (idempotency_core/sql.py), and a new attempt's constant columns
(execution/statements.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from enum import Enum

import pytest
from django.db import DatabaseError, connections, models, transaction
from django.utils import timezone
from django_q.models import OrmQ
from hypothesis import given, settings
from hypothesis import strategies as st

from idempotency_core.execution import statements
from idempotency_core.models import Attempt, Delivery, Event, Operation, ReviewCase
from idempotency_core.sql import (
    Column,
    columns_of,
    instance_new,
    plain,
    prep_value,
    prepared_cursor,
)

pytestmark = pytest.mark.django_db


def _raw(cursor) -> object:
    return cursor.cursor  # Django's wrapper around the psycopg cursor


def test_the_next_statement_reuses_the_idle_cursor_and_still_answers():
    with prepared_cursor() as cursor:
        cursor.execute("SELECT %s::int + 1", [1])
        first = _raw(cursor)
        assert cursor.fetchone() == (2,)
    with prepared_cursor() as cursor:
        cursor.execute("SELECT %s::text", ["two"])
        assert _raw(cursor) is first
        assert cursor.fetchone() == ("two",)


def test_a_nested_use_gets_a_cursor_of_its_own():
    with prepared_cursor() as outer:
        outer.execute("SELECT 1")
        with prepared_cursor() as inner:
            inner.execute("SELECT 2")
            assert _raw(inner) is not _raw(outer)
            assert inner.fetchone() == (2,)
        assert outer.fetchone() == (1,)


def test_a_statement_that_fails_closes_its_cursor_and_the_next_gets_a_new_one():
    with prepared_cursor() as cursor:
        cursor.execute("SELECT 1")
        kept = _raw(cursor)
    with pytest.raises(DatabaseError), transaction.atomic(), prepared_cursor() as cursor:
        assert _raw(cursor) is kept
        cursor.execute("SELECT 1 / %s::int", [0])
    assert kept.closed
    with prepared_cursor() as cursor:
        assert _raw(cursor) is not kept
        cursor.execute("SELECT 3")
        assert cursor.fetchone() == (3,)


def test_a_new_attempts_values_are_what_a_whole_template_would_give():
    columns = statements._attempt_columns()
    for _ in range(3):
        token, now = uuid.uuid4(), timezone.now()
        template = Attempt(claim_token=token, started_at=now)
        expected = [prep_value(c.field, template) for c in columns]
        assert statements._attempt_params(token, now) == expected
    # Each call has a list of its own: the kept defaults are never changed.
    assert statements._attempt_params(token, now) is not statements._attempt_params(token, now)
    assert statements._attempt_defaults()[statements._attempt_varying()[0]] == uuid.UUID(int=0)


# -- values a column's preparation gives back unchanged (sql.Column.values) ----------

_MODELS = [Event, Operation, Delivery, Attempt, ReviewCase, OrmQ]
_VALUES = {
    str: st.text(max_size=40),
    int: st.integers(min_value=-(2**63), max_value=2**63 - 1),
    bool: st.booleans(),
    type(None): st.none(),
}


def _each_column(where: Callable[[Column], object]) -> pytest.MarkDecorator:
    """Runs a test for every column of `_MODELS` that `where` holds for."""
    chosen = [(model, column) for model in _MODELS for column in columns_of(model) if where(column)]
    return pytest.mark.parametrize(
        "model, column", chosen, ids=[f"{m.__name__}.{c.field.name}" for m, c in chosen]
    )


@_each_column(lambda column: column.unchanged)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_skipped_preparation_would_have_given_the_value_back_unchanged(model, column, data):
    value = data.draw(st.one_of([_VALUES[kind] for kind in column.unchanged]))
    prepared = column.field.get_db_prep_save(value, django_connection())
    assert prepared == value and type(prepared) is type(value)


@_each_column(lambda column: column.aware_unchanged)
@settings(max_examples=40, deadline=None)
@given(moment=st.datetimes(timezones=st.timezones()), naive=st.datetimes())
def test_an_aware_datetime_skips_only_a_preparation_that_gives_it_back(
    model, column, moment, naive
):
    db = django_connection()
    assert column.field.get_db_prep_save(moment, db) is moment
    row = model(**{column.field.attname: moment})
    if column.attname:  # no auto_now: the value given is the value stored
        assert column.values([row], db) == [moment]
        assert column.values([row], db)[0] is moment
    # A naive datetime still takes the field's path, which makes it aware.
    with pytest.warns(RuntimeWarning, match="naive datetime"):
        expected = column.field.get_db_prep_save(naive, db)
    if column.attname:
        with pytest.warns(RuntimeWarning, match="naive datetime"):
            assert column.values([model(**{column.field.attname: naive})], db) == [expected]


def test_a_datetime_with_auto_now_still_runs_its_pre_save():
    auto = [
        (model, column)
        for model in _MODELS
        for column in columns_of(model)
        if getattr(column.field, "auto_now", False) or getattr(column.field, "auto_now_add", False)
    ]
    assert auto, "no auto_now column left to check"
    plain = [c for m in _MODELS for c in columns_of(m) if c.aware_unchanged and c.attname]
    assert plain, "no datetime column without auto_now left to check"
    for model, column in auto:
        assert column.attname == ""
        [value] = column.values([model()], django_connection())
        assert value is not None and timezone.is_aware(value), column.name


def test_columns_whose_values_are_not_plain_take_the_fields_own_path():
    by_name = {c.field.name: c for c in columns_of(Event)}
    assert by_name["payload"].unchanged == (type(None),)  # a dict is dumped as JSON
    assert by_name["received_at"].unchanged == (type(None),)  # a datetime checked for zone
    assert by_name["source"].unchanged == (int, type(None))  # the target's primary key
    # An IntegerField's int is wrapped (psycopg's Int2, ...): only None skips it.
    assert {c.field.name: c.unchanged for c in columns_of(Operation)}["position"] == (type(None),)
    operation = Operation(arguments={"a": 1}, completed_at=timezone.now(), step="x")
    for column in columns_of(Operation):
        if getattr(column.field, "auto_now", False) or getattr(column.field, "auto_now_add", False):
            # `pre_save` gives the time of each call: it is never skipped.
            assert column.attname == ""
            continue
        fast, full = (
            column.values([operation], django_connection())[0],
            prep_value(column.field, operation),
        )
        assert type(fast) is type(full)
        assert getattr(fast, "obj", fast) == getattr(full, "obj", full)  # Jsonb: by content


def django_connection():
    return connections["default"]


def test_an_outcomes_values_are_prepared_as_each_field_would_prepare_them():
    """statements._prepared skips the preparation only where it would change nothing."""
    now = timezone.now()
    samples = {
        "status": "succeeded",
        "claim_token": uuid.uuid4(),
        "next_triggered_by": None,
        "destination_ref": "rec_1",
        "completed_at": now,
        "waits": 2,
        "arguments": {"a": 1},
    }
    db = django_connection()
    names = tuple(samples)
    for name, fast in zip(names, statements._prepared(Operation, names, samples, db), strict=True):
        value = samples[name]
        full = Operation._meta.get_field(name).get_db_prep_save(value, db)
        assert type(fast) is type(full), name
        assert getattr(fast, "obj", fast) == getattr(full, "obj", full), name


# -- a new instance by the positional path (sql.instance_new) ------------------------


def _attributes(instance) -> dict[str, object]:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


@pytest.mark.parametrize("model", _MODELS, ids=[m.__name__ for m in _MODELS])
def test_a_positional_instance_is_the_one_the_keywords_would_build(model):
    now = timezone.now()
    given_values = {
        field.attname: now if isinstance(field, models.DateTimeField) else None
        for field in model._meta.concrete_fields[1:3]
    }
    fast, full = instance_new(model, given_values), model(**given_values)
    fast_values, full_values = _attributes(fast), _attributes(full)
    pk = model._meta.pk.attname
    if model._meta.pk.has_default():  # a fresh default (Event's uuid4) is each one's own
        assert fast_values.pop(pk) != full_values.pop(pk)
    assert fast_values == full_values
    assert fast._state.adding and fast._state.db is None


def test_an_operation_built_positionally_has_its_defaults_and_the_values_given():
    operation = instance_new(Operation, {"step": "assign_task", "position": 1, "event_id": None})
    assert (operation.step, operation.position, operation.status) == ("assign_task", 1, "pending")
    assert (operation.attempt_count, operation.waits, operation.allow_duplicate) == (0, 0, False)
    first, second = instance_new(Event, {}), instance_new(Event, {})
    assert first.pk != second.pk  # uuid4, called for each instance


def test_a_name_that_is_no_fields_attribute_is_refused_as_the_keyword_would_be():
    with pytest.raises(TypeError, match="no field attribute event, stepp"):
        instance_new(Operation, {"event": None, "stepp": "x", "step": "y"})


def test_a_stamped_column_given_one_moment_sets_it_on_every_row():
    now = timezone.now()
    rows = [Operation(step="a"), Operation(step="b")]
    for column in columns_of(Operation):
        if column.stamped:
            assert column.values(rows, django_connection(), now) == [now, now]
            assert [getattr(row, column.field.attname) for row in rows] == [now, now]
    assert {c.field.name for c in columns_of(Operation) if c.stamped} == {
        "created_at",
        "updated_at",
    }


def test_a_choices_member_is_sent_as_the_plain_string_it_stands_for():
    db = django_connection()
    for model, name, member in [
        (Operation, "status", Operation.Status.SUCCEEDED),
        (Operation, "next_trigger", Attempt.Trigger.WORKER),
        (Attempt, "outcome", Attempt.Outcome.SUCCEEDED),
    ]:
        (sent,) = statements._prepared(model, (name,), {name: member}, db)
        assert type(sent) is str and sent == member.value, (model, name)
    assert plain(ReviewCase.Status.OPEN) == "open" and type(plain(ReviewCase.Status.OPEN)) is str
    assert plain(7) == 7 and plain(None) is None
    # The statements' lists of statuses are array literals, read back by
    # tests/idempotency_core/execution/test_statements.py.
    assert all(not isinstance(value, Enum) for value in statements._attempt_defaults())


# -- rows given by their values (intake/ingest_statement._Rows.given) -----------------


def _new_operations(event_id: uuid.UUID, now) -> list[dict[str, object]]:
    steps = ["create_enquiry", "assign_task", "send_confirmation"]
    return [
        {
            "id": 900 + position,
            "event_id": event_id,
            "step": step,
            "position": position,
            "destination_id": 1 if position < 2 else 2,
            "key": f"k{position}",
            "next_attempt_at": now if position == 0 else None,
            "enqueued_at": now if position == 0 else None,
        }
        for position, step in enumerate(steps)
    ]


@pytest.mark.parametrize(
    "model, rows",
    [
        (Operation, lambda now: _new_operations(uuid.uuid4(), now)),
        (Operation, lambda now: _new_operations(uuid.uuid4(), now)[:1]),
        (
            Delivery,
            lambda now: [
                {
                    "source_id": 3,
                    "event_id": uuid.uuid4(),
                    "outcome": Delivery.Outcome.ACCEPTED,
                    "status_code": 202,
                    "fingerprint": "f" * 64,
                    "payload_matched": True,
                }
            ],
        ),
        (
            Delivery,
            lambda now: [
                {
                    "source_id": 3,
                    "event_id": uuid.uuid4(),
                    "outcome": "accepted",
                    "status_code": 200,
                    "fingerprint": "",
                    "payload_matched": True,
                    "raw_body": b"a=1",
                    "content_type": "text/plain",
                    "verification": "ok",
                }
            ],
        ),
    ],
    ids=["three operations", "one operation", "a delivery", "a hook's delivery"],
)
def test_rows_given_by_values_are_the_rows_their_instances_give(model, rows):
    from idempotency_core.intake.ingest_statement import _Rows

    db, now = django_connection(), timezone.now()
    values = rows(now)
    instances = [instance_new(model, row) for row in values]
    by_values = _Rows.given(model, values, db, now)
    by_instances = _Rows.of(model, instances, db, now)
    assert by_values.shape == by_instances.shape
    assert _comparable(by_values.params) == _comparable(by_instances.params)


def _comparable(params: list[object]) -> list[object]:
    # psycopg's Binary wrapper has no equality of its own: its bytes have.
    return [plain(getattr(p, "obj", p)) for p in params]


def test_rows_given_without_a_value_for_a_callable_default_are_refused():
    from idempotency_core.intake.ingest_statement import _Rows

    with pytest.raises(TypeError, match="callable default"):
        _Rows.given(Event, [{"key": "k"}], django_connection(), timezone.now())
