"""Real processes for tests: the sandbox destination and django-q2 worker clusters.

Each child writes to a log file under the test's tmp dir; the log is printed
when a test fails, because a silent hang is the worst failure to debug.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings

from idempotency_core.platform.env import database_url_of

REPO = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The URL of the database the tests are using right now (the test database)."""
    return database_url_of(settings.DATABASES["default"])


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
        """Stops the child and whatever it started.

        SIGKILL reaches its whole process group at once, as a crash would. Any other
        signal goes to the child alone, which stops its own processes in order (the
        qcluster's sentinel stops its workers, gunicorn's master its workers): given
        SIGTERM across its group, a qcluster loses its workers under it and hangs
        until it is killed. What is still in the group afterwards is killed.
        """
        if self.process.poll() is not None:
            return
        pid = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            if sig == signal.SIGKILL:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        # Waited for without reaping: until it is reaped, its group id cannot be
        # handed to another process, so the group is still the child's to kill.
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def spawn(
    name: str,
    args: list[str],
    log_dir: Path,
    env: dict[str, str] | None = None,
    *,
    program: list[str] | None = None,
) -> Child:
    """Starts `manage.py ARGS` (or `PROGRAM ARGS`) in its own process group."""
    log_path = log_dir / f"{name}.log"
    log_file = log_path.open("w")
    process = subprocess.Popen(
        [*(program or [sys.executable, str(REPO / "manage.py")]), *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return Child(name=name, process=process, log_path=log_path)


def wait_for(predicate: Any, *, timeout: float, interval: float = 0.1, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


@dataclass
class Sandbox:
    child: Child
    http_port: int
    smtp_port: int
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def reset(self) -> None:
        self.client.post("/_sandbox/reset").raise_for_status()

    def capabilities(self, **flags: Any) -> dict:
        response = self.client.post("/_sandbox/capabilities", json=flags)
        response.raise_for_status()
        return response.json()

    def fault(self, action: str, mode: str, times: int = 1, seconds: float | None = None) -> None:
        body: dict[str, Any] = {"action": action, "mode": mode, "times": times}
        if seconds is not None:
            body["seconds"] = seconds
        self.client.post("/_sandbox/faults", json=body).raise_for_status()

    def stats(self) -> dict:
        response = self.client.get("/_sandbox/stats")
        response.raise_for_status()
        return response.json()

    def messages(self) -> list[dict]:
        response = self.client.get("/_sandbox/messages")
        response.raise_for_status()
        return response.json()["results"]

    def records(self) -> list[dict]:
        """Every live record, oldest first (the listing reconciliation reads)."""
        response = self.client.get(
            "/crm/records", params={"since": "2000-01-01T00:00:00Z", "limit": 5000}
        )
        response.raise_for_status()
        return response.json()["results"]

    def tasks(self, record_id: str) -> list[dict]:
        response = self.client.get(f"/crm/records/{record_id}/tasks")
        response.raise_for_status()
        return response.json()["results"]


def start_sandbox(log_dir: Path) -> Sandbox:
    child = spawn("sandbox", ["sandbox", "--http-port", "0", "--smtp-port", "0"], log_dir)

    def ports() -> tuple[int, int] | None:
        text = child.log()
        http = re.search(r"Sandbox CRM listening on http://[\d.]+:(\d+)", text)
        smtp = re.search(r"Sandbox SMTP listening on [\d.]+:(\d+)", text)
        if child.process.poll() is not None:
            raise RuntimeError(f"sandbox exited:\n{text}")
        return (int(http.group(1)), int(smtp.group(1))) if http and smtp else None

    http_port, smtp_port = wait_for(ports, timeout=20, what="the sandbox to listen")
    return Sandbox(child=child, http_port=http_port, smtp_port=smtp_port)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def app_env(sandbox: Sandbox | None = None) -> dict[str, str]:
    """Environment for an app process (web or workers) on the test database."""
    env = {"DJANGO_SETTINGS_MODULE": "config.test_settings", "DATABASE_URL": database_url()}
    if sandbox is not None:
        env |= {
            "DESTINATION_URL": sandbox.url,
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(sandbox.smtp_port),
        }
    return env


@dataclass
class WebServer:
    child: Child
    url: str


# How long the test servers wait for a connected client's request (see start_web).
SLOW_CLIENT_SECONDS = 60


def manage(*args: str, sandbox: Sandbox | None = None) -> subprocess.CompletedProcess[str]:
    """`manage.py ARGS` run as an operator would, on the test database."""
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        cwd=REPO,
        env={**os.environ, **app_env(sandbox)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def check_destinations(sandbox: Sandbox, **env: str) -> subprocess.CompletedProcess[str]:
    """`manage.py check_destinations` run as an operator would, on the test database."""
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "check_destinations"],
        cwd=REPO,
        env={**os.environ, **app_env(sandbox), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def start_web(
    log_dir: Path,
    sandbox: Sandbox | None = None,
    *,
    workers: int = 3,
    name: str = "web",
    env: dict[str, str] | None = None,
) -> WebServer:
    """gunicorn with several processes and threads: production-like concurrency."""
    port = free_port()
    child = spawn(
        name,
        [
            "config.wsgi",
            f"--bind=127.0.0.1:{port}",
            f"--workers={workers}",
            # The app is imported once and forked: each worker's own import of Django
            # cost about 0.9 s of CPU, and the suite starts gunicorn some ninety times.
            # It opens no connection at import (the workers open their own).
            "--preload",
            "--threads=16",
            "--backlog=2048",
            "--timeout=120",
            # gunicorn's gthread worker gives a new connection 5 s to send its request,
            # then keep-alive seconds more (2 by default), and then closes it unanswered
            # ("Server disconnected without sending a response"). On a loaded 2-core
            # machine (two clusters, two sweepers, the sandbox and these workers) a
            # client thread can stall that long between its connect and its request:
            # the chaos test's posts once met it in CI.
            f"--keep-alive={SLOW_CLIENT_SECONDS}",
        ],
        log_dir,
        env={**app_env(sandbox), **(env or {})},
        program=[str(Path(sys.executable).parent / "gunicorn")],
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if child.process.poll() is not None:
            raise RuntimeError(f"{name} exited:\n{child.log()}")
        try:
            return httpx.get(f"{url}/api/schema/", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, timeout=30, what="gunicorn to serve")
    return WebServer(child=child, url=url)


def start_qcluster(
    log_dir: Path, sandbox: Sandbox, *, name: str = "qcluster", env: dict[str, str] | None = None
) -> Child:
    """A real worker cluster on the test database, calling the sandbox over loopback."""
    child = spawn(
        name,
        ["qcluster"],
        log_dir,
        env={**app_env(sandbox), **(env or {})},
    )
    wait_for(
        lambda: "running" in child.log().lower() or child.process.poll() is not None,
        timeout=30,
        what=f"{name} to start",
    )
    if child.process.poll() is not None:
        raise RuntimeError(f"{name} exited:\n{child.log()}")
    return child


def start_sweeper(log_dir: Path, sandbox: Sandbox, *, name: str = "sweeper", **env: str) -> Child:
    """`manage.py sweep --loop` on the test database (ONEFOLD_SWEEP_SECONDS apart)."""
    child = spawn(name, ["sweep", "--loop"], log_dir, env={**app_env(sandbox), **env})
    wait_for(
        lambda: "Sweeping every" in child.log() or child.process.poll() is not None,
        timeout=30,
        what=f"{name} to start",
    )
    if child.process.poll() is not None:
        raise RuntimeError(f"{name} exited:\n{child.log()}")
    return child
