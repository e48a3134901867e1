"""What a stopped run left behind, found in /proc (Linux) without psutil.

A test that says "nothing is left running" must look at every process, not only
the ones it started: a worker cluster forks, and pg_ctl starts postgres in a
session of its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    cmdline: str
    environ: frozenset[str]

    def __str__(self) -> str:
        return f"{self.pid} (parent {self.ppid}): {self.cmdline}"


def processes() -> list[Process]:
    """Every live process but this one; zombies are dead and left out."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            # Fields after the parenthesised name: state, parent pid, ...
            state, ppid = (entry / "stat").read_text().rpartition(")")[2].split()[:2]
            raw_cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue  # gone meanwhile
        try:
            raw_environ = (entry / "environ").read_bytes()
        except OSError:
            raw_environ = b""  # another user's process (postgres, when not run by root)
        if state == "Z":
            continue
        found.append(
            Process(
                pid=int(entry.name),
                ppid=int(ppid),
                cmdline=raw_cmdline.replace(b"\0", b" ").decode(errors="replace").strip(),
                environ=frozenset(raw_environ.decode(errors="replace").split("\0")),
            )
        )
    return found


def left_behind(
    *, data_dir: Path, marks: tuple[str, ...] = (), postgres: int | None = None
) -> list[Process]:
    """Processes that belong to a run on `data_dir`: started with ONEFOLD_DATA_DIR set to
    it (every child and grandchild inherits it), naming it or one of `marks` (an address,
    a port option) on their command line, or being the postgres server `postgres` or one
    of its backends."""
    mine = f"ONEFOLD_DATA_DIR={data_dir}"
    return [
        process
        for process in processes()
        if mine in process.environ
        or str(data_dir) in process.cmdline
        or any(mark in process.cmdline for mark in marks)
        or (postgres is not None and postgres in (process.pid, process.ppid))
    ]
