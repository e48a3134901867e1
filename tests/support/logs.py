"""The logs a test run writes, for tests that search them for what must never be there
(secrets, signatures, personal data): the children's log files and PostgreSQL's
server log, read from where the test began.

PostgreSQL's server log is found from the server itself when it runs a logging
collector (`pg_current_logfile()`), else from `pg_lsclusters` (Debian's
wrapper writes the server's stderr to the file in its "Log file" column).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from django.db import connection


class LogNotFoundError(RuntimeError):
    """A log the test must read cannot be found or read on this machine."""


def postgresql_log_path() -> Path:
    """The file the running PostgreSQL server writes its log to."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_logfile(), current_setting('data_directory')")
        current, data_directory = cursor.fetchone()
        cursor.execute("SELECT current_setting('port')")
        (port,) = cursor.fetchone()
    if current:
        path = Path(current)
        return path if path.is_absolute() else Path(data_directory) / path
    found = _lsclusters_log(str(port), str(data_directory))
    if found is None:
        raise LogNotFoundError(
            "PostgreSQL's server log: no logging collector (pg_current_logfile() is NULL) "
            f"and pg_lsclusters names no log file for port {port} ({data_directory})"
        )
    return found


def _lsclusters_log(port: str, data_directory: str) -> Path | None:
    program = shutil.which("pg_lsclusters")
    if program is None:
        return None
    listing = subprocess.run([program, "--no-header"], capture_output=True, text=True, check=False)
    for line in listing.stdout.splitlines():
        # Ver Cluster Port Status Owner Data-directory Log-file
        columns = line.split()
        if len(columns) >= 7 and (columns[2] == port or columns[5] == data_directory):
            return Path(columns[6])
    return None


@dataclass
class LogWindow:
    """What was appended to `path` since the window was opened."""

    path: Path
    start: int = 0

    @classmethod
    def open(cls, path: Path) -> LogWindow:
        if not path.is_file() or not os.access(path, os.R_OK):
            raise LogNotFoundError(f"{path} is missing or unreadable by this user")
        return cls(path=path, start=path.stat().st_size)

    def read(self) -> str:
        with self.path.open("rb") as log:
            size = log.seek(0, os.SEEK_END)
            # A rotated (shorter) file is read whole: everything in it is newer.
            log.seek(self.start if size >= self.start else 0)
            return log.read().decode("utf-8", errors="replace")


def postgresql_log_probe(marker: str) -> None:
    """Writes `marker` into the server log (RAISE LOG passes the default
    log_min_messages), proving the file and the window read are the right ones."""
    assert re.fullmatch(r"[A-Za-z0-9-]+", marker), marker
    with connection.cursor() as cursor:
        cursor.execute(f"DO $$ BEGIN RAISE LOG '{marker}'; END $$")
