"""No personal data in any log: unique contacts through every failure path, then a search.

Each contact is planted with values found nowhere else (`pii-<uuid>@example.com`, a
name, a message and a company each carrying a uuid), sent through the real stack
(gunicorn, django-q2 clusters, a sweeper, the sandbox CRM and mail sink) along every
path that fails: bodies the API or a hook refuses, a key reused with another
payload, every fault the destinations can show, a worker killed with SIGKILL in the
middle of a send, replays through the review service, and two reconciliation runs
over a CRM record made by hand with a contact in it (one run in this process, one
as a command, which meets every finding's case already open). Then every log the
stack wrote is read: each child's log file, the sandbox's, this process's log
records (DEBUG, SQL included, through the stack's handlers), and PostgreSQL's own
server log, only the bytes written during the test (a probe written into it proves
it is the live file). None may hold a planted value, or its uuid.

Children run with LOG_LEVEL=DEBUG, so the search covers what an operator turning
up the logs would see. Under CI=true a log that cannot be found fails the test.
A last test races requests for one new key deterministically and searches the
server log for the losers' INSERTs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.ingest import event_ingest
from idempotency_core.intake.sources import (
    source_create_with_key,
    source_get_or_create,
    source_hook_configure,
)
from idempotency_core.models import Operation, ReviewCase, Source
from idempotency_core.platform.logfilters import RedactSecrets, redact
from idempotency_core.review.replay import operation_replay
from integrations.sandbox.adapter import SandboxCrm
from tests.factories import make_user
from tests.support.logs import (
    LogNotFoundError,
    LogWindow,
    postgresql_log_path,
    postgresql_log_probe,
)
from tests.support.processes import (
    Child,
    Sandbox,
    WebServer,
    app_env,
    spawn,
    start_web,
    wait_for,
)

# gunicorn, the clusters and the sweeper are other processes: rows must be committed.
on_real_parts = pytest.mark.django_db(transaction=True, serialized_rollback=True)

IN_CI = os.environ.get("CI") == "true"
DEBUG_ENV = {"LOG_LEVEL": "DEBUG"}
URL = "/api/v1/submissions/"
UNSETTLED = [Operation.Status.PENDING, Operation.Status.RUNNING, Operation.Status.RETRY_SCHEDULED]
# Every fault the sandbox has, on each action it can spoil.
FAULTS = [
    *(
        ("create_record", mode)
        for mode in (
            "http_400",
            "http_500_after_commit",
            "drop_response_after_commit",
            "fail_before_commit",
            "http_503",
        )
    ),
    ("create_task", "http_400"),
    ("create_task", "drop_response_after_commit"),
    *(
        ("send_email", mode)
        for mode in (
            "http_400",
            "http_500_after_commit",
            "drop_response_after_commit",
            "fail_before_commit",
            "http_503",
        )
    ),
]


@dataclass(frozen=True)
class Person:
    """A contact whose every value carries a uuid found nowhere else."""

    name: str
    email: str
    message: str
    company: str

    @classmethod
    def new(cls, domain: str = "example.com") -> Person:
        name, email, message, company = (uuid.uuid4().hex for _ in range(4))
        return cls(
            name=f"Pat {name}",
            email=f"pii-{email}@{domain}",
            message=f"Please call me back about {message}.",
            company=f"Company {company}",
        )

    def values(self) -> list[str]:
        """What must not be found: each value, and each uuid alone (a partial leak)."""
        full = [self.name, self.email, self.message, self.company]
        return full + [uuid_ for value in full for uuid_ in re.findall(r"[0-9a-f]{32}", value)]

    def submission(self, **overrides: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "form": "contact",
            "contact": {"name": self.name, "email": self.email},
            "message": self.message,
            "fields": {"company": self.company},
        }
        return body | overrides


@dataclass
class Stack:
    sandbox: Sandbox
    web: WebServer
    log_dir: Path
    api_key: str
    hook_url: str
    http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=30))
    people: list[Person] = field(default_factory=list)
    event_ids: list[str] = field(default_factory=list)

    def person(self, domain: str = "example.com") -> Person:
        person = Person.new(domain)
        self.people.append(person)
        return person

    def post(self, content: bytes | str, *, key: str | None = None, **headers: str) -> int:
        response = self.http.post(
            self.web.url + URL,
            content=content,
            headers={
                "Authorization": f"Api-Key {self.api_key}",
                "Content-Type": "application/json",
                "Idempotency-Key": key or f"k-{uuid.uuid4().hex}",
                **headers,
            },
        )
        if response.status_code == 202:
            self.event_ids.append(response.json()["event_id"])
        return response.status_code

    def submit(self, person: Person, **overrides: Any) -> str:
        assert self.post(json.dumps(person.submission(**overrides))) == 202
        return self.event_ids[-1]


# -- the stack ---------------------------------------------------------------------------


@pytest.fixture
def stack(sandbox: Sandbox, tmp_path: Path) -> Iterator[Stack]:
    """gunicorn at DEBUG on the test database, an API source and an html hook source."""
    _, _, api_key = source_create_with_key(name="pii-api")
    hook_source, _ = source_get_or_create(name="pii-hook")
    hook = source_hook_configure(source=hook_source, profile="html")
    web = start_web(tmp_path, sandbox, env=DEBUG_ENV)
    stack = Stack(sandbox, web, tmp_path, api_key, hook_url=web.url + hook.path)
    yield stack
    web.child.stop()
    stack.http.close()


def settled(event_ids: list[str]) -> bool:
    return not Operation.objects.filter(event_id__in=event_ids, status__in=UNSETTLED).exists()


def wait_settled(stack: Stack, event_ids: list[str] | None = None, timeout: float = 90) -> None:
    wanted = stack.event_ids if event_ids is None else event_ids
    wait_for(lambda: settled(wanted), timeout=timeout, interval=0.2, what="events to settle")


# -- the failure paths -------------------------------------------------------------------


def crash_mid_send(stack: Stack, cluster: Child) -> None:
    """A worker killed with SIGKILL while the sink holds the message: the sweeper turns
    the lease into an interrupted attempt, and the send into a review case."""
    stack.sandbox.fault("send_email", "slow", seconds=3.0)
    event_id = stack.submit(stack.person())
    send = Operation.objects.get(event_id=event_id, step="send_confirmation")
    wait_for(
        lambda: (
            Operation.objects.get(pk=send.pk).status == Operation.Status.RUNNING
            and stack.sandbox.stats()["calls"].get("send_email", 0) >= 1
        ),
        timeout=60,
        what="the confirmation to be in flight",
    )
    cluster.stop(signal.SIGKILL)


def refused_bodies(stack: Stack) -> list[bytes | str]:
    """Bodies the ingest API must refuse (4xx), each with a contact of its own in it."""

    def text(**overrides: Any) -> str:
        return json.dumps(stack.person().submission(**overrides))

    marked = {"company": "x", "odd": "ODD"}
    cut = text()
    return [
        cut[: len(cut) // 2],  # not JSON
        text(extra={"email": "x"}),  # an unknown key
        text(message=12345),  # a number as the message
        text().replace('"Pat ', '"\\udc00Pat '),  # a lone surrogate
        text().replace('"Company ', '"\\u0000Company '),  # NUL
        text(fields=marked).replace('"ODD"', "NaN"),
        text(fields=marked).replace('"ODD"', "1e999"),
        text(fields=marked).replace('"ODD"', "9" * 5000),
        text(fields=marked).replace('"ODD"', "[" * 100 + "]" * 100),
        text().encode("utf-16"),  # not UTF-8
    ]


def refuse_bodies(stack: Stack) -> None:
    for body in refused_bodies(stack):
        assert 400 <= stack.post(body) < 500, body
    person = stack.person()
    assert stack.post(json.dumps(person.submission()), **{"Content-Type": "text/plain"}) == 415
    # A key reused with another payload: 422, the refused delivery kept without content.
    key = f"reused-{uuid.uuid4().hex}"
    assert stack.post(json.dumps(person.submission()), key=key) == 202
    assert stack.post(json.dumps(stack.person().submission()), key=key) == 422


def refuse_hook_deliveries(stack: Stack) -> None:
    """A website form's hook: a wrong token, a message with NUL (kept unreadable), and one
    that is processed."""
    wrong_token = re.sub(r"/t/[^/]+/", "/t/wrong-token/", stack.hook_url)
    for url, nul, expected in (
        (wrong_token, "", 401),
        # A NUL cannot be stored as text: the verified delivery is kept as an
        # unreadable submission (202), never refused and never a 500.
        (stack.hook_url, "\x00", 202),
        (stack.hook_url, "", 200),
    ):
        person = stack.person()
        form = {
            "name": person.name,
            "email": person.email,
            "message": person.message + nul,
            "company": person.company,
            "website": "",
            "submission_id": uuid.uuid4().hex,
        }
        response = stack.http.post(url, data=form)
        assert response.status_code == expected, response.text
        if expected == 200:
            stack.event_ids.append(response.json()["event_id"])


def ingest_here(stack: Stack) -> None:
    """One submission through the ingest service in this process, whose SQL is logged
    at DEBUG: the INSERT carries the payload, and the filter must scrub it."""
    source, _ = source_get_or_create(name="pii-api")
    result = event_ingest(
        source=source, key=f"here-{uuid.uuid4().hex}", payload=stack.person().submission()
    )
    stack.event_ids.append(str(result.event.pk))


def fail_at_destinations(stack: Stack) -> None:
    """One event per fault, each left to settle before the next fault is queued."""
    for action, mode in FAULTS:
        stack.sandbox.fault(action, mode)
        event_id = stack.submit(stack.person())
        wait_settled(stack, [event_id])
    # An internationalised domain goes all the way, its address in ASCII on the wire.
    wait_settled(stack, [stack.submit(stack.person(domain="exämple.com"))])


def replay_cases(stack: Stack) -> int:
    """Replays, through the review service, every operation refused as permanent."""
    admin = make_user(f"replayer-{uuid.uuid4().hex[:8]}", groups=("Replay admins",))
    refused = list(
        ReviewCase.objects.filter(
            kind=ReviewCase.Kind.PERMANENT, status__in=ReviewCase.OPEN_STATUSES
        ).values_list("operation_id", flat=True)
    )
    for operation_id in refused:
        operation_replay(operation_id=operation_id, actor=admin, reason="The CRM was fixed.")
    wait_settled(stack)
    return len(refused)


def plant_reconciliation_findings(stack: Stack) -> None:
    """A record deleted behind Onefold's back, and one made by hand with a contact."""
    enquiry = Operation.objects.filter(
        event_id__in=stack.event_ids, step="create_enquiry", status=Operation.Status.SUCCEEDED
    ).first()
    assert enquiry is not None
    crm = stack.sandbox.client
    crm.delete(f"/crm/records/{enquiry.destination_ref}").raise_for_status()
    person = stack.person()
    crm.post(
        "/crm/records",
        json={"name": person.name, "email": person.email, "message": person.message},
    ).raise_for_status()


