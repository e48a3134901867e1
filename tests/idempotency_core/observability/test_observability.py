"""Operations (docs/operations.md): /healthz, /readyz,
/metrics behind a token or an allowed network, JSON log lines, `manage.py status`.

The proofs that matter run on real processes: a gunicorn whose database refuses
connections, and one whose database accepts and never answers, each answering
/readyz 503; and a scenario with a success, a retry and a case, run by a real
qcluster and sweeper against the sandbox and scraped from a gunicorn with three
workers, where every figure is what the scenario did.
"""

from __future__ import annotations

import io
import ipaddress
import json
import logging
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.core.management import call_command
from django_q.models import OrmQ
from django_q.signals import post_execute_in_worker, pre_execute
from prometheus_client.parser import text_string_to_metric_families

from idempotency_core.execution.engine import TASK
from idempotency_core.intake.ingest import event_ingest
from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Event, Operation
from idempotency_core.platform.logfilters import (
    JsonFormatter,
    QuietTaskLines,
    RedactSecrets,
    log_ids_bound,
)
from tests.factories import submission
from tests.support.processes import REPO, WebServer, start_web, wait_for

TOKEN = "metrics-token-" + uuid.uuid4().hex

# -- probes --------------------------------------------------------------------


def test_healthz_answers_without_touching_the_database(client):
    # No database mark: pytest-django refuses any query, so a 200 proves none was made.
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"


def test_readyz_answers_200_when_the_database_and_the_queue_answer(client, db):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "status": "ready",
        "checks": {"database": "ok", "task_queue": "ok"},
        "failed": [],
    }


