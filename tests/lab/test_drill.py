"""The failure drill's whole matrix, and proof that it notices a broken rule."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django_q.models import OrmQ, Task

from idempotency_core.execution import perform, policy
from lab import drill
from lab.drill import CASES, DRILL_WORKERS_QUEUE, PROFILES, drill_run
from lab.emulators import EmulatorUnavailableError


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the drill races real threads
def test_every_cell_of_the_drill_holds():
    out = io.StringIO()
    call_command("drill", stdout=out, stderr=io.StringIO())
    table = out.getvalue()
    print(table)
    cells = len(CASES) * len(PROFILES)
    assert f"{cells} passed, 0 failed" in table
    for case in CASES:
        # One line per profile in the table, and the case's row of the matrix.
        assert table.count(case) == len(PROFILES) + 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the cluster needs commits
def test_every_cell_holds_when_a_real_worker_cluster_recovers(tmp_path):
    # The same interruptions, but every claim, retry, recovery and release after
    # them is done by a django-q2 cluster the drill starts on its own queue.
    out = io.StringIO()
    call_command("drill", cluster=True, stdout=out, stderr=io.StringIO())
    table = out.getvalue()
    print(table)
    assert f"{len(CASES) * len(PROFILES)} passed, 0 failed" in table
    # The cluster's workers did the work: django-q2 recorded their tasks on its queue.
    assert Task.objects.filter(cluster=DRILL_WORKERS_QUEUE, success=True).count() >= len(CASES)
    assert not OrmQ.objects.filter(key=DRILL_WORKERS_QUEUE).exists()  # cleaned up


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_the_drill_fails_a_cell_when_recovery_repeats_blindly(monkeypatch):
    # Break the rule on purpose: always repeat, even with nothing to recognise it.
    monkeypatch.setattr(policy, "recovery_for", lambda **_: policy.Recovery.REPEAT_WITH_KEY)
    monkeypatch.setattr(perform, "recovery_for", lambda **_: policy.Recovery.REPEAT_WITH_KEY)
    cells = drill_run(cases=["creation committed, answer lost"], profiles=["nothing"])
    assert len(cells) == 1 and not cells[0].holds
    assert any("duplicate" in problem for problem in cells[0].problems)
    with pytest.raises(SystemExit) as exit_:
        call_command(
            "drill",
            case=["creation committed, answer lost"],
            profile=["nothing"],
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    assert exit_.value.code == 1


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_drill_destination_sandbox_is_the_default_matrix_and_prints_its_columns():
    out = io.StringIO()
    call_command(
        "drill",
        destination="sandbox",
        case=["creation committed, answer lost"],
        stdout=out,
        stderr=io.StringIO(),
    )
    table = out.getvalue()
    assert f"{len(PROFILES)} passed, 0 failed" in table
    assert "| case | " + " | ".join(PROFILES) + " |" in table
    assert (
        "| creation committed, answer lost | 1/1/1/0 ok | 1/1/1/0 ok | 1/1/1/0 ok | 1/0/0/1 ok |"
        in table
    )


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_drill_against_a_vendor_without_its_package_is_a_clear_error(monkeypatch):
    def absent(vendor: str):
        raise EmulatorUnavailableError(f"the {vendor} emulator is not installed")

    monkeypatch.setattr(drill, "emulator_class", absent)
    err = io.StringIO()
    with pytest.raises(CommandError, match="cannot drill hubspot: the hubspot emulator is not"):
        call_command("drill", destination="hubspot", stdout=io.StringIO(), stderr=err)
