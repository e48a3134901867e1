"""`bench_pipeline --in-process` and `--without-queue`: every pipeline run to its end
(in this process, or in plain forked processes) against the benchmark's own sandbox, and
the figures they print (lab/bench/pipeline.py)."""

from __future__ import annotations

import pytest
from django.conf import settings

from idempotency_core.models import Operation
from lab.bench.pipeline import bench_pipeline_in_process, bench_pipeline_measure

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)  # it commits


@pytest.mark.usefixtures("unhurried_chain")  # it runs each chain in a worker's task
def test_the_in_process_figure_runs_every_pipeline_and_prints_its_cpu(tmp_path) -> None:
    lines: list[str] = []
    profile = tmp_path / "chains.prof"
    best = bench_pipeline_in_process(count=3, rounds=2, out=lines.append, profile=str(profile))
    rounds = [line for line in lines if line.startswith("round ")]
    assert len(rounds) == 2 and all("ms of this process's CPU a submission" in r for r in rounds)
    assert (
        lines[-1] == f"in process, 3 pipelines one after the other: best {best:.2f} ms a submission"
    )
    assert best > 0
    assert profile.stat().st_size > 0  # the last round's statistics, for python -m pstats


@pytest.mark.usefixtures("unhurried_chain")
def test_the_engine_alone_runs_every_chain_in_plain_processes_beside_the_bare_client() -> None:
    lines: list[str] = []
    [(bare, engine)] = bench_pipeline_measure(
        count=5, clusters=[1], rounds=1, out=lines.append, without_queue=True
    )
    processes = int(settings.Q_CLUSTER["workers"])
    assert bare.label == f"bare client, {processes} processes"
    assert engine.label == f"engine alone, {processes} processes"
    # Every step succeeded once, in the database and in the sandbox.
    assert Operation.objects.filter(status=Operation.Status.SUCCEEDED).count() == 15
    assert (engine.submissions, engine.duplicates, bare.duplicates) == (5, 0, 0)
    assert engine.seconds > 0 and engine.cpu.client > 0
    assert lines[-1].startswith(
        f"engine alone, {processes} processes: {engine.rate / bare.rate:.2f}x the bare "
        "client's rate (the ceiling for the clusters' 0.6x target)"
    )