@pytest.fixture
def silent_database() -> Iterator[int]:
    """A port that accepts connections (the kernel completes the handshake) and never
    answers: a database host that hangs rather than refuses."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


def web_on_database(tmp_path: Path, name: str, database_url: str) -> WebServer:
    return start_web(
        tmp_path,
        workers=1,
        name=name,
        env={"DATABASE_URL": database_url, "ONEFOLD_READY_TIMEOUT_SECONDS": "1"},
    )


def test_a_web_process_whose_database_refuses_is_alive_but_not_ready(tmp_path):
    server = web_on_database(
        tmp_path, "web-refused", f"postgres://postgres@127.0.0.1:{closed_port()}/onefold"
    )
    try:
        ready = httpx.get(f"{server.url}/readyz", timeout=30)
        assert ready.status_code == 503
        assert ready.json() == {
            "status": "unready",
            "checks": {"database": "OperationalError", "task_queue": "OperationalError"},
            "failed": ["database", "task_queue"],
        }
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
        # The scrape still answers, and says the figures could not be read.
        scraped = httpx.get(f"{server.url}/metrics", timeout=30)
        assert scraped.status_code == 200
        assert samples(scraped.text)[("onefold_database_up", ())] == 0
    finally:
        server.child.stop()


@pytest.mark.serial  # the probe is timed
def test_a_database_that_never_answers_makes_readyz_fail_within_its_timeout(
    tmp_path, silent_database
):
    server = web_on_database(
        tmp_path, "web-silent", f"postgres://postgres@127.0.0.1:{silent_database}/onefold"
    )
    try:
        for _ in range(2):  # the second probe waits on the first one's thread, not a new one
            started = time.monotonic()
            ready = httpx.get(f"{server.url}/readyz", timeout=30)
            assert time.monotonic() - started < 5
            assert ready.status_code == 503
            assert ready.json()["checks"] == {"database": "timeout", "task_queue": "timeout"}
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
    finally:
        server.child.stop()


# -- /metrics access -----------------------------------------------------------------


def test_metrics_refuses_a_wrong_or_missing_token(client, db, settings):
    settings.ONEFOLD_METRICS_TOKEN = TOKEN
    for header in [None, "Bearer wrong", f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN]:
        extra = {"HTTP_AUTHORIZATION": header} if header else {}
        refused = client.get("/metrics", **extra)
        assert refused.status_code == 401, header
        assert refused["WWW-Authenticate"] == 'Bearer realm="metrics"'
        assert b"onefold_" not in refused.content
    served = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert served.status_code == 200
    assert served["Content-Type"].startswith("text/plain; version=")
    assert samples(served.content.decode())[("onefold_database_up", ())] == 1


def test_metrics_from_an_allowed_network_only(client, db, settings):
    settings.ONEFOLD_METRICS_ALLOW_IPS = [ipaddress.ip_network("10.0.0.0/8")]
    assert client.get("/metrics").status_code == 403  # the test client is 127.0.0.1
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::ffff:10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.168.1.2").status_code == 403
    # Both set: both must hold.
    settings.ONEFOLD_METRICS_TOKEN = TOKEN
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 401
    allowed = client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert allowed.status_code == 200


def test_metrics_open_beyond_loopback_is_warned_about(settings):
    from idempotency_core.observability.checks import check_metrics_protected

    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["onefold.example.com"]
    settings.ONEFOLD_METRICS_TOKEN = ""
    settings.ONEFOLD_METRICS_ALLOW_IPS = []
    assert [m.id for m in check_metrics_protected()] == ["onefold.W002"]
    settings.ONEFOLD_METRICS_TOKEN = TOKEN
    assert check_metrics_protected() == []
    settings.ONEFOLD_METRICS_TOKEN = ""
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    assert check_metrics_protected() == []


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text as {(sample name, sorted labels): value}."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


# -- JSON log lines --------------------------------------------------------------------


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The root logger also writes through the filter and the JSON formatter, as
    LOG_FORMAT=json sets up every handler."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactSecrets())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield stream
    finally:
        root.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_carries_the_ids_and_no_contact(json_log):
    event_id = uuid.uuid4()
    logger = logging.getLogger("onefold.test")
    try:
        raise ValueError("ada.planted@example.com refused")
    except ValueError:
        with log_ids_bound(event_id=event_id):
            logger.warning(
                "delivery %s for %s",
                7,
                "ada.planted@example.com",
                # Only the ids of `extra=` are written; any other key is not.
                extra={"operation_id": 42, "delivery_id": 7, "email": "ada.planted@example.com"},
                exc_info=True,
            )
    logger.warning("after")
    first, after = lines(json_log)
    assert first["event_id"] == str(event_id)
    assert (first["operation_id"], first["delivery_id"]) == ("42", "7")
    assert first["level"] == "WARNING" and first["logger"] == "onefold.test"
    assert "planted" not in json_log.getvalue()
    assert "email" not in first
    assert "ValueError: [redacted]" in first["exception"]
    assert set(after) == {"time", "level", "logger", "message"}


def test_a_worker_binds_the_operation_of_the_task_it_runs(json_log):
    # What django-q2's worker sends around the call of each task (django_q/worker.py).
    task = {"func": TASK, "args": (4711,), "kwargs": {}}
    pre_execute.send(sender="django_q", func=None, task=task)
    logging.getLogger("onefold.test").warning("inside the task")
    post_execute_in_worker.send(sender="django_q", func=None, task=task)
    logging.getLogger("onefold.test").warning("between tasks")
    inside, between = lines(json_log)
    assert inside["operation_id"] == "4711"
    assert "operation_id" not in between


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the clusters see the rows
def test_django_q2s_three_lines_a_task_are_dropped_unless_asked_for(
    sandbox, qcluster_factory, caplog
):
    """QuietTaskLines (idempotency_core/platform/logfilters.py) on real parts: this
    process queues the task, a real cluster runs it; then a cluster started with
    ONEFOLD_Q_TASK_LINES=true."""
    source, _, _ = source_create_with_key(name="website")
    caplog.set_level(logging.INFO)
    quiet = qcluster_factory("quiet")
    first = event_ingest(source=source, key="quiet-1", payload=_person("quiet")).event
    wait_for(lambda: _succeeded(first), timeout=60, what="the first submission's three steps")
    # The monitor acknowledges (deletes the queue row), then would log "Processed".
    wait_for(lambda: not OrmQ.objects.exists(), timeout=30, what="the acknowledgement")
    time.sleep(1)
    quiet.stop()
    loud = qcluster_factory("loud", ONEFOLD_Q_TASK_LINES="true")
    second = event_ingest(source=source, key="loud-1", payload=_person("loud")).event
    processed = "Processed 'idempotency_core.tasks.operation_run'"
    wait_for(lambda: processed in loud.log(), timeout=60, what="the monitor's line")
    loud.stop()

    # Queued here: no "Enqueued [onefold] ..." line.
    assert not [r for r in caplog.records if r.name == "django-q"]
    quiet_lines = quiet.log()
    assert "Q Cluster" in quiet_lines and "running" in quiet_lines  # its own lines stay
    assert " processing " not in quiet_lines and "Processed '" not in quiet_lines
    assert f"processing operation-{second.operations.get(position=0).pk}" in loud.log()


@pytest.mark.parametrize(
    ("module", "level", "message", "kept"),
    [
        ("tasks", logging.INFO, "Enqueued [onefold] 7", False),
        ("worker", logging.INFO, "Process-1:1 processing operation-7 'f'", False),
        ("monitor", logging.INFO, "Processed 'f' (operation-7)", False),
        ("monitor", logging.ERROR, "Failed 'f' (operation-7) - boom", True),
        ("cluster", logging.INFO, "Q Cluster x running.", True),
        ("worker", logging.INFO, "Process-1:1 ready for work at 12", True),
        ("engine", logging.INFO, "Processed 'f' by someone else", True),
    ],
)
def test_the_per_task_filter_drops_only_django_q2s_per_task_info_lines(
    module, level, message, kept
):
    record = logging.LogRecord("django-q", level, f"/x/{module}.py", 1, message, (), None)
    assert QuietTaskLines().filter(record) is kept


def _person(name: str) -> dict:
    return submission(contact={"name": name, "email": f"{name}@example.com"})


def _succeeded(event: Event) -> bool:
    return set(event.operations.values_list("status", flat=True)) == {"succeeded"}


@pytest.mark.parametrize(("log_format", "json_lines"), [("json", True), ("plain", False)])
def test_log_format_chooses_the_console_format(log_format, json_lines):
    checked = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO,
        env={
            "PATH": "/usr/bin:/bin",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "LOG_FORMAT": log_format,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr
    logged = [line for line in checked.stderr.splitlines() if "AXES: BEGIN" in line]
    assert logged, checked.stderr
    if json_lines:
        assert json.loads(logged[0])["logger"] == "axes.apps"
    else:
        assert logged[0].split()[2:4] == ["INFO", "axes.apps"]


# -- a scenario, scraped -------------------------------------------------------------


@pytest.fixture
def metered_web(tmp_path: Path, sandbox, request: pytest.FixtureRequest) -> Iterator[WebServer]:
    """gunicorn, three workers, the metrics token set and django-prometheus's
    counters shared between the workers (PROMETHEUS_MULTIPROC_DIR)."""
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    server = start_web(
        tmp_path,
        sandbox,
        workers=3,
        env={"ONEFOLD_METRICS_TOKEN": TOKEN, "PROMETHEUS_MULTIPROC_DIR": str(multiproc)},
    )
    yield server
    server.child.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"\n===== web log =====\n{server.child.log()[-20000:]}")


def send(web: WebServer, key: str, api_key: str, planted: str) -> httpx.Response:
    body = submission(
        contact={"name": "Metric Person", "email": f"{planted}@example.com"},
        message=f"Message {planted}",
    )
    return httpx.post(
        f"{web.url}/api/v1/submissions/",
        json=body,
        headers={"Authorization": f"Api-Key {api_key}", "Idempotency-Key": key},
        timeout=30,
    )


def settled(event_id: str, enquiry: str) -> bool:
    """The event's enquiry step ended as `enquiry`, and nothing is left to run."""
    statuses = dict(Operation.objects.filter(event_id=event_id).values_list("step", "status"))
    waiting = {"pending", "running", "retry_scheduled"} & set(statuses.values())
    return statuses.get("create_enquiry") == enquiry and not waiting


