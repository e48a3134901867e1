"""CPU spent by processes, read from /proc (Linux only): what the benchmarks print
beside each rate, because the CPU a request or a submission costs moves far less with
the machine's other load than the rate does."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

from django.db import connection, connections


def _stat_fields(pid: int | str) -> list[str]:
    """/proc/PID/stat after the command name (which may hold spaces): state, ppid, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pids: list[int] | set[int], *, waited_for: bool = False) -> float:
    """User and system CPU of these processes so far (utime, stime), with `waited_for`
    that of the children they have waited for too (cutime, cstime); gone ones count 0."""
    fields_read = (11, 12, 13, 14) if waited_for else (11, 12)
    total = 0
    for pid in pids:
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        total += sum(int(fields[n]) for n in fields_read)
    return total / os.sysconf("SC_CLK_TCK")


def tree_cpu(roots: list[int]) -> float:
    """CPU so far of these processes, everything below them, and what they have waited
    for: a worker cluster recycles its workers, and a recycled worker's CPU, gone
    with it from /proc, lives on in its parent's cutime and cstime. The difference of
    two readings is exact while the roots live."""
    return cpu_seconds({pid for root in roots for pid in descendants(root)}, waited_for=True)


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


def own_backend() -> int:
    """The PostgreSQL backend serving this thread's connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
        return int(pid)


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    return {pid: cpu_seconds([pid]) for pid in pids}


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU spent between two readings by the processes alive at the second."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


class BackendsWatch:
    """CPU spent by PostgreSQL's backends for this database while the block runs,
    those that come and go included (a recycled worker's connection ends with it): a
    thread reads them every `every` seconds, so a backend that ends is counted up to
    its last reading. `exclude` names backends not to count (the caller's own)."""

    def __init__(self, *, exclude: list[int], every: float = 0.2) -> None:
        self.exclude = set(exclude)
        self.every = every
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> BackendsWatch:
        self.first = self._reading()
        self.last = dict(self.first)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def spent(self) -> float:
        """Seconds of CPU so far: a backend that began after `start` counts from zero."""
        return sum(seconds - self.first.get(pid, 0.0) for pid, seconds in self.last.items())

    def _sample(self) -> None:
        self.last.update(self._reading())

    def _reading(self) -> dict[int, float]:
        pids = [pid for pid in database_backends() if pid not in self.exclude]
        return {pid: seconds for pid, seconds in cpu_by_pid(pids).items() if seconds}

    def _watch(self) -> None:
        try:
            while not self._stop.wait(self.every):
                self._sample()
            self._sample()
        finally:
            connections.close_all()  # this thread's own connection
