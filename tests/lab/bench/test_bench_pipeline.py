"""`bench_pipeline --in-process`: every pipeline run to its end in this process, against
the benchmark's own sandbox, and the figure it prints (lab/bench/pipeline.py)."""

from __future__ import annotations

import pytest

from lab.bench.pipeline import bench_pipeline_in_process

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
