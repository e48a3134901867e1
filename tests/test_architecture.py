"""Rules about the shape of the code, checked on the source itself (no database).

Functions stay short; product code never reaches for `django.test` and never asks
which database engine it runs on (PostgreSQL is the only one); test modules
share builders through tests/factories.py rather than importing one another; and
the layering in pyproject.toml's `[tool.importlinter]` holds.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("config", "idempotency_core", "integrations", "review_console")
MAX_FUNCTION_LINES = 60


def python_files(top: str, *, migrations: bool = False) -> Iterator[Path]:
    for path in sorted((REPO / top).rglob("*.py")):
        if migrations or "migrations" not in path.relative_to(REPO).parts:
            yield path


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO)}:{line}"


# -- function length ---------------------------------------------------------------


def string_lines(function: ast.AST) -> int:
    """How many of `function`'s lines lie inside string literals (plain or f-strings)."""
    covered: set[int] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.JoinedStr) or (
            isinstance(node, ast.Constant) and isinstance(node.value, str)
        ):
            covered.update(range(node.lineno, node.end_lineno + 1))
    return len(covered)


def long_functions(top: str) -> list[str]:
    """`path:line name (N lines)` for each function or method over the limit, counted
    from its `def` line (decorators excluded) to the end of its body."""
    offenders = []
    for path in python_files(top):
        for node in ast.walk(parse(path)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            lines = node.end_lineno - node.lineno + 1
            # SQL text is allowed: a function whose lines are mostly string literals
            # (the statements it composes) would not read better cut up.
            if lines > MAX_FUNCTION_LINES and string_lines(node) * 2 <= lines:
                offenders.append(f"{where(path, node.lineno)} {node.name} ({lines} lines)")
    return offenders


@pytest.mark.parametrize("top", [*PRODUCT, "tests"])
def test_no_function_is_longer_than_60_lines(top):
    offenders = long_functions(top)
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)


# -- imports -----------------------------------------------------------------------


