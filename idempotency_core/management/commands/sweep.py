"""`manage.py sweep`: one sweeper pass, or with --loop a pass every ONEFOLD_SWEEP_SECONDS."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from idempotency_core.execution.sweeper import operations_sweep
from idempotency_core.review.notifications import notifications_sweep


class Command(BaseCommand):
    help = "Recover expired leases and re-enqueue due or lost operations."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--loop", action="store_true", help="Keep sweeping until SIGTERM or Ctrl-C."
        )
        parser.add_argument(
            "--every",
            type=float,
            default=None,
            help="Seconds between passes with --loop (default ONEFOLD_SWEEP_SECONDS).",
        )

    def handle(self, *args: Any, loop: bool, every: float | None, **options: Any) -> None:
        if not loop:
            report = operations_sweep()
            notices = notifications_sweep()
            self.stdout.write(f"interrupted={report.interrupted} requeued={report.requeued}")
            if any(notices.values()):
                self.stdout.write(" ".join(f"notices_{k}={v}" for k, v in notices.items()))
            return
        interval = every if every is not None else settings.ONEFOLD_SWEEP_SECONDS
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write(f"Sweeping every {interval}s", ending="\n")
        self.stdout.flush()
        while not stop.is_set():
            close_old_connections()
            report = operations_sweep()
            notices = notifications_sweep()
            if any(notices.values()):
                self.stdout.write(" ".join(f"notices_{k}={v}" for k, v in notices.items()))
            if report.interrupted or report.requeued:
                self.stdout.write(f"interrupted={report.interrupted} requeued={report.requeued}")
                self.stdout.flush()
            stop.wait(interval)
