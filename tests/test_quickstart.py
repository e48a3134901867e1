"""The quick start: `run_stack` on a fresh SQLite file serves, processes, and stops.

`make run` is this after installing and migrating; the README's curl is what the
test does. SQLite here on purpose: it is the quick start's zero-setup default.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.processes import REPO, free_port, wait_for


def manage(*args: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def demo_setup(env: dict[str, str]) -> str:
    """Migrates a fresh database and runs demo_setup twice; the API key it printed."""
    manage("migrate", "--noinput", env=env)
    printed = manage("demo_setup", env=env)
    key = re.search(r"API key: (\S+)", printed).group(1)
    assert re.search(r"Staff user 'demo-admin' password: \S+", printed)
    assert "exists" in manage("demo_setup", env=env)  # credentials are printed once
    return key


def start_stack(
    env: dict[str, str], log_path: Path, web: int, http: int, smtp: int
) -> subprocess.Popen:
    """`manage.py run_stack` in its own process group, its output to `log_path`."""
    log = log_path.open("w")
    return subprocess.Popen(
        [
            sys.executable,
            str(REPO / "manage.py"),
            "run_stack",
            "--addr",
            f"127.0.0.1:{web}",
            "--sandbox-ports",
            f"{http},{smtp}",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_with_ctrl_c(stack: subprocess.Popen, log_path: Path) -> int:
    """Stops the stack as Ctrl-C would, prints its log; its exit code."""
    os.killpg(stack.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground group
    try:
        code = stack.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(stack.pid, signal.SIGKILL)
        raise
    print(log_path.read_text())
    return code


def serving(web: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{web}/api/schema/", timeout=2).is_success
    except httpx.HTTPError:
        return False


def submit_as_the_readme_does(web: int, key: str) -> str:
    """The README's curl: one submission, accepted; its status URL."""
    response = httpx.post(
        f"http://127.0.0.1:{web}/api/v1/submissions/",
        json={
            "form": "contact",
            "contact": {"name": "Ada Lovelace", "email": "ada@example.com"},
            "message": "Please quote for a kitchen refit.",
        },
        headers={"Authorization": f"Api-Key {key}", "Idempotency-Key": "order-form-0001"},
    )
    assert response.status_code == 202
    return response.json()["status_url"]


def assert_console_script_is_served(web: int) -> None:
    # The console's script is served with DEBUG off (WhiteNoise, no collectstatic).
    login = httpx.get(f"http://127.0.0.1:{web}/accounts/login/").text
    script = re.search(r'src="(/static/review_console/htmx[^"]+)"', login)
    assert script, "the console pages do not load htmx"
    served = httpx.get(f"http://127.0.0.1:{web}{script.group(1)}")
    assert served.status_code == 200 and "htmx" in served.text[:200]


@pytest.mark.slow
def test_run_stack_serves_processes_a_submission_and_stops(tmp_path):
    web, http, smtp = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'onefold.sqlite3'}",
    }
    key = demo_setup(env)
    log_path = tmp_path / "stack.log"
    stack = start_stack(env, log_path, web, http, smtp)
    try:
        wait_for(lambda: serving(web), timeout=60, what="the web app")
        status_url = submit_as_the_readme_does(web, key)

        def completed() -> bool:
            data = httpx.get(status_url, headers={"Authorization": f"Api-Key {key}"}).json()
            return data["status"] == "completed"

        wait_for(completed, timeout=90, interval=0.5, what="the submission to complete")
        stats = httpx.get(f"http://127.0.0.1:{http}/_sandbox/stats").json()
        assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)
        assert_console_script_is_served(web)
    finally:
        code = stop_with_ctrl_c(stack, log_path)
    assert code == 0
    time.sleep(0.5)
    for port in (web, http, smtp):
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
