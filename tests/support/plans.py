"""The plans PostgreSQL runs, as it runs them: auto_explain (a contrib module shipped
with the server) loaded into one session, its LOG lines sent to that session's client.

A plan is read from the execution itself, so what a test sees is the plan a prepared
statement's cache really held, with its real row counts, not a fresh EXPLAIN's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections


@contextmanager
def plans_run(alias: str = "default", *, nested: bool = False) -> Iterator[list[str]]:
    """Collects the plan of every statement executed on `alias` meanwhile; with `nested`,
    of the statements run inside functions too."""
    db = connections[alias]
    db.ensure_connection()
    raw = db.connection
    plans: list[str] = []

    def heard(notice: Any) -> None:
        if "plan:" in (notice.message_primary or ""):
            plans.append(notice.message_primary)

    with db.cursor() as cursor:
        cursor.execute("LOAD 'auto_explain'")
        for name, value in (
            ("auto_explain.log_min_duration", "0"),
            ("auto_explain.log_analyze", "on"),
            ("auto_explain.log_nested_statements", "on" if nested else "off"),
            ("client_min_messages", "log"),
        ):
            cursor.execute("SELECT set_config(%s, %s, false)", [name, value])
    raw.add_notice_handler(heard)
    try:
        yield plans
    finally:
        raw.remove_notice_handler(heard)
        with db.cursor() as cursor:
            cursor.execute("SELECT set_config('auto_explain.log_min_duration', '-1', false)")
            cursor.execute("RESET client_min_messages")
