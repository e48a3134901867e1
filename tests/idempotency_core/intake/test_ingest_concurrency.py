"""Concurrent identical submissions make exactly one event (invariant 1).

Real HTTP against gunicorn (several processes, many threads, each request with
its own connection and transaction), so the unique constraint really decides.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Delivery, Event, Operation
from tests.factories import submission

PARALLEL = 50
ROUNDS = 20


@pytest.mark.serial  # 50 x 20 posts through gunicorn: both cores
@pytest.mark.django_db(
    transaction=True, serialized_rollback=True
)  # real commits: the race needs them
def test_concurrent_identical_posts_make_one_event(web_server):
    _, _, key = source_create_with_key(name="race")
    url = f"{web_server.url}/api/v1/submissions/"
    body = submission()
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        for _ in range(ROUNDS):
            event_key = f"race-{uuid.uuid4()}"
            barrier = threading.Barrier(PARALLEL)

            def send(_: int, barrier=barrier, event_key=event_key) -> httpx.Response:
                # Plain HTTP: httpx's default SSL context would cost 15-25 ms a client.
                with httpx.Client(timeout=60, verify=False) as client:
                    barrier.wait()
                    return client.post(
                        url,
                        json=body,
                        headers={"Authorization": f"Api-Key {key}", "Idempotency-Key": event_key},
                    )

            responses = list(pool.map(send, range(PARALLEL)))
            codes = sorted(r.status_code for r in responses)
            assert set(codes) <= {200, 202}, codes
            assert codes.count(202) == 1, codes
            assert len({r.json()["event_id"] for r in responses}) == 1
            assert all(
                r.headers.get("Idempotent-Replayed") == "true"
                for r in responses
                if r.status_code == 200
            )
            assert Event.objects.filter(key=event_key).count() == 1
            assert Operation.objects.filter(event__key=event_key).count() == 3
            assert Delivery.objects.filter(event__key=event_key).count() == PARALLEL
    assert Event.objects.count() == ROUNDS
