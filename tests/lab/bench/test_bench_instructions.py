"""`bench_instructions`: each child counts what it should, under valgrind, and the count
is of the work, not of the machine (lab/bench/instructions.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection

from idempotency_core.models import Event, Operation
from lab.bench.bare_endpoint import BARE_TABLE
from lab.bench.instructions import Count, InstructionsError, ingest_split, instructions_counted

# Valgrind runs a child at a fiftieth of its speed: minutes, not seconds.
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

HERE = Path(settings.BASE_DIR)


def test_an_ingest_count_is_of_the_requests_posted_and_grows_with_them():
    two = instructions_counted(HERE, "ingest", 2)
    four = instructions_counted(HERE, "ingest", 4)
    # 2 warm-ups and 2 counted, then 4 and 4: every request a new event.
    assert Event.objects.count() == 4 + 8
    assert 1e6 < two.per_item < 50e6, two
    # Counted per request, the two agree within a few percent: warm-ups are not counted.
    assert four.per_item == pytest.approx(two.per_item, rel=0.15)
    assert str(two).endswith("M instructions a request")


@pytest.mark.usefixtures("unhurried_chain")
def test_a_pipeline_count_runs_every_chain_to_its_end():
    counted = instructions_counted(HERE, "pipeline", 2)
    assert Operation.objects.filter(status=Operation.Status.SUCCEEDED).count() == 3 * 4
    assert 1e6 < counted.per_item < 100e6, counted
    assert str(counted).endswith("M instructions a chain")


def test_a_child_that_fails_is_reported_with_its_output(tmp_path):
    (tmp_path / "config").mkdir()  # a checkout with no Onefold in it
    (tmp_path / "config" / "__init__.py").write_text("")
    (tmp_path / "config" / "settings.py").write_text("raise RuntimeError('not Onefold')\n")
    with pytest.raises(InstructionsError, match="the ingest child of"):
        instructions_counted(tmp_path, "ingest", 1)


def test_the_command_refuses_a_database_that_is_not_a_bench_one():
    with pytest.raises(CommandError, match="lacks 'bench'"):
        call_command("bench_instructions", "--count", "1")


def test_the_baselines_count_their_own_requests_and_split_an_ingest_request():
    counts = [instructions_counted(HERE, kind, 2) for kind in ("ingest", "bare", "service")]
    # The API and the service each stored their requests as events (2 warm-ups and 2
    # counted each); the bare endpoint stored its own rows, no event.
    assert Event.objects.count() == 4 + 4
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {BARE_TABLE}")
        assert cursor.fetchone()[0] >= 4
    api, bare, service = (c.per_item for c in counts)
    # Each layer executes more than the one under it.
    assert bare < service < api, counts
    split = ingest_split(counts)
    assert split is not None and split.startswith("ingest, split: the bare endpoint ")


def _count(kind: str, millions: float) -> Count:
    return Count(HERE, kind, 10, int(millions * 10e6))


def test_the_split_is_the_differences_between_the_three_counts():
    split = ingest_split([_count("ingest", 5.0), _count("bare", 2.5), _count("service", 4.0)])
    assert split == (
        "ingest, split: the bare endpoint 2.500 M, the ingest service +1.500 M, the API's "
        "own work +1.000 M (a request 5.000 M); the bare endpoint's instructions are "
        "0.50x Onefold's, 0.62x the service's"
    )
    # Without a baseline there is nothing to split.
    assert ingest_split([_count("ingest", 5.0), _count("bare", 2.5)]) is None
    assert ingest_split([_count("pipeline", 9.0)]) is None
