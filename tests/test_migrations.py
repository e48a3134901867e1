"""0.2.0's migrations: one per app, replacing 0.1.0's; a database upgraded from 0.1.0
equals a new one (lab/upgrade_check.py), and one partway through 0.1.0's is refused
before anything is applied (onefold.E009)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from idempotency_core.checks import check_squashed_migrations
from lab.upgrade_check import UpgradeCheckError, old_commit_find, schema_objects, upgrade_check

APPS = ("idempotency_core", "review_console")
SQUASH = "0001_squashed_0_2_0"


def test_each_app_has_at_most_four_migrations():
    for app in APPS:
        found = sorted(p.name for p in (Path(settings.BASE_DIR) / app / "migrations").glob("0*.py"))
        assert 1 <= len(found) <= 4, (app, found)


@pytest.mark.django_db
def test_a_migrated_database_passes_the_check():
    assert check_squashed_migrations(databases=["default"]) == []


@pytest.mark.django_db
def test_a_database_with_some_of_the_replaced_migrations_is_refused():
    """As a database partway through 0.1.0's migrations looks: all but the last of
    them recorded, the squash not (rolled back with the test)."""
    squash = MigrationLoader(None).get_migration("idempotency_core", SQUASH)
    last = squash.replaces[-1][1]
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM django_migrations WHERE app = 'idempotency_core' AND name IN (%s, %s)",
            [SQUASH, last],
        )
    errors = check_squashed_migrations(databases=["default"])
    assert [error.id for error in errors] == ["onefold.E009"]
    count = len(squash.replaces)
    assert f"{count - 1} of the {count} migrations that idempotency_core.{SQUASH}" in errors[0].msg


def test_a_table_compares_by_its_columns_whatever_their_order():
    dump = (
        "--\n-- Name: t; Type: TABLE\n--\nCREATE TABLE public.t (\n    a integer,\n    b text\n);\n"
    )
    later = dump.replace("    a integer,\n    b text\n", "    b text,\n    a integer\n")
    stamped = later + "ALTER TABLE ONLY public.t ALTER COLUMN a SET (pg_attver=12);\n"
    assert schema_objects(dump) == schema_objects(later) == schema_objects(stamped)
    assert schema_objects(dump) != schema_objects(dump.replace("a integer", "a bigint"))


@pytest.mark.slow
def test_a_database_upgraded_from_0_1_0_is_a_new_database():
    """Three databases of its own on the test server, built by `migrate` subprocesses
    (a minute or two): the comparison names any difference."""
    repo = Path(settings.BASE_DIR)
    try:
        old_commit_find(repo)
    except UpgradeCheckError as error:
        pytest.skip(f"this checkout has no history with 0.1.0's migrations: {error}")
    report = upgrade_check(repo=repo, say=lambda line: None)
    assert report.differences == []
    assert report.schema_objects > 250
    assert report.rows["groups"] >= 9 and report.rows["schedules"] == 3
