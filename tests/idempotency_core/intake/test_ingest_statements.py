"""What one submission costs the database, pinned so that it cannot creep back, and the
per-process cache that makes it so (idempotency_core/config_cache.py), invalidated from elsewhere.

These tests commit (`transaction=True`): the cache is only used outside a transaction,
as in a web process, and its invalidation arrives by NOTIFY, which PostgreSQL sends at
commit. Writes "from elsewhere" are made in another thread, on a connection of its
own, as another process would (README: a revoked key gets 401 from the next request).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.conf import Conf

from idempotency_core.config_cache import config_cache_clear
from idempotency_core.execution.engine import TASK
from idempotency_core.intake import ingest_statement
from idempotency_core.intake.ingest import suspected_duplicate_flag
from idempotency_core.intake.ingest_statement import ID_BLOCK, operation_ids_forget
from idempotency_core.intake.sources import (
    api_key_revoke,
    source_api_key_rotate,
    source_create_with_key,
    source_for_working_api_key,
)
from idempotency_core.models import (
    Destination,
    Event,
    Operation,
    ReviewCase,
    Source,
    SourceApiKey,
)
from idempotency_core.sql import native
from idempotency_core.tasks import operation_run
from tests.factories import URL, post, submission
from tests.support.processes import REPO, app_env, start_web
from tests.support.queue import queued

# Committed, and the migrations' seed (the default destinations) restored after each test.
NOTIFY_DELIVERY_SECONDS = 0.05

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@pytest.fixture(autouse=True)
def _persistent_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in production (DATABASE_CONN_MAX_AGE, default 600): the cache is used only on
    a connection that persists. The suite's processes run with 0 (config/test_settings)."""
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 600)
    # A connection opened before is past its age: the first `close_old_connections` (a
    # request's end, django-q2's broker made for the first task) would close it.
    connection.close()
    config_cache_clear()


def person(n: int) -> dict[str, Any]:
    """A submission of a person of their own (no suspected duplicates between them)."""
    return submission(contact={"name": f"P{n}", "email": f"p{n}@example.com"})


def statements(api, body: dict[str, Any], key: str) -> tuple[int, list[str]]:
    """The answer's status and each statement sent, as `VERB table` (or the verb)."""
    with CaptureQueriesContext(connection) as captured:
        response = post(api, body, key=key)
    return response.status_code, [_shape(q["sql"]) for q in captured.captured_queries]


def _shape(sql: str) -> str:
    verb = sql.split(None, 1)[0].upper()
    if verb == "WITH":  # data-modifying CTEs: the tables each inserts into, in order
        return "WITH INSERT " + ", ".join(re.findall(r'INSERT INTO "?(\w+)"?', sql))
    table = re.search(r'(?:INTO|FROM|UPDATE) "?(\w+)"?', sql)
    return f"{verb} {table.group(1)}" if table and verb in {"INSERT", "SELECT"} else verb


def elsewhere(action: Callable[[], Any]) -> None:
    """Runs `action` on another connection and commits it, as another process would."""

    def run() -> None:
        try:
            action()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    # PostgreSQL sends the NOTIFY to listeners just after the commit returns, typically
    # well under a millisecond later (README: "from the next request that starts after
    # it arrives"). Another process's command and a sender's next request are further
    # apart than this; the test, in one process, waits for it.
    time.sleep(NOTIFY_DELIVERY_SECONDS)


def test_a_new_submission_is_one_statement_inserting_its_rows_and_its_task(api):
    operation_ids_forget()  # the warm-up takes a new block of ids, the next has enough
    assert post(api, person(0), key="warm-up").status_code == 202  # fills the cache
    status, sent = statements(api, person(1), "new")
    assert status == 202
    # No API key read, no read of the event before its INSERT, no destination read, no
    # duplicate search: one statement writes the event, its operations, its delivery and
    # its task, queued by django-q2's `async_task` and held by the broker class for it.
    tables = "idempotency_core_event, idempotency_core_operation, idempotency_core_delivery"
    assert sent == [f"WITH INSERT {tables}, django_q_ormq"]
    event = Event.objects.get(key="new")
    operations = list(event.operations.order_by("position"))
    assert [o.step for o in operations] == ["create_enquiry", "assign_task", "send_confirmation"]
    # The queued task names the first operation, and nothing else (docs/task-queue.md, rule 1).
    assert [row.task["args"] for row in queued(TASK)][-1] == (operations[0].pk,)
    assert event.deliveries.get().outcome == "accepted"
    # The statement's rows share one moment: their auto_now and auto_now_add columns.
    moments = {event.received_at, event.deliveries.get().received_at}
    moments |= {o.created_at for o in operations} | {o.updated_at for o in operations}
    assert len(moments) == 1


def test_the_statements_placeholder_conversion_is_made_once_per_statement(api):
    """psycopg caches a query's `%s` to `$n` conversion only under 4,096 characters and
    50 parameters; the ingest statement passes the parameter limit. `sql.native`
    converts each statement once."""
    assert post(api, person(0), key="warm-up").status_code == 202
    before = native.cache_info()
    for n in range(1, 4):
        assert post(api, person(n), key=f"cached-{n}").status_code == 202
    after = native.cache_info()
    assert after.misses == before.misses
    assert after.hits >= before.hits + 3


