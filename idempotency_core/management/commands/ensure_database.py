"""`manage.py ensure_database`: creates the PostgreSQL database DATABASE_URL names, if absent.

For `make bench`, whose databases are throwaway.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.conf import settings
from django.core.management.base import BaseCommand
from psycopg import sql


class Command(BaseCommand):
    help = "Create the configured PostgreSQL database if it does not exist."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def handle(self, *args: Any, **options: Any) -> None:
        db = settings.DATABASES["default"]
        # psycopg leaves out the parameters given as None (libpq's defaults apply).
        with psycopg.connect(
            dbname="postgres",
            user=db.get("USER") or None,
            password=db.get("PASSWORD") or None,
            host=db.get("HOST") or None,
            port=db.get("PORT") or None,
            autocommit=True,
        ) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]
            ).fetchone()
            if exists:
                self.stdout.write(f"database {db['NAME']} exists")
                return
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
            self.stdout.write(f"created database {db['NAME']}")
