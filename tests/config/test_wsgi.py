"""The web server's entry point: what config.wsgi sets up beyond Django's application."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings

LEVEL = (
    "import logging, config.wsgi; "
    "print(logging.getLevelName(logging.getLogger('django-q').getEffectiveLevel()))"
)


def web_process_level(**env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", LEVEL],
        cwd=settings.BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("task_lines", "level"),
    [("false", "WARNING"), ("true", "INFO")],
)
def test_a_web_process_builds_no_per_task_line_unless_they_are_kept(
    task_lines: str, level: str
) -> None:
    """The only INFO line django-q2 writes in a web process is the per-task "Enqueued"
    that the log drops; the process does not build it at all then. Kept lines
    (ONEFOLD_Q_TASK_LINES) are still written."""
    assert web_process_level(ONEFOLD_Q_TASK_LINES=task_lines, LOG_LEVEL="INFO") == level
