"""CPU spent by processes, read from /proc (Linux only): what the benchmarks print
beside each rate, because the CPU a request or a submission costs moves far less with
the machine's other load than the rate does."""

from __future__ import annotations

import os
from pathlib import Path

from django.db import connection


def _stat_fields(pid: int | str) -> list[str]:
    """/proc/PID/stat after the command name (which may hold spaces): state, ppid, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU of these processes so far (utime, stime); gone ones count 0."""
    total = 0
    for pid in pids:
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def descendants(root: int) -> list[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int(_stat_fields(entry.name)[1]), []).append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def database_backends() -> list[int]:
    """PostgreSQL's server processes serving this database (the same machine's)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        return [pid for (pid,) in cursor.fetchall()]


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    return {pid: cpu_seconds([pid]) for pid in pids}


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU spent between two readings by the processes alive at the second."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())
