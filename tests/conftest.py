"""Fixtures shared by the whole suite: sources, API clients, and real processes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Source
from integrations.oauth import credentials_forget
from tests.support.processes import (
    Child,
    Sandbox,
    WebServer,
    start_qcluster,
    start_sandbox,
    start_sweeper,
    start_web,
)

IN_CI = os.environ.get("CI") == "true"


@pytest.fixture
def source_and_key(db: None) -> tuple[Source, str]:
    source, _, key = source_create_with_key(name="website")
    return source, key


@pytest.fixture
def source(source_and_key: tuple[Source, str]) -> Source:
    return source_and_key[0]


@pytest.fixture
def api(source_and_key: tuple[Source, str]) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {source_and_key[1]}")
    return client


@pytest.fixture(scope="session")
def _sandbox_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sandbox = start_sandbox(tmp_path_factory.mktemp("sandbox"))
    yield sandbox
    sandbox.child.stop()


@pytest.fixture
def sandbox(_sandbox_process: Sandbox, settings) -> Iterator[Sandbox]:
    """The sandbox destination, reset, and this process's adapters pointed at it."""
    _sandbox_process.reset()
    settings.DESTINATION_URL = _sandbox_process.url
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = _sandbox_process.smtp_port
    yield _sandbox_process


@pytest.fixture
def unhurried_chain(settings) -> None:
    """A worker task's timeout long enough that its chain never stops for time.

    `tasks.operation_run` claims each next step in the same task only while the
    task's timeout leaves a lookup and a call (engine._chain_allowance). The suite's
    4 s leave half a second for every step before, which a loaded machine can
    spend on one: the next step is then queued (correctly), and no test that runs
    the task in process runs the queue. For tests about what the chain does, not
    about its deadline (that is
    tests/idempotency_core/execution/test_pipeline_perf.py's, with seconds=0).
    """
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 60}


@pytest.fixture(autouse=True)
def _no_shared_tokens() -> None:
    """Each test starts with no OAuth token held by this process (adapters share them,
    `integrations.oauth.shared_credentials`), so what one test was issued cannot save
    another its token call."""
    credentials_forget()


@pytest.fixture
def fresh_verifications() -> Iterator[None]:
    """This process's destination verifications forgotten before and after the test, so
    each test's declaration is verified anew."""
    from idempotency_core.execution.destinations import verification_forget

    verification_forget()
    yield
    verification_forget()


@pytest.fixture
def web_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[WebServer]:
    """The app under gunicorn (several processes) on the test database."""
    sandbox = request.getfixturevalue("sandbox") if "sandbox" in request.fixturenames else None
    server = start_web(tmp_path, sandbox)
    yield server
    server.child.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"\n===== web log =====\n{server.child.log()[-20000:]}")


@pytest.fixture
def qcluster_factory(tmp_path: Path, sandbox: Sandbox, request: pytest.FixtureRequest):
    """Starts real worker clusters (and, with `.sweeper()`, sweeper loops); stops them
    after, and prints their logs when the test failed."""
    children: list[Child] = []

    def start(name: str = "qcluster", **env: str) -> Child:
        child = start_qcluster(tmp_path, sandbox, name=name, env=env)
        children.append(child)
        return child

    def start_sweeper_loop(name: str = "sweeper", **env: str) -> Child:
        child = start_sweeper(tmp_path, sandbox, name=name, **env)
        children.append(child)
        return child

    start.sweeper = start_sweeper_loop
    yield start
    for child in children:
        child.stop()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for child in [*children, sandbox.child]:
            print(f"\n===== {child.name} log =====\n{child.log()[-20000:]}")


# -- running in parallel (pytest-xdist, `make test`) ------------------------------------
# Each xdist worker has its own test database (pytest-django suffixes its name, and
# the processes a test starts are handed that name: tests/support/processes.py),
# its own sandbox and its own free ports. Tests that must not run side by side are
# groups, each run test after test by one worker while the others take the rest:
# - serial: those that keep both of the machine's cores busy (the delivery storms,
#   two clusters under faults, generated requests) and those that time something;
# - paced: scenarios whose pace a vendor's rate limit sets (Resend's 2 requests a
#   second, HubSpot's 100 in 10 s), which mostly wait for the limit: beside each
#   other they would share one limit's worth of waiting, beside a serial test they
#   cost it little (the serial group alone was the suite's length with them in it);
# - browser: so that two Chromiums never run at once.
# A test outside the groups may start gunicorn or a cluster of its own: it runs
# beside the groups' tests and one other.

SERIAL_GROUP = "serial"
PACED_GROUP = "paced"
BROWSER_GROUP = "browser"
# Starts the whole quick-start stack in its own processes (its file marks nothing).
SERIAL_FILES = ("tests/test_quickstart.py",)


