"""`manage.py run_stack`: the quick start's whole system in the foreground (`make run`).

Without DATABASE_URL it first starts the embedded PostgreSQL server
(idempotency_core/platform/embedded_postgres.py; data under ONEFOLD_DATA_DIR,
default var/). Then it migrates and starts as child processes the sandbox
destination, the web app, a django-q2 worker cluster and the sweeper loop. Once
each answers (the web's /readyz, the sandbox's HTTP and SMTP ports, a probe task
run by the cluster) it creates the demo source and staff user if absent and
prints their credentials, last.

Ctrl-C, SIGTERM, SIGHUP or any child dying stops the children, then the database
server: nothing is left running. Each child leads its own process group, so a
Ctrl-C reaches this process alone and the stop happens in order; and each dies
with this process, should it be killed outright.

System checks run once, here: the children start with --skip-checks, so a
warning such as onefold.W001 is printed once, not once per process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections
from django_q.models import Task
from django_q.tasks import async_task

from idempotency_core.demo import DemoCredentials, demo_setup
from idempotency_core.platform import embedded_postgres

READY_TIMEOUT_SECONDS = 120
STOP_TIMEOUT_SECONDS = 15
# The development server runs a thread per browser connection, and each thread would
# keep its own database connection for DATABASE_CONN_MAX_AGE: a busy console would hold
# one per browser. Closed after each request instead, the web process holds at most one
# per request in flight. Production serves through gunicorn with its own setting.
WEB_ENV = {"DATABASE_CONN_MAX_AGE": "0"}
NEW_CREDENTIALS = ".venv/bin/python manage.py demo_setup --new-credentials"


class _StopRequested(Exception):
    """Raised by the signal handler, to leave whatever the main thread is doing."""


def _request_stop(signum: int, frame: FrameType | None) -> None:
    raise _StopRequested


def _die_with_parent() -> None:
    """Runs in each child before it starts: SIGTERM when this process dies, even by
    SIGKILL, so a killed run leaves no web server holding the port."""
    if sys.platform == "linux":
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass(frozen=True)
class _Web:
    host: str
    port: int

    @classmethod
    def parse(cls, addr: str) -> _Web:
        host, sep, port = addr.rpartition(":")
        if not sep:
            host, port = "127.0.0.1", addr
        if not port.isdigit():
            raise CommandError(f"--addr {addr!r} is not HOST:PORT (e.g. 127.0.0.1:8000).")
        return cls(host=host.strip("[]") or "127.0.0.1", port=int(port))

    @property
    def url(self) -> str:
        # A server on every interface is reached, and shown, on loopback.
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"


def _sandbox_ports(value: str) -> tuple[int, int]:
    http, _, smtp = value.partition(",")
    if not (http.strip().isdigit() and smtp.strip().isdigit()):
        raise CommandError(f"--sandbox-ports {value!r} is not HTTP,SMTP (e.g. 8765,8025).")
    return int(http), int(smtp)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _shown(path: Path) -> str:
    """A path as the person at the terminal would type it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class Command(BaseCommand):
    help = (
        "Run the embedded database (without DATABASE_URL), web, workers, sweeper and "
        "sandbox together until Ctrl-C; print the demo credentials once all answer."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--addr", default="127.0.0.1:8000", help="The web app's HOST:PORT (make run PORT=)."
        )
        parser.add_argument(
            "--sandbox-ports",
            metavar="HTTP,SMTP",
            default="8765,8025",
            help="The sandbox's ports; the workers are pointed at it (make run SANDBOX_PORTS=).",
        )
        parser.add_argument(
            "--no-sandbox",
            action="store_true",
            help="No sandbox: the destinations are the ones DESTINATION_URL, EMAIL_* and "
            "ONEFOLD_CRM / ONEFOLD_EMAIL name.",
        )

    def handle(
        self, *args: Any, addr: str, sandbox_ports: str, no_sandbox: bool, **options: Any
    ) -> None:
        web = _Web.parse(addr)
        sandbox = None if no_sandbox else _sandbox_ports(sandbox_ports)
        embedded = not os.environ.get("DATABASE_URL")
        pgdata = embedded_postgres.pgdata_dir() if embedded else None
        previous = {
            sig: signal.signal(sig, _request_stop)
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        }
        children: dict[str, subprocess.Popen[bytes]] = {}
        started = time.monotonic()
        try:
            if pgdata is not None:
                self._database_start(pgdata)
            self._migrate()
            self._spawn(children, web, sandbox, embedded)
            self._await_ready(children, web, sandbox)
            # Made only now, just before they are shown: a run stopped or failed before
            # this point (a port in use) must not make credentials nobody saw.
            credentials = demo_setup()
            connections.close_all()
            self.stdout.write(self.style.SUCCESS(f"Ready in {time.monotonic() - started:.1f}s."))
            self.stdout.write(self._credentials_box(credentials, web, sandbox, embedded))
            self.stdout.flush()
            self._watch(children)
        except _StopRequested:
            pass
        finally:
            # Stopping must finish, however impatient the second Ctrl-C.
            for sig in previous:
                signal.signal(sig, signal.SIG_IGN)
            self.stdout.write("Stopping…")
            self.stdout.flush()
            connections.close_all()
            self._stop(children)
            embedded_postgres.stop_started()
            self.stdout.write("Stopped.")
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _database_start(self, pgdata: Path) -> None:
        began = time.monotonic()
        try:
            server = embedded_postgres.server_start(pgdata)
            created = embedded_postgres.database_ensure(pgdata)
        except embedded_postgres.EmbeddedPostgresError as exc:
            raise CommandError(str(exc)) from exc
        how = "took over the one a killed run had left" if server.adopted else "started"
        fresh = ", new database" if created else ""
        self.stdout.write(
            f"PostgreSQL (embedded) in {_shown(pgdata)}: {how} in "
            f"{time.monotonic() - began:.1f}s{fresh}."
        )

    def _migrate(self) -> None:
        try:
            call_command("migrate", interactive=False, verbosity=0)
        except DatabaseError as exc:
            raise CommandError(f"The database did not answer: {exc}") from exc
        self.stdout.write("Database migrated.")

    def _spawn(
        self,
        children: dict[str, subprocess.Popen[bytes]],
        web: _Web,
        sandbox: tuple[int, int] | None,
        embedded: bool,
    ) -> None:
        """Starts the children into `children`, filled as they start so that a failure
        halfway still stops those already running."""
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        # Django's notice that runserver is no production server: the box says so once.
        env = dict(os.environ, PYTHONUNBUFFERED="1", DJANGO_RUNSERVER_HIDE_WARNING="true")
        commands: dict[str, list[str]] = {}
        if sandbox is not None:
            http, smtp = sandbox
            commands["sandbox"] = [
                *manage,
                "sandbox",
                "--http-port",
                str(http),
                "--smtp-port",
                str(smtp),
            ]
            if embedded:
                # Beside the database, so the CRM's records outlive a restart as the
                # events do, and `make reset` removes both.
                commands["sandbox"] += [
                    "--db",
                    str(embedded_postgres.data_dir() / "sandbox.db"),
                ]
            env |= {
                "DESTINATION_URL": f"http://127.0.0.1:{http}",
                "EMAIL_HOST": "127.0.0.1",
                "EMAIL_PORT": str(smtp),
            }
        commands |= {
            "web": [*manage, "runserver", "--noreload", "--skip-checks", f"{web.host}:{web.port}"],
            "workers": [*manage, "qcluster", "--skip-checks"],
            "sweeper": [*manage, "sweep", "--loop", "--skip-checks"],
        }
        for name, command in commands.items():
            # preexec_fn is unsafe only beside other threads; this process runs none.
            children[name] = subprocess.Popen(
                command,
                env=env | WEB_ENV if name == "web" else env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def _await_ready(
        self,
        children: dict[str, subprocess.Popen[bytes]],
        web: _Web,
        sandbox: tuple[int, int] | None,
    ) -> None:
        """Returns once every part answers; raises when one exits or time runs out."""
        # A task the cluster must run: proof that a worker takes work from the queue,
        # which a cluster that merely started does not give. Saved despite save_limit
        # (nothing is kept for a successful task otherwise), then deleted.
        probe = async_task("os.getpid", q_options={"save": True, "task_name": "ready-probe"})
        checks: dict[str, Callable[[], bool]] = {
            "web": lambda: _answers(f"{web.url}/readyz"),
            "workers": lambda: Task.objects.filter(id=probe, success=True).exists(),
        }
        if sandbox is not None:
            http, smtp = sandbox
            checks["sandbox"] = lambda: (
                _answers(f"http://127.0.0.1:{http}/_sandbox/stats?detail=0") and _listens(smtp)
            )
        pending = set(checks)
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        next_note = time.monotonic() + 15
        while pending:
            self._raise_if_exited(children, "before it was ready")
            pending = {name for name in pending if not checks[name]()}
            if time.monotonic() > deadline:
                raise CommandError(
                    f"Not ready after {READY_TIMEOUT_SECONDS}s: {', '.join(sorted(pending))}."
                )
            if pending and time.monotonic() > next_note:
                self.stdout.write(f"Still waiting for {', '.join(sorted(pending))}…")
                next_note = time.monotonic() + 15
            time.sleep(0.2)
        Task.objects.filter(id=probe).delete()

    def _raise_if_exited(self, children: dict[str, subprocess.Popen[bytes]], when: str) -> None:
        for name, child in children.items():
            if child.poll() is not None:
                hint = ""
                if name in ("web", "sandbox"):
                    hint = (
                        " A port in use? Choose others: make run PORT=8001 SANDBOX_PORTS=8766,8026."
                    )
                raise CommandError(f"{name} exited with {child.returncode} {when}.{hint}")

    def _watch(self, children: dict[str, subprocess.Popen[bytes]]) -> None:
        while True:
            self._raise_if_exited(children, "; everything stops with it")
            time.sleep(0.3)

    def _stop(self, children: dict[str, subprocess.Popen[bytes]]) -> None:
        """SIGTERM to each child, SIGKILL to what remains of its process group after
        STOP_TIMEOUT_SECONDS (a worker cluster's forked workers, for one)."""
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for child in children.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            # What is left of the group; none when the child took its own processes with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()

    def _credentials_box(
        self,
        credentials: DemoCredentials,
        web: _Web,
        sandbox: tuple[int, int] | None,
        embedded: bool,
    ) -> str:
        """The last thing printed: where to go and how to sign in. No side borders, so
        the KEY= line pastes into a shell as it is."""
        again = "shown once, when first made (not kept)"
        lines = [
            f"Console   {web.url}/console/",
            f"Username  {credentials.username}",
            f"Password  {credentials.password or again}",
            f"API key   {credentials.api_key or again}",
        ]
        if credentials.api_key:
            lines += ["", "For the README's curl, paste:", f"KEY={credentials.api_key}"]
        lines += ["", f"API       {web.url}/api/v1/submissions/ (source {credentials.source})"]
        if sandbox is not None:
            lines.append(f"Sandbox   http://127.0.0.1:{sandbox[0]}/_sandbox/stats")
        lines += ["", "New credentials:" if credentials.api_key else "Lost them? New ones:"]
        lines.append(f"  {NEW_CREDENTIALS}")
        if embedded:
            lines.append("  or start over, empty: Ctrl-C, then make reset, then make run")
        lines += ["", "Ctrl-C stops everything: web, workers, sandbox, database."]
        rule = "=" * min(78, max(len(line) for line in lines))
        return "\n".join([rule, *lines, rule])
