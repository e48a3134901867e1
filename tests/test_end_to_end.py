"""End to end on real parts: gunicorn, a django-q2 cluster, the sandbox over loopback."""

from __future__ import annotations

import random
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from idempotency_core.intake.ingest import event_status
from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Event, Operation, ReviewCase
from tests.factories import submission
from tests.support.processes import wait_for

EVENTS = 200
REPEATED = 0.3


def all_events_done(expected: int) -> bool:
    statuses: dict = {}
    for event_id, status in Operation.objects.values_list("event_id", "status"):
        statuses.setdefault(event_id, []).append(status)
    done = [event_status(s) for s in statuses.values()]
    return len(done) == expected and all(s != "processing" for s in done)


@pytest.mark.slow
@pytest.mark.django_db(
    transaction=True, serialized_rollback=True
)  # the cluster and gunicorn commit for real
def test_submissions_with_repeats_make_one_effect_each(sandbox, web_server, qcluster_factory):
    qcluster_factory()
    _, _, key = source_create_with_key(name="website")
    headers = {"Authorization": f"Api-Key {key}"}
    url = f"{web_server.url}/api/v1/submissions/"
    rng = random.Random(2026)
    bodies = {
        f"e2e-{uuid.uuid4()}": submission(
            contact={"name": f"Person {i}", "email": f"person{i % 150}@example.com"},
            message=f"Enquiry number {i}",
        )
        for i in range(EVENTS)
    }
    repeated = rng.sample(sorted(bodies), int(EVENTS * REPEATED))
    concurrent, later = repeated[: len(repeated) // 2], repeated[len(repeated) // 2 :]

    def send(event_key: str, barrier: threading.Barrier | None = None) -> httpx.Response:
        with httpx.Client(timeout=60) as client:
            if barrier:
                barrier.wait()
            return client.post(
                url, json=bodies[event_key], headers={**headers, "Idempotency-Key": event_key}
            )

    codes: list[int] = []
    with ThreadPoolExecutor(max_workers=16) as pool:
        # Some repeats race with their first delivery...
        for event_key in concurrent:
            barrier = threading.Barrier(2)
            pair = [pool.submit(send, event_key, barrier) for _ in range(2)]
            codes.extend(sorted(f.result().status_code for f in pair))
        # ...the rest of the first deliveries go out...
        rest = [k for k in bodies if k not in concurrent]
        codes.extend(r.status_code for r in pool.map(send, rest))
        # ...and other repeats arrive later, while the workers are busy.
        codes.extend(r.status_code for r in pool.map(send, later))
    assert codes.count(202) == EVENTS
    assert codes.count(200) == len(repeated)

    wait_for(lambda: all_events_done(EVENTS), timeout=240, interval=1, what="every event to finish")

    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (EVENTS, EVENTS, EVENTS)
    assert set(stats["records_by_external_ref"].values()) == {1}
    assert set(stats["tasks_by_external_ref"].values()) == {1}
    assert len(stats["messages_by_message_id"]) == EVENTS
    assert Event.objects.count() == EVENTS
    statuses = set(Operation.objects.values_list("status", flat=True))
    assert statuses == {"succeeded"}
    assert ReviewCase.objects.count() == 0
    # The operation keys the destination holds are exactly Onefold's.
    enquiry_keys = set(
        Operation.objects.filter(step="create_enquiry").values_list("key", flat=True)
    )
    assert set(stats["records_by_external_ref"]) == enquiry_keys
