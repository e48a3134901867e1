"""`bench_latency` end to end at a tiny size: Onefold's gunicorn, a real cluster and the
sandbox, beside the bare path, and the breakdown read from Onefold's records
(lab/bench/latency.py). No figure is held to a bound here: timings belong to the
benchmark."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from lab.management.commands import bench_latency

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_the_command_times_every_submission_on_both_paths_and_breaks_down_onefolds(monkeypatch):
    # The test database's name lacks "bench"; the refusal has a test of its own below.
    monkeypatch.setattr(bench_latency, "bench_pipeline_database_check", lambda: None)
    out = StringIO()

    call_command("bench_latency", "--rates", "4", "--seconds", "1", stdout=out)

    text = out.getvalue()
    rows = re.findall(
        r"^\| 4 \| (bare path|Onefold) \| (\d+) \| \d+ \| \d+ \| \d+ \| (\d+) \|", text, re.M
    )
    assert rows == [("bare path", "4", "0"), ("Onefold", "4", "0")], text
    # Onefold's CPU a submission, its cluster's and PostgreSQL's, read from /proc.
    assert re.search(r"^\| 4 \| Onefold \|.* \| [\d.]+ \+ [\d.]+ \|$", text, re.M), text
    assert re.search(r"^4/s: Onefold's p95 \d+ ms, the bare path's \d+ ms", text, re.M), text
    stages = re.findall(r"^\| ([a-z_ ()'.,-]+?) \| [\d.]+ \| [\d.]+ \| [\d.]+ \|$", text, re.M)
    assert stages == [
        "ingest (due to the event's row)",
        "queue wait (event to first claim)",
        "create_enquiry",
        "gap before assign_task",
        "assign_task",
        "gap before send_confirmation",
        "send_confirmation (claim to the sink's stamp)",
    ], text


def test_the_command_refuses_a_database_that_is_not_a_bench_one():
    with pytest.raises(CommandError, match="refusing to empty"):
        call_command("bench_latency", "--rates", "1", "--seconds", "1")