def _group_of(item: pytest.Item) -> str | None:
    if item.get_closest_marker("paced"):
        return PACED_GROUP
    if item.get_closest_marker("serial") or item.nodeid.startswith(SERIAL_FILES):
        return SERIAL_GROUP
    return BROWSER_GROUP if item.get_closest_marker("browser") else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = _group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


UNGROUPED = pytest.StashKey[bool]()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    # xdist groups a test by a suffix it writes into the test's id; pytest 9.2's
    # structured ids ignore the write (pytest-xdist#1386) and the group is
    # silently spread over every worker. Such a test fails instead.
    if getattr(session.config.option, "loadgroup", False):
        for item in session.items:
            if item.get_closest_marker("xdist_group") and "@" not in item.nodeid:
                item.stash[UNGROUPED] = True


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.stash.get(UNGROUPED, False):
        pytest.fail(
            "--dist loadgroup did not group this test: this pytest and pytest-xdist do "
            "not work together (pyproject.toml pins both)",
            pytrace=False,
        )


# -- the migrations' seed data, whatever the order -----------------------------------
# pytest-django runs the tests that roll back (`db`) before those that commit and
# flush every table after them (`transaction=True`, live_server), as Django does, so
# a rolled-back test always finds the migrations' seed data (groups, destinations).
# Under xdist, the worker that runs the serial group (which ends with committing
# tests) may be handed rolled-back tests after it: the seed data is put back first.

SEED_SNAPSHOT = pytest.StashKey[str]()
# Set when a committing test's flush emptied the tables; cleared when they are seeded.
FLUSHED = pytest.StashKey[bool]()


def _database_use(item: pytest.Item) -> str:
    """How the test uses the database: "commits" (every table is flushed after it),
    "rolls back", or "none"."""
    from pytest_django.plugin import validate_django_db

    fixtures = getattr(item, "fixturenames", ())
    marker = item.get_closest_marker("django_db")
    transaction, reset_sequences, *_ = validate_django_db(marker) if marker else (False, False)
    if transaction or reset_sequences or {"transactional_db", "live_server"} & set(fixtures):
        return "commits"
    return "rolls back" if marker or "db" in fixtures else "none"


def _seed_load(snapshot: str) -> None:
    """Empties every table and loads the seed data as the migrations left it."""
    from django.db import connections

    # The flush re-creates content types and permissions with new ids unless told
    # not to; start from empty tables so the snapshot's ids (which groups refer to)
    # fit. Sequences kept, as Django's own teardown flush keeps them: `flush` resets
    # them by default, and the snapshot's rows (destinations 1 and 2) then sat at ids
    # the sequence would hand out again, to the next test that creates one.
    call_command(
        "flush", interactive=False, inhibit_post_migrate=True, reset_sequences=False, verbosity=0
    )
    connections["default"].creation.deserialize_db_from_string(snapshot)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    from django.db import connections
    from pytest_django.plugin import blocking_manager_key

    # Kept while the database is set up and the connection still holds it (see
    # `_seed_snapshot` for when it does not).
    snapshot = getattr(connections["default"], "_test_serialized_contents", None)
    if snapshot:
        item.config.stash[SEED_SNAPSHOT] = snapshot
    result = yield
    stash = item.config.stash
    if _database_use(item) == "commits":
        stash[FLUSHED] = True
    snapshot = stash.get(SEED_SNAPSHOT, None)
    next_rolls_back = nextitem is not None and _database_use(nextitem) == "rolls back"
    if snapshot and stash.get(FLUSHED, False) and next_rolls_back:
        with stash[blocking_manager_key].unblock():
            _seed_load(snapshot)
        stash[FLUSHED] = False
    return result


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


# -- browser tests: the migrations' seed data across Playwright ----------------------


@pytest.fixture(scope="module")
def _seed_snapshot(django_db_setup: None) -> str | None:
    """The migrations' seed data (groups, destinations), serialized at database setup.

    Taken before Playwright starts: once its sync API runs, the test body sees a
    fresh connection object without the snapshot, so serialized_rollback silently
    restores nothing (pytest-django#1117) and the groups vanish after the
    first test's flush.
    """
    from django.db import connections

    return getattr(connections["default"], "_test_serialized_contents", None)


@pytest.fixture
def _seed_restored(transactional_db: None, _seed_snapshot: str | None) -> None:
    from django.contrib.auth.models import Group
    from django.db import connections

    connection = connections["default"]
    if _seed_snapshot and not Group.objects.filter(name="Reviewers").exists():
        _seed_load(_seed_snapshot)
    if _seed_snapshot and not hasattr(connection, "_test_serialized_contents"):
        # Hand the snapshot to this connection too, so the flush after the test
        # skips post_migrate and the next transactional test (here or in another
        # module) restores the seed cleanly, as serialized_rollback intends.
        connection._test_serialized_contents = _seed_snapshot
