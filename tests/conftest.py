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
    restores nothing (pytest-django issue #1117) and the groups vanish after the
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
        # The flush re-created content types and permissions with new ids; start
        # from empty tables so the snapshot's ids (which groups refer to) fit.
        # Sequences kept, as Django's own teardown flush keeps them: `flush` resets them
        # by default, and the snapshot's rows (destinations 1 and 2) then sat at ids
        # the sequence would hand out again, to the next test that creates one.
        call_command(
            "flush",
            interactive=False,
            inhibit_post_migrate=True,
            reset_sequences=False,
            verbosity=0,
        )
        connection.creation.deserialize_db_from_string(_seed_snapshot)
    if _seed_snapshot and not hasattr(connection, "_test_serialized_contents"):
        # Hand the snapshot to this connection too, so the flush after the test
        # skips post_migrate and the next transactional test (here or in another
        # module) restores the seed cleanly, as serialized_rollback intends.
        connection._test_serialized_contents = _seed_snapshot
