"""The html profile's CAPTCHA on real parts: gunicorn, a django-q2 cluster, the
sandbox CRM and SMTP sink, and the siteverify stand-in on loopback.

While the stand-in answers, it looks at PostgreSQL from a connection of its own: no
session of the test database may have a transaction open. The web process asks the
provider before it stores anything, so a slow provider holds no lock and no
transaction.

Real commits (`transaction=True`): gunicorn and the workers are other processes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from django.db import connections

from idempotency_core.intake.ingest import event_status
from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.models import Delivery, Event, Operation
from tests.support.processes import Sandbox, start_web, wait_for
from tests.support.siteverify import SECRET, SiteverifyStandIn

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

THANKS = "https://www.example.com/thanks/"
BROWSER = "text/html,application/xhtml+xml"


@pytest.fixture
def siteverify() -> Iterator[SiteverifyStandIn]:
    stand_in = SiteverifyStandIn()
    yield stand_in
    stand_in.stop()


def open_transactions(request: dict[str, Any]) -> None:
    """Counts the test database's sessions inside a transaction, from this thread's
    own connection, at the moment the provider is asked."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%%'"
        )
        (request["open_transactions"],) = cursor.fetchone()
    connections["default"].close()


def form(token: str | None) -> bytes:
    values = {
        "name": "Ada Lovelace",
        "email": "ada@example.com",
        "message": "A quote for twenty units, please.",
        "website": "",
        "submission_id": str(uuid.uuid4()),
    }
    if token is not None:
        values["cf-turnstile-response"] = token
    return urlencode(values).encode()


def test_a_form_with_a_captcha_over_real_parts(
    sandbox: Sandbox, qcluster_factory, siteverify, tmp_path: Path
):
    source, _ = source_get_or_create(name="site-form")
    path = source_hook_configure(
        source=source,
        profile="html",
        thank_you_url=THANKS,
        captcha="turnstile",
        captcha_secret=SECRET,
    ).path
    web = start_web(
        tmp_path, sandbox, workers=2, env={"ONEFOLD_CAPTCHA_VERIFY_URL": siteverify.url}
    )
    siteverify.on_request = open_transactions
    try:
        with httpx.Client(base_url=web.url, timeout=30) as browser:
            headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": BROWSER}
            refused = browser.post(path, content=form(None), headers=headers)
            passed = browser.post(path, content=form("pass-real"), headers=headers)
    finally:
        web.child.stop()

    # No token: the form's error page, nothing kept, the provider not asked.
    assert refused.status_code == 400
    assert "Your message was not sent" in refused.text
    # A good token: the provider asked once, outside any transaction; the thank-you page.
    assert (passed.status_code, passed.headers["Location"]) == (303, THANKS)
    (asked,) = siteverify.requests
    assert asked["form"]["response"] == "pass-real"
    assert asked["open_transactions"] == 0
    (event,) = Event.objects.filter(source=source)
    assert sorted(Delivery.objects.filter(source=source).values_list("outcome", flat=True)) == [
        "accepted",
        "captcha_failed",
    ]

    qcluster_factory()
    wait_for(
        lambda: (
            event_status(
                list(Operation.objects.filter(event=event).values_list("status", flat=True))
            )
            == "completed"
        ),
        timeout=60,
        interval=0.2,
        what="the submission's three steps",
    )
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1)
    (mail,) = sandbox.messages()
    assert mail["rcpt_to"] == ["ada@example.com"]
    assert mail["body"].startswith("Hello Ada Lovelace,\n")