def reconcile_twice(stack: Stack, since: str) -> None:
    until = (timezone.now() + timedelta(minutes=5)).isoformat()
    out = StringIO()
    call_command("reconcile", "--since", since, "--until", until, "--json", stdout=out)
    assert sum(json.loads(out.getvalue())["findings"].values()) >= 2
    child = spawn(
        "reconcile",
        ["reconcile", "--since", since, "--until", until, "--no-progress"],
        stack.log_dir,
        env={**app_env(stack.sandbox), **DEBUG_ENV},
    )
    assert child.process.wait(timeout=120) == 0, child.log()


# -- the search ------------------------------------------------------------------------


def missing_log(what: str) -> None:
    """A log the stack writes that cannot be searched: a failure under CI."""
    if IN_CI:
        pytest.fail(f"{what} cannot be found, so it cannot be searched")


def postgresql_window() -> LogWindow | None:
    try:
        return LogWindow.open(postgresql_log_path())
    except LogNotFoundError as exc:
        missing_log(f"PostgreSQL's server log ({exc})")
        return None


def logs_written(
    stack: Stack, windows: dict[str, LogWindow | None], caplog: pytest.LogCaptureFixture
) -> dict[str, str]:
    logs = {"this process (DEBUG, SQL included)": caplog.text}
    for name in ("web", "qcluster-1", "qcluster-2", "sweeper", "reconcile"):
        path = stack.log_dir / f"{name}.log"
        if path.exists():
            logs[f"{name}.log"] = path.read_text(errors="replace")
        else:
            missing_log(f"the {name} log ({path})")
    for name, window in windows.items():
        if window is not None:
            logs[f"{name} ({window.path})"] = window.read()
    return logs