def imported_names(path: Path, tree: ast.Module) -> Iterator[tuple[int, set[str]]]:
    """(line, absolute dotted names) for each import statement of the module at `path`.

    `from a.b import c` yields both `a.b` and `a.b.c`, since `c` may be a module;
    relative imports are resolved against the module's package.
    """
    package = list(path.relative_to(REPO).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield node.lineno, {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, {module} | {f"{module}.{alias.name}" for alias in node.names}


def test_product_code_never_imports_django_test():
    offenders = []
    for top in PRODUCT:
        for path in python_files(top, migrations=True):
            for line, names in imported_names(path, parse(path)):
                if any(name == "django.test" or name.startswith("django.test.") for name in names):
                    offenders.append(f"{where(path, line)} imports django.test")
    assert not offenders, "product code importing django.test:\n" + "\n".join(offenders)


# A connection's `vendor` (`connection.vendor`, `connections[alias].vendor`) or SQLite.
ENGINE_BRANCH = re.compile(r"\.vendor\b|sqlite", re.IGNORECASE)


def test_product_code_is_written_for_postgresql_alone():
    """PostgreSQL is the only engine (docs/architecture.md): no module of the product asks which
    engine it runs on, or names another, in code, comments, docstrings or migrations; the
    lab's sandbox keeps its own SQLite store."""
    offenders = [
        f"{where(path, number)} {line.strip()}"
        for top in PRODUCT
        for path in python_files(top, migrations=True)
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if ENGINE_BRANCH.search(line)
    ]
    assert not offenders, "engine branches or SQLite in product code:\n" + "\n".join(offenders)


TEST_OR_CONFTEST = re.compile(r"^(test_.*|conftest)$")


def test_test_modules_import_helpers_from_factories_not_from_each_other():
    offenders = []
    for path in python_files("tests"):
        for line, names in imported_names(path, parse(path)):
            bad = sorted(
                name
                for name in names
                if name.startswith("tests.")
                and any(TEST_OR_CONFTEST.match(part) for part in name.split("."))
            )
            if bad:
                offenders.append(f"{where(path, line)} imports {bad[0]}")
    assert not offenders, (
        "test modules importing a test module or a conftest "
        "(move the helper to tests/factories.py):\n" + "\n".join(offenders)
    )


def test_import_linter_contracts_are_kept():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    # --no-cache: the cache directory would be left in the repository.
    result = subprocess.run(
        [str(lint_imports), "--no-cache"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- public APIs of the libraries -------------------------------------------------------

LIBRARIES = ("psycopg", "django", "django_q")
# django-q2 modules its documentation does not present (how it signs a package).
UNDOCUMENTED = ("django_q.signing", "django_q.core_signing")


def private_imports(path: Path, tree: ast.Module) -> Iterator[str]:
    for line, names in imported_names(path, tree):
        for name in sorted(names):
            parts = name.split(".")
            if parts[0] in LIBRARIES and (
                any(part.startswith("_") for part in parts)
                or any(name == module or name.startswith(f"{module}.") for module in UNDOCUMENTED)
            ):
                yield f"{where(path, line)} imports {name}"


def private_members() -> set[str]:
    """The underscored attributes and methods of the cursor, connection and broker
    classes product code works with: reading, writing or overriding one is using an
    internal."""
    import django_q.brokers.orm
    import psycopg
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.utils import CursorWrapper

    classes = (
        psycopg.Cursor,
        psycopg.RawCursor,
        psycopg.ClientCursor,
        psycopg.Connection,
        BaseDatabaseWrapper,
        CursorWrapper,
        django_q.brokers.orm.ORM,
    )
    return {
        name
        for cls in classes
        for name in dir(cls)
        if name.startswith("_") and not name.endswith("__")
    }


def private_member_uses(path: Path, tree: ast.Module, members: set[str]) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in members:
            yield f"{where(path, node.lineno)} uses .{node.attr}"
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                defined = {item.name} if isinstance(item, ast.FunctionDef) else set()
                if isinstance(item, ast.Assign | ast.AnnAssign):
                    targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                    defined = {t.id for t in targets if isinstance(t, ast.Name)}
                for name in sorted(defined & members):
                    yield f"{where(path, item.lineno)} overrides {name}"


def test_product_code_uses_only_the_public_api_of_psycopg_django_and_django_q():
    members = private_members()
    offenders = [
        offence
        for top in PRODUCT
        for path in python_files(top, migrations=True)
        for tree in [parse(path)]
        for offence in [*private_imports(path, tree), *private_member_uses(path, tree, members)]
    ]
    assert not offenders, "private library API in product code:\n" + "\n".join(offenders)


# The one module that writes django-q2's queue table: the broker class (Q_CLUSTER's
# `broker_class`, django-q2's documented extension point).
BROKER_MODULE = Path("idempotency_core/broker.py")
QUEUE_TABLE_WRITE = re.compile(
    r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?|COPY|MERGE\s+INTO)"
    r"\s+(?:ONLY\s+)?\"?django_q_ormq\b",
    re.IGNORECASE,
)
# What a read of the queue may call on `OrmQ.objects`; anything else may write.
QUEUE_READS = frozenset(
    {"objects", "using", "filter", "exclude", "order_by", "values", "values_list", "annotate"}
    | {"exists", "count", "first", "last", "get", "all", "aggregate", "iterator", "only"}
    | {"DoesNotExist", "MultipleObjectsReturned"}
)


def queue_writes(path: Path, tree: ast.Module) -> Iterator[str]:
    """SQL text that writes the queue table, and any use of django-q2's `OrmQ` model but
    a read through its manager (`OrmQ.objects.filter(...).count()`)."""
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "django_q.models"
        for alias in node.names
        if alias.name == "OrmQ"
    }
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if QUEUE_TABLE_WRITE.search(node.value):
                yield f"{where(path, node.lineno)} writes django_q_ormq in SQL"
        elif isinstance(node, ast.Name) and node.id in names and not _a_read(node, parents):
            yield f"{where(path, node.lineno)} uses {node.id} beyond a read"


def _a_read(name: ast.Name, parents: dict[ast.AST, ast.AST]) -> bool:
    """`name` starts a chain of `QUEUE_READS` attributes and calls of them that is not
    handed to anything as an argument (which might write through it)."""
    use: ast.AST = name
    while True:
        parent = parents.get(use)
        if isinstance(parent, ast.Attribute):
            if parent.attr not in QUEUE_READS:
                return False
        elif isinstance(parent, ast.Call):
            if parent.func is not use:
                return False
        else:
            return use is not name
        use = parent


def test_only_the_broker_class_writes_django_q2s_queue():
    offenders = [
        offence
        for top in PRODUCT
        for path in python_files(top)
        if path.relative_to(REPO) != BROKER_MODULE
        for offence in queue_writes(path, parse(path))
    ]
    assert not offenders, "queue rows written outside the broker class:\n" + "\n".join(offenders)


# -- a repository that stands alone ------------------------------------------------------


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    return [REPO / name for name in listed.split("\0") if name and (REPO / name).is_file()]


def tracked_lines(paths: list[Path]) -> Iterator[tuple[Path, int, str]]:
    for path in paths:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            yield path, number, line


# The design notes the project was started from, kept outside the repository, and the
# folder beside it that held them: what they said is in docs/ now.
OUTSIDE_NOTES = ("DESIGN", "TASK-QUEUE", "CRM-FACTS", "CONTRACT", "TESTING", "STYLE")
OUTSIDE_REFERENCE = re.compile(
    r"\b(?:" + "|".join(OUTSIDE_NOTES) + r")\.md"
    r"|\[FACTS\]"
    r"|\.\./shared|\bshared[/\\]"
    r"|parents?\b[^\n]*[\"']shared[\"']"
)
# An upper-case document name not inside a path or URL (README.md, CONTRIBUTING.md).
DOCUMENT_NAME = re.compile(r"(?<![\w./-])([A-Z][A-Z0-9_-]*\.md)\b")


def test_no_tracked_file_names_a_document_outside_the_repository():
    """A clone alone is the whole project: no file points to the notes it was started
    from, to a folder beside the clone, or to an upper-case document it does not hold."""
    files = tracked_files()
    held = {path.name for path in files}
    offenders = [
        f"{where(path, number)} {line.strip()[:120]}"
        for path, number, line in tracked_lines(files)
        if OUTSIDE_REFERENCE.search(line)
        or any(name not in held for name in DOCUMENT_NAME.findall(line))
    ]
    assert not offenders, "references to documents outside the repository:\n" + "\n".join(offenders)


# The word "issue" and a number: the project's own tracker belongs in git history and the
# CHANGELOG. An upstream issue is cited by its repository (pytest-xdist#1386).
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?[0-9]+\b", re.IGNORECASE)
WITHOUT_ISSUE_NUMBERS = (*PRODUCT, "lab", "tests", "templates")


def test_code_and_tests_name_no_issue_numbers():
    offenders = [
        f"{where(path, number)} {line.strip()[:120]}"
        for path, number, line in tracked_lines(tracked_files())
        if path.relative_to(REPO).parts[0] in WITHOUT_ISSUE_NUMBERS
        and "migrations" not in path.relative_to(REPO).parts
        and ISSUE_NUMBER.search(line)
    ]
    assert not offenders, "issue numbers in code or tests:\n" + "\n".join(offenders)
