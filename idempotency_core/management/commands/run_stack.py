"""`manage.py run_stack`: the quick start's whole system in the foreground.

Starts the sandbox destination, the web app on 127.0.0.1:8000, a django-q2
worker cluster and the sweeper loop as child processes; Ctrl-C (or SIGTERM, or
any child dying) stops them all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Run web, workers, sweeper and sandbox together until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addr", default="127.0.0.1:8000")
        parser.add_argument("--no-sandbox", action="store_true")
        parser.add_argument(
            "--sandbox-ports",
            metavar="HTTP,SMTP",
            help="Run the sandbox on these ports and point the workers at it "
            "(default: the sandbox on 8765,8025 and DESTINATION_URL/EMAIL_PORT as set).",
        )

    def handle(
        self, *args: Any, addr: str, no_sandbox: bool, sandbox_ports: str | None, **options: Any
    ) -> None:
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        env = dict(os.environ)
        sandbox = [*manage, "sandbox"]
        if sandbox_ports:
            http_port, _, smtp_port = sandbox_ports.partition(",")
            sandbox += ["--http-port", http_port, "--smtp-port", smtp_port]
            env |= {
                "DESTINATION_URL": f"http://127.0.0.1:{http_port}",
                "EMAIL_HOST": "127.0.0.1",
                "EMAIL_PORT": smtp_port,
            }
        commands = {
            "web": [*manage, "runserver", "--noreload", addr],
            "workers": [*manage, "qcluster"],
            "sweeper": [*manage, "sweep", "--loop"],
        }
        if not no_sandbox:
            commands = {"sandbox": sandbox, **commands}
        stopping = False

        def request_stop(*_: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        children: dict[str, subprocess.Popen[bytes]] = {}
        for name, command in commands.items():
            children[name] = subprocess.Popen(command, env=env)
            if name == "sandbox":
                time.sleep(0.5)  # let the destination listen before workers call it
        self.stdout.write(
            self.style.SUCCESS(
                f"Onefold is running: http://{addr}/  (console /console/, API /api/v1/, "
                "schema /api/schema/). Ctrl-C stops everything."
            )
        )
        try:
            while not stopping:
                for name, child in children.items():
                    if child.poll() is not None:
                        self.stderr.write(f"{name} exited with {child.returncode}; stopping.")
                        stopping = True
                time.sleep(0.3)
        finally:
            for child in children.values():
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            for child in children.values():
                try:
                    child.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.kill()
            self.stdout.write("Stopped.")