def occurrences(logs: dict[str, str], values: list[str]) -> list[str]:
    found = []
    for name, text in logs.items():
        lowered = text.lower()
        for value in values:
            count = lowered.count(value.lower())
            if count:
                lines = [line for line in text.splitlines() if value.lower() in line.lower()]
                found.append(f"{name}: {count} x {value!r}, e.g. {lines[0][:400]!r}")
    return found


def assert_the_contacts_went_through(stack: Stack) -> None:
    """The search is not vacuous: the sink and the CRM hold the planted contacts."""
    stats = stack.sandbox.stats()
    delivered = {address.lower() for address in stats["messages_by_recipient"]}
    planted = {person.email.lower() for person in stack.people}
    assert len(delivered & planted) >= len(FAULTS) // 2
    assert any("xn--exmple-cua.com" in address for address in delivered)
    names = {
        record["name"] for record in stack.sandbox.client.get("/crm/records").json()["results"]
    }
    assert len(names & {person.name for person in stack.people}) >= len(FAULTS) // 2


@pytest.mark.slow
@pytest.mark.serial  # the whole stack, two clusters, every failure path
@on_real_parts
def test_no_log_holds_a_planted_contact(stack, qcluster_factory, caplog):
    since = (timezone.now() - timedelta(minutes=1)).isoformat()
    windows = {
        "PostgreSQL's server log": postgresql_window(),
        "the sandbox's log": LogWindow.open(stack.sandbox.child.log_path),
    }
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    connection.force_debug_cursor = True  # every SQL statement of this process is logged
    try:
        first = qcluster_factory("qcluster-1", **DEBUG_ENV)
        sweeper = qcluster_factory.sweeper("sweeper", **DEBUG_ENV)
        crash_mid_send(stack, first)
        second = qcluster_factory("qcluster-2", **DEBUG_ENV)
        refuse_bodies(stack)
        refuse_hook_deliveries(stack)
        ingest_here(stack)
        fail_at_destinations(stack)
        assert replay_cases(stack) >= 3  # create_record, create_task, send_email: 400s
        plant_reconciliation_findings(stack)
        reconcile_twice(stack, since)
        wait_settled(stack)
        assert_the_contacts_went_through(stack)
    finally:
        connection.force_debug_cursor = False
    for child in (second, sweeper, stack.web.child):
        child.stop()  # flushes what each wrote
    assert ReviewCase.objects.filter(kind=ReviewCase.Kind.INTERRUPTED_SEND).exists()
    assert any(r.name == "django.db.backends" for r in caplog.records)  # capture works
    probe = f"onefold-probe-{uuid.uuid4().hex}"
    postgresql_log_probe(probe)
    time.sleep(0.5)
    logs = logs_written(stack, windows, caplog)
    found = occurrences(logs, [value for person in stack.people for value in person.values()])
    assert not found, "personal data in the logs:\n" + "\n".join(found)
    if windows["PostgreSQL's server log"] is None:
        pytest.skip("PostgreSQL's server log cannot be read here; every other log was clean")
    # The server log searched is the one PostgreSQL writes: the probe is in it.
    assert any(probe in text for name, text in logs.items() if name.startswith("PostgreSQL"))


