"""`manage.py sandbox`: run the sandbox CRM (HTTP) and mail sink (SMTP) in the foreground.

The API is documented in `lab.sandbox`. The two "listening" lines are
parsed by tests and by `make run`, so their wording is part of the contract.
"""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.sandbox import SandboxServer


class _StopRequested(Exception):
    """Raised by the signal handler to leave the wait in the main thread."""


def _request_stop(signum: int, frame: FrameType | None) -> None:
    # Raising (rather than setting an Event) cannot deadlock on a lock the
    # interrupted main thread already holds.
    raise _StopRequested


class Command(BaseCommand):
    help = "Runs the sandbox destination: a fake CRM over HTTP and an SMTP mail sink."

    # The sandbox has its own state; it must start with no app database at all.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="Address to bind both services.")
        parser.add_argument(
            "--http-port", type=int, default=8765, help="CRM port (0 picks a free one)."
        )
        parser.add_argument(
            "--smtp-port", type=int, default=8025, help="SMTP sink port (0 picks a free one)."
        )
        parser.add_argument(
            "--db",
            default=None,
            metavar="PATH",
            help="SQLite file to keep state in across restarts (default: memory).",
        )
        parser.add_argument("--verbose", action="store_true", help="Log one line per HTTP request.")

    def handle(self, *args: Any, **options: Any) -> None:
        server = SandboxServer(
            host=options["host"],
            http_port=options["http_port"],
            smtp_port=options["smtp_port"],
            db_path=options["db"],
            verbose=options["verbose"],
        )
        previous = {
            sig: signal.signal(sig, _request_stop) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            try:
                server.start()
            except OSError as exc:
                raise CommandError(f"the sandbox cannot listen: {exc}") from exc
            self.stdout.write(f"Sandbox CRM listening on {server.http_url}")
            smtp_host = f"[{server.host}]" if ":" in server.host else server.host
            self.stdout.write(f"Sandbox SMTP listening on {smtp_host}:{server.smtp_port}")
            self.stdout.flush()
            while True:
                time.sleep(3600)
        except _StopRequested:
            pass
        finally:
            # A second signal during shutdown must not interrupt the cleanup.
            for sig in previous:
                signal.signal(sig, signal.SIG_IGN)
            server.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
