"""The ingest benchmark's own parts: its budget line (pure arithmetic on one run's CPU
figures) and the service endpoint it serves beside the bare one."""

import json

import pytest
from django.core.management import CommandError, call_command

from idempotency_core.intake.api.serializers import SubmissionSerializer
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Delivery, Event
from lab.bench import bare_endpoint
from lab.bench.ingest import CpuPerRequest, migrations_apart, submission_body, target_budget
from tests.factories import submission


def test_the_budget_is_what_the_target_leaves_the_server_after_the_database_and_client():
    bare = CpuPerRequest(server=0.69, database=0.14, client=0.20)  # 1.03 ms in all
    onefold = CpuPerRequest(server=1.36, database=0.32, client=0.22)

    budget = target_budget(bare, onefold, 0.8)

    assert budget.allowed == pytest.approx(1.03 / 0.8)
    assert budget.beyond_server == pytest.approx(0.18 + 0.02)
    # 1.2875 allowed - 1.03 the bare's - 0.20 beyond = 0.0575 for the server beyond the bare's.
    assert budget.server_budget == pytest.approx(0.0575)
    assert budget.server_spent == pytest.approx(0.67)
    assert f"leaves its server {budget.server_budget:.3f} ms" in str(budget)


def test_a_server_that_spends_exactly_its_budget_runs_at_the_target():
    """Holds the formula to its meaning: on busy cores, rate goes as 1 / CPU a request."""
    bare = CpuPerRequest(server=0.7, database=0.1, client=0.2)
    extra_db, extra_client = 0.15, 0.05
    budget = target_budget(bare, CpuPerRequest(0.7, 0.1 + extra_db, 0.2 + extra_client), 0.8)

    onefold = CpuPerRequest(
        server=0.7 + budget.server_budget, database=0.1 + extra_db, client=0.2 + extra_client
    )

    assert bare.total / onefold.total == pytest.approx(0.8)


@pytest.mark.django_db
def test_the_service_endpoint_ingests_through_the_service_once(client, settings):
    """What `service` measures is Onefold's ingest service: a new key is one event with its
    operations and an accepted delivery (202), a repeat creates nothing more (200)."""
    settings.ROOT_URLCONF = "lab.bench.bare_endpoint"
    bare_endpoint._bench_source.cache_clear()
    source, _ = source_get_or_create(name=bare_endpoint.BENCH_SOURCE_NAME)
    body = json.dumps(submission())

    answers = [
        client.post(
            bare_endpoint.SERVICE_PATH,
            data=body,
            content_type="application/json",
            headers={"Idempotency-Key": "svc-1"},
        )
        for _ in range(2)
    ]
    bare_endpoint._bench_source.cache_clear()

    assert [a.status_code for a in answers] == [202, 200]
    event = Event.objects.get(source=source, key="svc-1")
    assert {a.json()["id"] for a in answers} == {str(event.pk)}
    assert event.operations.count() == 3
    assert event.deliveries.filter(outcome=Delivery.Outcome.ACCEPTED).count() == 1


def test_the_benchmark_body_is_a_submission_the_api_accepts():
    """The service stores what it is sent unvalidated: the bodies the benchmark sends are
    valid submissions, so the service and the API store the same rows for them."""
    assert SubmissionSerializer(data=json.loads(submission_body("k-1"))).is_valid()


def _checkout(root, *migrations: str):
    (root / "config").mkdir(parents=True)
    (root / "config" / "wsgi.py").write_text("")
    for name in migrations:
        app, stem = name.split("/")
        (root / app / "migrations").mkdir(parents=True, exist_ok=True)
        (root / app / "migrations" / f"{stem}.py").write_text("")
        (root / app / "migrations" / "__init__.py").write_text("")
    return root


def test_checkouts_apart_by_a_migration_are_named_by_it(tmp_path):
    here = _checkout(tmp_path / "here", "core/0001_initial", "core/0002_more", "console/0001_x")
    same = _checkout(tmp_path / "same", "core/0001_initial", "core/0002_more", "console/0001_x")
    earlier = _checkout(tmp_path / "earlier", "core/0001_initial", "console/0001_x")

    assert migrations_apart(here, same) == []
    assert migrations_apart(here, earlier) == ["core/0002_more"]
    assert migrations_apart(earlier, here) == ["core/0002_more"]


def test_compare_refuses_a_checkout_whose_migrations_differ(tmp_path):
    """The earlier server would answer 500 to every request on this database's schema;
    refused at once, with what to do instead."""
    earlier = _checkout(tmp_path / "earlier", "idempotency_core/0001_initial")

    with pytest.raises(CommandError, match=r"its migrations are not this checkout's .*own"):
        call_command("bench_ingest", "--compare", str(earlier))


def test_compare_refuses_a_folder_that_is_not_a_checkout_of_onefold(tmp_path):
    with pytest.raises(CommandError, match="not a checkout of Onefold"):
        call_command("bench_ingest", "--compare", str(tmp_path))