# -- the parts, in process ---------------------------------------------------------------


def test_the_filter_scrubs_tokens_addresses_contact_values_and_exception_messages():
    text = redact(
        "POST /hooks/web/t/s3cret/?email=ada%40example.com failed for Ada@Example.org: "
        '{"contact": {"name": "Ada", "email": "x"}, "message": "call me", "form": "contact"} '
        "args=(Jsonb({'name': 'Ada', 'fields': {'company': {'n': ['x']}}, 'id': 7}),)\n"
        "DETAIL:  Key (source_id, key)=(1, k) already exists.\n"
        'CONTEXT:  JSON data, line 1: {"form": "contact", "message": "cut sh\n'
        "ValueError: bad value 'Ada'"
    )
    for secret in ("s3cret", "ada%40", "Ada@", "Ada", "call me", "company", "cut sh", "(1, k)"):
        assert secret not in text, (secret, text)
    for kept in ('"form": "contact"', "'id': 7", "/hooks/web/t/[token]/", "ValueError: "):
        assert kept in text, (kept, text)
    # A Message-ID names an operation, not a person: it stays readable.
    assert redact("sent <opk_1a2b@onefold>") == "sent <opk_1a2b@onefold>"


def test_a_traceback_keeps_its_frames_and_classes_but_not_its_messages():
    person = Person.new()  # in variables: a traceback quotes its source lines
    try:
        try:
            raise ValueError(f"{person.email} is not allowed")
        except ValueError as exc:
            raise RuntimeError(f"the CRM said: {person.name}") from exc
    except RuntimeError:
        record = logging.getLogger("tests.pii").makeRecord(
            "tests.pii", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    RedactSecrets().filter(record)
    text = logging.Formatter().format(record)
    assert not occurrences({"traceback": text}, person.values())
    assert "ValueError: [redacted]" in text and "RuntimeError: [redacted]" in text
    assert "direct cause" in text and 'raise RuntimeError(f"the CRM said:' in text
    assert record.exc_info is None  # no later handler can render the original


@pytest.mark.django_db
def test_an_unexpected_error_is_logged_by_ids_and_class(sandbox, monkeypatch, caplog):
    # The sandbox answers the worker's verification; only the create itself breaks.
    person = Person.new()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"the CRM choked on {person.email} ({person.name})")

    monkeypatch.setattr(SandboxCrm, "create_record", refuse)
    source, _ = source_get_or_create(name="website")
    event = event_ingest(source=source, key="unexpected-1", payload=person.submission()).event
    enquiry = event.operations.get(step="create_enquiry")
    with caplog.at_level(logging.DEBUG):
        assert operation_execute(operation_id=enquiry.pk) == "ambiguous"
    engine = [r for r in caplog.records if r.name.startswith("idempotency_core.execution.")]
    (record,) = [r for r in engine if "unexpected" in r.getMessage()]
    assert record.getMessage().startswith(
        f"operation {enquiry.pk} (event {event.pk}): unexpected RuntimeError"
    )
    assert record.exc_info is None
    # The attempt's own line says what follows, by ids and codes only.
    assert any(
        r.getMessage().startswith(f"operation {enquiry.pk} (event {event.pk}) attempt 1: ambiguous")
        for r in engine
    )
    assert not occurrences({"log": caplog.text}, person.values())
    # The text is kept where a reviewer can read it, behind the console's login.
    assert person.email in enquiry.attempts.get().error_message


