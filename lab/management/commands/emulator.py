"""`manage.py emulator VENDOR`: run one vendor's local emulator in the foreground.

Prints "<Vendor> emulator listening on http://HOST:PORT" (flushed: tests and
scripts read it) and runs until SIGTERM or SIGINT, then exits 0. The emulators
keep their state in memory; `POST /_sandbox/reset` empties it.
"""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.emulators import VENDORS, EmulatorUnavailableError, emulator_class

_NAMES = {
    "hubspot": "HubSpot",
    "salesforce": "Salesforce",
    "pipedrive": "Pipedrive",
    "dataverse": "Dataverse",
    "resend": "Resend",
}


class _StopRequested(Exception):
    """Raised by the signal handler to leave the wait in the main thread."""


def _request_stop(signum: int, frame: FrameType | None) -> None:
    raise _StopRequested


class Command(BaseCommand):
    help = "Runs a vendor's local emulator (HubSpot, Salesforce, Pipedrive, Dataverse, Resend)."

    # Like the sandbox, an emulator needs no app database.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("vendor", choices=VENDORS)
        parser.add_argument("--host", default="127.0.0.1", help="Address to bind.")
        parser.add_argument("--port", type=int, default=0, help="Port (default 0: a free one).")
        parser.add_argument("--verbose", action="store_true", help="Log one line per request.")

    def handle(self, *args: Any, vendor: str, host: str, port: int, **options: Any) -> None:
        try:
            server = emulator_class(vendor)(host=host, port=port, verbose=options["verbose"])
        except EmulatorUnavailableError as exc:
            raise CommandError(str(exc)) from exc
        previous = {
            sig: signal.signal(sig, _request_stop) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            try:
                server.start()
            except OSError as exc:
                raise CommandError(f"the {vendor} emulator cannot listen: {exc}") from exc
            self.stdout.write(f"{_NAMES[vendor]} emulator listening on {server.http_url}")
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
