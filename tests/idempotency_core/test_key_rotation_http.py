"""Rotation and revocation of API keys, seen by a sender over HTTP (docs/operations.md).

The app runs under gunicorn (`web_server`, several processes) on the test
database, and the commands run as an operator runs them: `manage.py` in its own
process for exit statuses, and in this process where the timing of a short
overlap matters (a Django start-up would eat most of three seconds).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from django.core.management import call_command
from django.utils import timezone

from idempotency_core.models import Event, SourceApiKey
from tests.factories import URL, submission
from tests.support.processes import REPO, WebServer, app_env

# gunicorn answers from its own processes: what they see must be committed.
# Serial: the old key's overlap is timed (OVERLAP_SECONDS).
pytestmark = [pytest.mark.serial, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

OVERLAP_SECONDS = 3


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        cwd=REPO,
        env={**os.environ, **app_env()},
        capture_output=True,
        text=True,
        timeout=120,
    )


def send(client: httpx.Client, key: str) -> int:
    """One new submission with `key`; the status it got."""
    response = client.post(
        URL,
        json=submission(message=f"Please call back ({uuid.uuid4()})."),
        headers={"Authorization": f"Api-Key {key}", "Idempotency-Key": str(uuid.uuid4())},
    )
    return response.status_code


def rotate(name: str, overlap: int) -> str:
    out = io.StringIO()
    call_command("rotate_key", name, overlap_seconds=overlap, stdout=out)
    return out.getvalue().strip().splitlines()[-1]


def test_a_rotated_key_works_through_its_overlap_then_gets_401(web_server: WebServer):
    created = manage("create_source", "shop")
    assert created.returncode == 0, created.stderr
    old = created.stdout.strip().splitlines()[-1]
    with httpx.Client(base_url=web_server.url, timeout=30) as client:
        assert send(client, old) == 202

        again = manage("create_source", "shop")
        assert again.returncode == 1 and "rotate_key shop" in again.stderr
        assert send(client, old) == 202  # the refused create changed nothing
        assert SourceApiKey.objects.count() == 1

        new = rotate("shop", OVERLAP_SECONDS)
        ends = SourceApiKey.objects.get(prefix=old[:10]).expires_at
        assert [send(client, old), send(client, new)] == [202, 202]
        assert timezone.now() < ends, "the requests above must fall inside the overlap"

        time.sleep(max(0.0, (ends - timezone.now()).total_seconds()) + 1)
        assert [send(client, old), send(client, new)] == [401, 202]
    assert Event.objects.filter(source__name="shop").count() == 5


def test_a_revoked_key_gets_401_at_once(web_server: WebServer):
    key = manage("create_source", "blog").stdout.strip().splitlines()[-1]
    with httpx.Client(base_url=web_server.url, timeout=30) as client:
        assert send(client, key) == 202
        # A replacement first, with the default overlap: revocation ends its one key only.
        replacement = rotate("blog", 86400)

        revoked = manage("revoke_key", key[:10])
        assert revoked.returncode == 0, revoked.stderr
        assert [send(client, key), send(client, replacement)] == [401, 202]

        unknown = manage("revoke_key", "ofk_nope")
        assert unknown.returncode == 1 and "No API key starts with ofk_nope" in unknown.stderr
        assert send(client, replacement) == 202