def run_scenario(web: WebServer, sandbox, api_key: str, planted: str) -> dict[str, str]:
    """A success after a retry (503 once), a case (400), a plain success, a repeat.
    Returns the event id of each."""
    events = {}
    for name, fault in [("retried", "http_503"), ("refused", "http_400"), ("plain", None)]:
        if fault:
            sandbox.fault("create_record", fault, seconds=0)
        answer = send(web, f"metrics-{name}-{planted}", api_key, f"{planted}-{name}")
        assert answer.status_code == 202, answer.text
        events[name] = event_id = answer.json()["event_id"]
        enquiry = "needs_review" if name == "refused" else "succeeded"
        wait_for(
            lambda event_id=event_id, enquiry=enquiry: settled(event_id, enquiry),
            timeout=60,
            what=f"the {name} event to settle",
        )
    repeat = send(web, f"metrics-plain-{planted}", api_key, f"{planted}-plain")
    assert repeat.status_code == 200
    return events


def scrape(web: WebServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert httpx.get(f"{web.url}/metrics", timeout=30).status_code == 401
    wrong = httpx.get(f"{web.url}/metrics", headers={"Authorization": "Bearer no"}, timeout=30)
    assert wrong.status_code == 401
    served = httpx.get(
        f"{web.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )
    assert served.status_code == 200
    return samples(served.text)


def figure(scraped: dict, name: str, **labels: str) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # processes see the rows
def test_a_scrape_counts_a_success_a_retry_and_a_case(
    sandbox, metered_web, qcluster_factory, capsys
):
    cluster = qcluster_factory()
    qcluster_factory.sweeper()  # makes the retry due again
    _, _, api_key = source_create_with_key(name="website")
    planted = f"obs-{uuid.uuid4().hex[:12]}"
    events = run_scenario(metered_web, sandbox, api_key, planted)

    scraped = scrape(metered_web)
    attempts = {
        outcome: figure(scraped, "onefold_attempts_recent", destination="crm", outcome=outcome)
        for outcome in ["succeeded", "retryable", "permanent", "ambiguous", "interrupted"]
    }
    # crm: the retried event's enquiry (after one 503) and task, the plain one's two,
    # the refused one's enquiry (400); email: two confirmations.
    assert attempts == {
        "succeeded": 4,
        "retryable": 1,
        "permanent": 1,
        "ambiguous": 0,
        "interrupted": 0,
    }
    email = figure(scraped, "onefold_attempts_recent", destination="email", outcome="succeeded")
    assert email == 2
    assert figure(scraped, "onefold_open_cases", kind="permanent_failure") == 1
    assert figure(scraped, "onefold_oldest_open_case_age_seconds", kind="permanent_failure") > 0
    assert figure(scraped, "onefold_open_cases", kind="suspected_duplicate") == 0
    # The refused event's enquiry and the two steps its case holds.
    assert figure(scraped, "onefold_operations_active", status="needs_review") == 3
    assert figure(scraped, "onefold_oldest_due_operation_age_seconds") == 0
    submissions = {
        (outcome, code): figure(
            scraped, "onefold_submissions_recent", source="website", outcome=outcome, code=code
        )
        for outcome, code in [("accepted", "202"), ("replayed", "200")]
    }
    assert submissions == {("accepted", "202"): 3, ("replayed", "200"): 1}
    assert_web_layer_counted(scraped)
    assert_status_prints_the_same_figures(scraped, capsys)
    assert_worker_logs_are_json_without_contacts(cluster.log(), planted, events)


def assert_web_layer_counted(scraped: dict) -> None:
    """django-prometheus's counters, added up over the three gunicorn workers."""
    name = "django_http_responses_total_by_status_view_method_total"
    view = "submission-create"
    assert figure(scraped, name, method="POST", status="202", view=view) == 3
    assert figure(scraped, name, method="POST", status="200", view=view) == 1


PRINTED = re.compile(r"^(\w+)(?:\{(.*)\})?$")


def assert_status_prints_the_same_figures(scraped: dict, capsys) -> None:
    """Every onefold_* sample of the scrape, printed with the same value (ages aside:
    they grow between the two readings)."""
    capsys.readouterr()
    call_command("status")
    printed = {}
    for line in capsys.readouterr().out.splitlines()[2:]:
        text, value = re.split(r"\s{2,}", line)
        name, labels = PRINTED.match(text).groups()
        pairs = re.findall(r'(\w+)="([^"]*)"', labels or "")
        printed[(name, tuple(sorted(pairs)))] = value
    expected = {
        key: str(int(value))
        for key, value in scraped.items()
        if key[0].startswith("onefold_")
        and key[0] != "onefold_database_up"
        and not key[0].endswith("_age_seconds")
    }
    assert expected, scraped
    assert {key: printed.get(key) for key in expected} == expected
    window = ("onefold_metrics_window_seconds", ())
    assert printed[window] == str(settings.ONEFOLD_METRICS_WINDOW_SECONDS)


def assert_worker_logs_are_json_without_contacts(
    log: str, planted: str, events: dict[str, str]
) -> None:
    json_lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert json_lines, log
    assert all({"time", "level", "logger", "message"} <= set(line) for line in json_lines)
    assert planted not in log
    # Lines logged while a task ran name its operation (the engine's line for the
    # retried and the refused attempt, for two), and only operations of this scenario.
    bound = {line["operation_id"] for line in json_lines if "operation_id" in line}
    ours = Operation.objects.filter(event_id__in=events.values()).values_list("pk", flat=True)
    assert bound, log
    assert bound <= {str(pk) for pk in ours}
