"""Per vendor: 50 identical concurrent deliveries x 20 rounds through gunicorn and a
real worker cluster leave one record and one task each in the vendor's CRM.

Modelled on tests/core/test_ingest_concurrency.py (the race at the door) and
tests/core/test_end_to_end.py (the workers' effects): the vendor's emulator runs
on loopback in this process, ONEFOLD_CRM names it for gunicorn and the cluster,
and its adapter reads the emulator's credentials from the environment.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from idempotency_core.intake.ingest import event_status
from idempotency_core.intake.sources import source_create_with_key
from idempotency_core.models import Event, Operation, ReviewCase
from lab.drill import VENDOR_SETUP
from lab.emulators import CRM_VENDORS, available, emulator_class
from lab.emulators.kit import EmulatorServer
from tests.factories import submission
from tests.support.processes import start_web, wait_for

PARALLEL = 50
ROUNDS = 20


@pytest.fixture(params=available(CRM_VENDORS))
def vendor(request: pytest.FixtureRequest) -> Iterator[tuple[str, EmulatorServer]]:
    with emulator_class(request.param)() as emulator:
        yield request.param, emulator


def _events_done() -> bool:
    statuses: dict = {}
    for event_id, status in Operation.objects.values_list("event_id", "status"):
        statuses.setdefault(event_id, []).append(status)
    done = [event_status(s) for s in statuses.values()]
    return len(done) == ROUNDS and all(s != "processing" for s in done)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # real commits
def test_identical_concurrent_deliveries_make_one_record_and_one_task(
    vendor, sandbox, qcluster_factory, tmp_path: Path, request: pytest.FixtureRequest
):
    name, emulator = vendor
    env = {"ONEFOLD_CRM": name, **VENDOR_SETUP[name].env(emulator)}
    web = start_web(tmp_path, sandbox, env=env)
    request.addfinalizer(web.child.stop)
    qcluster_factory(**env)
    _, _, key = source_create_with_key(name="race")
    url = f"{web.url}/api/v1/submissions/"
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        for round_ in range(ROUNDS):
            event_key = f"{name}-race-{uuid.uuid4()}"
            # One person per round, so ingest flags no suspected duplicates.
            body = submission(
                contact={"name": f"Racer {round_}", "email": f"racer{round_}@example.com"},
                message=f"Round {round_}",
            )
            barrier = threading.Barrier(PARALLEL)

            def send(_: int, barrier=barrier, event_key=event_key, body=body) -> int:
                with httpx.Client(timeout=60) as client:
                    barrier.wait()
                    return client.post(
                        url,
                        json=body,
                        headers={"Authorization": f"Api-Key {key}", "Idempotency-Key": event_key},
                    ).status_code

            codes = sorted(pool.map(send, range(PARALLEL)))
            assert codes.count(202) == 1 and codes.count(200) == PARALLEL - 1, codes
    assert Event.objects.count() == ROUNDS
    wait_for(_events_done, timeout=300, interval=1, what="every event to finish")
    assert not ReviewCase.objects.exists(), list(ReviewCase.objects.values("kind", "summary"))
    assert set(Operation.objects.values_list("status", flat=True)) == {"succeeded"}
    stats = httpx.get(f"{emulator.http_url}/_sandbox/stats", timeout=30).json()
    enquiries = set(Operation.objects.filter(step="create_enquiry").values_list("key", flat=True))
    tasks = set(Operation.objects.filter(step="assign_task").values_list("key", flat=True))
    assert (stats["records"], stats["tasks"]) == (ROUNDS, ROUNDS)
    assert stats["records_by_external_ref"] == dict.fromkeys(enquiries, 1)
    assert stats["tasks_by_external_ref"] == dict.fromkeys(tasks, 1)
    assert sandbox.stats()["messages"] == ROUNDS
