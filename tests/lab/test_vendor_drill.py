"""`manage.py drill --destination VENDOR`: the whole interruption matrix against each
vendor's emulator holds, in process and with a real worker cluster recovering."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from lab.drill import CASES
from lab.emulators import CRM_VENDORS, available


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [False, True], ids=["engine", "cluster"])
@pytest.mark.parametrize("vendor", available(CRM_VENDORS))
@pytest.mark.django_db(transaction=True, serialized_rollback=True)  # the drill commits
def test_every_cell_of_the_drill_holds_against_the_vendor(vendor: str, cluster: bool) -> None:
    out = io.StringIO()
    call_command("drill", destination=vendor, cluster=cluster, stdout=out, stderr=io.StringIO())
    table = out.getvalue()
    print(table)
    assert f"{len(CASES)} passed, 0 failed" in table
    assert f"| case | {vendor} |" in table
    for case in CASES:
        assert f"| {case} | " in table