@pytest.mark.slow
@on_real_parts
def test_a_lost_race_for_a_new_key_leaves_no_contact_in_the_server_log(stack):
    window = postgresql_window()
    if window is None:
        pytest.skip("PostgreSQL's server log cannot be read here")
    person = stack.person()
    codes = requests_that_lose_the_race(stack, person, requests=4)
    assert set(codes) <= {200, 422}, codes  # each answered from the event that won
    probe = f"onefold-probe-{uuid.uuid4().hex}"
    postgresql_log_probe(probe)
    time.sleep(0.5)
    server_log = window.read()
    assert probe in server_log
    found = occurrences({"PostgreSQL's server log": server_log}, person.values())
    assert not found, "\n".join(found)


def requests_that_lose_the_race(stack: Stack, person: Person, *, requests: int) -> list[int]:
    """Deterministic: this process inserts the event and holds the row uncommitted until
    every request's INSERT waits on the unique index behind it, then commits: each
    INSERT then meets the committed row, as the losers of a real race do."""
    key, payload = f"race-{uuid.uuid4().hex}", person.submission()
    source = Source.objects.get(name="pii-api")
    pool = ThreadPoolExecutor(max_workers=requests)
    try:
        with transaction.atomic():
            event_ingest(source=source, key=key, payload=payload)
            futures = [
                pool.submit(stack.post, json.dumps(payload), key=key) for _ in range(requests)
            ]
            wait_for(
                lambda: inserts_waiting_on_a_lock() >= requests,
                timeout=30,
                what="every request to wait behind the uncommitted event",
            )
        return [future.result(timeout=30) for future in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def inserts_waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        # Inside a transaction the statistics views keep their first snapshot.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            # Ingest's one statement starts `WITH event AS (INSERT INTO ...`.
            ['%INSERT INTO "idempotency_core_event"%'],
        )
        return int(cursor.fetchone()[0])


def test_sql_in_the_log_keeps_its_shape_but_not_its_values(caplog):
    person = Person.new()
    record = logging.getLogger("django.db.backends").makeRecord(
        "django.db.backends",
        logging.DEBUG,
        __file__,
        1,
        "(%.3f) %s; args=%s; alias=%s",
        (
            0.001,
            f"""SELECT 1 FROM "event" WHERE ("payload" -> 'message') = '"{person.message}"'"""
            f""" AND "name" = 'O''Brien {person.name}' AND "id" = 7""",
            (person.message, person.name),
            "default",
        ),
        None,
    )
    RedactSecrets().filter(record)
    text = record.getMessage()
    assert not occurrences({"sql": text}, person.values())
    assert text == (
        """(0.001) SELECT 1 FROM "event" WHERE ("payload" -> '[redacted]') = '[redacted]'"""
        """ AND "name" = '[redacted]' AND "id" = 7; args=[redacted]; alias=default"""
    )
