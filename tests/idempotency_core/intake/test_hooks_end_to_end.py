"""Hooks end to end on real parts: every preset's sample over HTTP to gunicorn, a
django-q2 cluster doing the work, the sandbox CRM and SMTP sink receiving it.

test_hooks.py proves the hook's decisions in process; this proves a
sender's delivery becomes exactly one record, one task and one email through
the real stack, that the provider's retry (signed anew) changes nothing there,
and that a forged or stale delivery is refused without a trace of its content.
"""

from __future__ import annotations

import signal
import time

import httpx
import pytest

from idempotency_core.intake.ingest import event_status
from idempotency_core.intake.sources import source_get_or_create, source_hook_configure
from idempotency_core.models import Delivery, Event, Operation, Source
from tests.support.processes import Sandbox, wait_for
from tests.support.senders import SAMPLES, Sample, signed_headers

pytestmark = [
    pytest.mark.slow,
    # The cluster and gunicorn commit for real.
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

SECRET = "an-end-to-end-signing-secret-long-enough-for-hmac"
WRONG_SECRET = "not-the-configured-secret-but-as-long-as-one"
TEN_MINUTES = 600
# How long a repeat is given to (wrongly) start any work before the counts are read.
STRAY_WORK_SECONDS = 2.0


def hook_source(profile: str) -> tuple[Source, str]:
    """A fresh source with the preset's profile; the hook's path (with its token)."""
    source, _ = source_get_or_create(name=f"e2e-{profile}")
    setup = source_hook_configure(source=source, profile=profile, secrets=[SECRET])
    return source, setup.path


def post(
    client: httpx.Client,
    base: str,
    path: str,
    sample: Sample,
    *,
    secret: str = SECRET,
    age: float = 0.0,
) -> httpx.Response:
    """The sample as its provider sends it, signed for the URL the server sees."""
    url = base + path
    return client.post(
        url, content=sample.body, headers=signed_headers(sample, secret, url, age=age)
    )


def event_done(event_id: str) -> bool:
    statuses = list(Operation.objects.filter(event_id=event_id).values_list("status", flat=True))
    return event_status(statuses) != "processing"


def crm_records(sandbox: Sandbox) -> list[dict]:
    response = sandbox.client.get("/crm/records", params={"since": "2000-01-01T00:00:00Z"})
    response.raise_for_status()
    body = response.json()
    assert body["next_cursor"] is None, body
    return body["results"]


def assert_one_effect(sandbox: Sandbox, sample: Sample) -> None:
    """Exactly one record carrying the sample's contact and message, one task, one email
    to the contact."""
    name, email, message = sample.expected
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (1, 1, 1), stats
    (record,) = crm_records(sandbox)
    assert (record["name"], record["email"]) == (name, email), record
    if message:
        assert record["message"] == message, record
    (mail,) = sandbox.messages()
    assert mail["rcpt_to"] == [email], mail


def outcomes(source: Source) -> list[str]:
    """Every receipt's outcome in order: failed verifications share one row a minute
    in each web process (`receipts` counts them), so a row may stand for several."""
    rows = Delivery.objects.filter(source=source).order_by("pk")
    return [outcome for outcome, n in rows.values_list("outcome", "receipts") for _ in range(n)]


def deliver_first(client: httpx.Client, base: str, path: str, sample: Sample) -> str:
    first = post(client, base, path, sample)
    assert first.status_code == 200, first.text
    event_id = first.json()["event_id"]
    wait_for(lambda: event_done(event_id), timeout=60, interval=0.2, what="the event's operations")
    statuses = set(Operation.objects.filter(event_id=event_id).values_list("status", flat=True))
    assert statuses == {"succeeded"}, statuses
    return event_id


def deliver_again(client: httpx.Client, base: str, path: str, sample: Sample, event_id: str):
    """The provider's retry: the same body, signed anew; same answer, no new work (what
    it might start late is counted after the last sender)."""
    operations = Operation.objects.count()
    again = post(client, base, path, sample)
    assert again.status_code == 200, again.text
    assert again.json() == {"event_id": event_id}
    assert Operation.objects.count() == operations
    assert set(Operation.objects.values_list("status", flat=True)) == {"succeeded"}


def deliver_forged(client: httpx.Client, base: str, path: str, sample: Sample) -> None:
    """A wrong signature (signing presets) or a wrong token in the path (token presets)."""
    if sample.sign is not None:
        refused = post(client, base, path, sample, secret=WRONG_SECRET)
    else:
        token = path.rstrip("/").rsplit("/", 1)[1]
        refused = post(client, base, path.replace(token, "not-the-token"), sample)
    assert refused.status_code == 401, refused.text


def test_every_senders_delivery_makes_one_effect_over_real_parts(
    sandbox, web_server, qcluster_factory
):
    """Each preset's sample in turn through one gunicorn and one cluster (starting both
    per sender was most of this test's time), the sandbox emptied before each: a
    failure names the sender. A retry's stray work would show in the next sender's
    counts, and in the operations counted after the last one."""
    cluster = qcluster_factory()
    with httpx.Client(timeout=30) as client:
        for profile in sorted(SAMPLES):
            sandbox.reset()
            try:
                sender_checked(client, web_server.url, sandbox, profile)
            except AssertionError as exc:
                raise AssertionError(f"{profile}: {exc}") from exc
    time.sleep(STRAY_WORK_SECONDS)
    assert Operation.objects.count() == 3 * len(SAMPLES)
    assert set(Operation.objects.values_list("status", flat=True)) == {"succeeded"}
    # An orderly stop, as Ctrl-C gives it.
    cluster.stop(signal.SIGINT, timeout=20)


def sender_checked(client: httpx.Client, base: str, sandbox: Sandbox, profile: str) -> None:
    """One sender: its delivery makes one effect, its retry (signed anew) none, a forged
    or stale one is refused and keeps nothing of its content."""
    sample = SAMPLES[profile]
    source, path = hook_source(profile)
    event_id = deliver_first(client, base, path, sample)
    assert_one_effect(sandbox, sample)

    deliver_again(client, base, path, sample, event_id)
    assert_one_effect(sandbox, sample)
    assert outcomes(source) == ["accepted", "replayed"]

    deliver_forged(client, base, path, sample)
    assert Event.objects.filter(source=source).count() == 1
    assert outcomes(source) == ["accepted", "replayed", "unauthorized"]

    if sample.signs_timestamp:
        stale = post(client, base, path, sample, age=TEN_MINUTES)
        assert stale.status_code == 401, stale.text
        assert Event.objects.filter(source=source).count() == 1
        assert outcomes(source)[-1] == "unauthorized"
        assert len(outcomes(source)) == 4
        # Refused for its age, not for its signature (which is right).
        latest = Delivery.objects.filter(source=source).latest("pk")
        assert "timestamp" in latest.verification, latest.verification
    assert_one_effect(sandbox, sample)
    # What was refused kept nothing of its content.
    refused = Delivery.objects.filter(source=source, outcome="unauthorized")
    assert all(d.raw_body is None and d.event_id is None for d in refused)
    assert not any(SECRET in d.verification or WRONG_SECRET in d.verification for d in refused)
    rows = Delivery.objects.filter(source=source).order_by("pk")
    codes = [code for code, n in rows.values_list("status_code", "receipts") for _ in range(n)]
    assert codes == [200, 200, 401] + [401] * sample.signs_timestamp