def test_operation_ids_come_from_a_block_one_read_for_many_submissions(api):
    """The statement needs the first operation's id for its task before it runs: ids
    are taken from the sequence a block at a time, not once per submission."""
    assert post(api, person(0), key="warm-up").status_code == 202  # fills the cache
    operation_ids_forget()
    _, first = statements(api, person(1), "a")
    assert first[0] == "SELECT generate_series"  # a block of nextval()
    for n in range(2, ID_BLOCK // 3 + 1):  # the rest of the block: 3 ids each
        _, sent = statements(api, person(n), f"k{n}")
        assert sent == first[1:], sent


def test_a_repeat_is_the_statement_that_creates_nothing_one_read_and_its_delivery(api):
    operation_ids_forget()  # a new block of ids now: none is taken while counting
    assert post(api, person(1), key="k").status_code == 202
    status, sent = statements(api, person(1), "k")
    assert status == 200
    assert sent == [
        # ON CONFLICT DO NOTHING: the constraint decides, and nothing else is inserted
        "WITH INSERT idempotency_core_event, idempotency_core_operation, idempotency_core_delivery"
        ", django_q_ormq",
        "SELECT idempotency_core_operation",  # the event with its operations' statuses
        "INSERT idempotency_core_delivery",
    ]
    assert Event.objects.count() == 1
    assert Operation.objects.count() == 3
    assert len(queued(TASK)) == 1


def test_an_edit_is_one_read_of_what_it_revises_then_the_same_statement(api):
    operation_ids_forget()
    assert post(api, person(1), key="first").status_code == 202
    status, sent = statements(api, {**person(1), "revises": "first"}, "edit")
    assert status == 202
    assert sent == [
        "SELECT idempotency_core_event",  # the event it revises, checked before
        "WITH INSERT idempotency_core_event, idempotency_core_operation, idempotency_core_delivery"
        ", django_q_ormq",
    ]
    edit = Event.objects.get(key="edit")
    assert edit.revises == Event.objects.get(key="first")
    assert [o.step for o in edit.operations.all()] == ["update_enquiry"]
    assert [row.task["args"] for row in queued(TASK)][-1] == (edit.operations.get().pk,)


@pytest.mark.parametrize(
    ("setting", "value"),
    [("ORM", "elsewhere"), ("SYNC", True)],
    ids=["queue elsewhere", "tasks run at once"],
)
def test_with_the_queue_elsewhere_the_task_is_queued_after_the_rows_commit(
    api, monkeypatch: pytest.MonkeyPatch, setting: str, value: object
):
    """A broker outside this database (Redis) cannot take the task row in the
    statement, and with `sync` django-q2 runs the task where it is queued: the rows are
    written without it and the task is queued once they are committed, never before (a
    worker would find no operation)."""
    operation_ids_forget()
    assert post(api, person(0), key="warm-up").status_code == 202  # fills the cache
    monkeypatch.setattr(Conf, setting, value)
    seen: list[tuple[int, bool]] = []

    def enqueue(operation_id: int) -> None:
        """The id the broker is handed, and whether another connection sees its row."""
        committed: list[bool] = []
        elsewhere(lambda: committed.append(Operation.objects.filter(pk=operation_id).exists()))
        seen.append((operation_id, *committed))

    monkeypatch.setattr(ingest_statement, "operation_enqueue", enqueue)
    status, sent = statements(api, person(1), "queued-elsewhere")
    assert status == 202
    assert sent == [
        "WITH INSERT idempotency_core_event, idempotency_core_operation, idempotency_core_delivery"
    ]
    first = Event.objects.get(key="queued-elsewhere").operations.get(position=0)
    assert seen == [(first.pk, True)]
    assert len(queued(TASK)) == 1  # the warm-up's only


def test_a_cold_process_reads_the_key_and_the_destinations_once(api):
    operation_ids_forget()
    ingest_statement._operation_ids(1)  # a fresh id block: neither post takes one
    config_cache_clear()
    _, cold = statements(api, person(1), "first")
    _, warm = statements(api, person(2), "second")
    assert sorted(set(cold) - set(warm)) == [
        "SELECT idempotency_core_destination",
        "SELECT idempotency_core_sourceapikey",
    ]
    assert len(cold) == len(warm) + 3  # the key, and the crm and email destinations


def test_a_key_revoked_elsewhere_gets_401_on_the_next_request(api, source_and_key):
    _, key = source_and_key
    assert post(api, person(1), key="a").status_code == 202
    elsewhere(lambda: api_key_revoke(prefix=key))
    assert post(api, person(2), key="b").status_code == 401


def test_a_key_rotated_elsewhere_without_overlap_gets_401_on_the_next_request(api):
    assert post(api, person(1), key="a").status_code == 202
    elsewhere(lambda: source_api_key_rotate(name="website", overlap=timedelta(0)))
    assert post(api, person(2), key="b").status_code == 401


def test_a_rotated_key_stops_at_the_end_of_its_overlap_without_a_notification(api):
    elsewhere(lambda: source_api_key_rotate(name="website", overlap=timedelta(seconds=1)))
    assert post(api, person(1), key="a").status_code == 202  # cached, with its end
    time.sleep(1.2)
    assert post(api, person(2), key="b").status_code == 401


def test_a_source_disabled_elsewhere_gets_403_on_the_next_request(api, source):
    assert post(api, person(1), key="a").status_code == 202
    elsewhere(lambda: Source.objects.filter(pk=source.pk).update(is_active=False))
    assert post(api, person(2), key="b").status_code == 403


def test_a_destination_changed_elsewhere_is_used_by_the_next_submission(api, source):
    assert post(api, person(1), key="a").status_code == 202
    other = Destination.objects.create(
        name="other-crm", kind=Destination.objects.get(name="crm").kind
    )
    elsewhere(lambda: Source.objects.filter(pk=source.pk).update(crm=other))
    assert post(api, person(2), key="b").status_code == 202
    assert Operation.objects.get(event__key="b", step="create_enquiry").destination == other


def test_a_backend_terminated_between_requests_costs_a_reconnect_not_a_request(api):
    """The cache's read of the socket stands in for Django's health check (SELECT 1):
    a terminated backend (as in a restart) must still be replaced before it is used."""
    assert post(api, person(1), key="a").status_code == 202
    pid = connection.connection.info.backend_pid

    def terminate() -> None:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

    elsewhere(terminate)  # the FATAL message and the end of the stream reach this socket
    assert post(api, person(2), key="b").status_code == 202
    assert connection.connection.info.backend_pid != pid
    assert set(Event.objects.values_list("key", flat=True)) == {"a", "b"}


def test_inside_a_transaction_the_database_is_read_not_the_cache(api, source_and_key):
    _, key = source_and_key
    assert post(api, person(1), key="a").status_code == 202  # cached
    source = source_and_key[0]
    with transaction.atomic():
        SourceApiKey.objects.filter(source=source).update(revoked_at=timezone.now())
        # Not committed, so not notified: only a read in this transaction can see it.
        assert source_for_working_api_key(key) is None
        transaction.set_rollback(True)
    assert source_for_working_api_key(key) == source


# -- the suspected-duplicate search, in the first step's task -------------------------


def _first_operation(key: str) -> Operation:
    return Operation.objects.get(event__key=key, position=0)


def test_twins_are_flagged_once_on_the_later_event_whichever_task_runs_first(api):
    assert post(api, submission(), key="first").status_code == 202
    assert post(api, submission(), key="second").status_code == 202
    assert not ReviewCase.objects.exists()  # not in the answer's path
    # The earlier event's task runs after the later one committed (a backlog), then the
    # later one's, then the earlier one's again (a crash before its claim): one case.
    for key in ("first", "second", "first"):
        suspected_duplicate_flag(operation_id=_first_operation(key).pk)
    case = ReviewCase.objects.get(kind="suspected_duplicate")
    first, second = Event.objects.get(key="first"), Event.objects.get(key="second")
    assert case.subject == f"events:{first.pk}:{second.pk}"
    assert case.event == second


def test_the_search_runs_only_before_the_first_attempt_of_the_first_step(api):
    assert post(api, submission(), key="first").status_code == 202
    assert post(api, submission(), key="second").status_code == 202
    later = Operation.objects.get(event__key="second", position=1)
    assert suspected_duplicate_flag(operation_id=later.pk) is None
    Operation.objects.filter(pk=_first_operation("second").pk).update(attempt_count=1)
    assert suspected_duplicate_flag(operation_id=_first_operation("second").pk) is None
    assert not ReviewCase.objects.exists()


def test_the_first_steps_task_opens_the_case(api, sandbox):
    assert post(api, submission(), key="first").status_code == 202
    assert post(api, submission(), key="second").status_code == 202
    assert operation_run(_first_operation("second").pk) == "succeeded"
    assert ReviewCase.objects.get(kind="suspected_duplicate").event.key == "second"


# -- the same across processes: gunicorn keeping its connections ------------------------


def test_gunicorn_with_persistent_connections_refuses_a_key_revoked_by_a_command(tmp_path):
    """The suite's servers run with DATABASE_CONN_MAX_AGE=0 (no cache); this one keeps
    its connections as production does, so each of its threads caches the key."""
    source, _, key = source_create_with_key(name="shop")
    server = start_web(tmp_path, workers=2, env={"DATABASE_CONN_MAX_AGE": "600"})
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:

            def send(n: int) -> int:
                return client.post(
                    URL,
                    json=person(n),
                    headers={"Authorization": f"Api-Key {key}", "Idempotency-Key": f"g{n}"},
                ).status_code

            assert [send(n) for n in range(8)] == [202] * 8
            revoked = subprocess.run(
                [sys.executable, str(REPO / "manage.py"), "revoke_key", key[:10]],
                env={**os.environ, **app_env()},
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert revoked.returncode == 0, revoked.stderr
            assert [send(n) for n in range(8, 16)] == [401] * 8
    finally:
        server.child.stop()
    assert Event.objects.filter(source=source).count() == 8
