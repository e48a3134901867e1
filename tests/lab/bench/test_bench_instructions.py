"""`bench_instructions`: each child counts what it should, under valgrind, and the count
is of the work, not of the machine (lab/bench/instructions.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from idempotency_core.models import Event, Operation
from lab.bench.instructions import InstructionsError, instructions_counted

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
