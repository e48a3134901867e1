"""A vendor destination whose configuration claims what the CRM does not honour is
refused: by `check_destinations` (non-zero, naming it) and by the workers (never
called; the attempt says why).

Each vendor's emulator runs on loopback; its `/_sandbox/config` switches off what
the adapter's capability rests on (knobs from each package's docstring):
HubSpot's reference property without hasUniqueValue, Salesforce's reference
field not Unique, Pipedrive's reference field gone from the lead fields,
Dataverse's alternate key not yet Active.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from idempotency_core.execution.destinations import verification_forget
from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import Attempt
from lab.drill import VENDOR_SETUP
from lab.emulators import CRM_VENDORS, available, emulator_class
from lab.emulators.kit import EmulatorServer
from tests.factories import ingest, op
from tests.support.processes import REPO, Sandbox, app_env

# vendor -> (the /_sandbox/config change, the capability it breaks)
MISDECLARED: dict[str, tuple[dict[str, Any], str]] = {
    "hubspot": ({"reference_unique": False}, "unique_external_ref"),
    "salesforce": ({"reference_unique": False}, "unique_external_ref"),
    "pipedrive": ({"lead_fields": []}, "lookup"),
    "dataverse": ({"alternate_key_status": "Pending"}, "unique_external_ref"),
}
VENDORS = available(CRM_VENDORS)


@pytest.fixture(params=VENDORS)
def vendor(request: pytest.FixtureRequest) -> Iterator[tuple[str, EmulatorServer, dict[str, str]]]:
    """(vendor, its emulator running, the variables that make it the default CRM)."""
    name = request.param
    with emulator_class(name)() as emulator:
        env = {"ONEFOLD_CRM": name, **VENDOR_SETUP[name].env(emulator)}
        yield name, emulator, env


def _misdeclare(name: str, emulator: EmulatorServer) -> str:
    change, capability = MISDECLARED[name]
    httpx.post(f"{emulator.http_url}/_sandbox/config", json=change, timeout=10).raise_for_status()
    return capability


def _check(sandbox: Sandbox, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "check_destinations", "crm"],
        cwd=REPO,
        env={**os.environ, **app_env(sandbox), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_every_crm_vendor_package_is_here():
    # The parametrised tests below run per package found; say so if one is missing.
    assert list(CRM_VENDORS) == VENDORS


@pytest.mark.django_db
def test_check_destinations_verifies_each_vendor_as_configured(sandbox, vendor):
    _, _, env = vendor
    result = _check(sandbox, env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(line.split("\t")[2] == "verified" for line in lines), lines


@pytest.mark.django_db
def test_check_destinations_refuses_a_misdeclared_vendor_naming_it(sandbox, vendor):
    name, emulator, env = vendor
    capability = _misdeclare(name, emulator)
    result = _check(sandbox, env)
    assert result.returncode == 1
    refused = [line.split("\t") for line in result.stdout.splitlines()]
    assert ["crm", capability, "refused"] in [f[:3] for f in refused], result.stderr[-3000:]
    assert "refused: crm" in result.stderr


@pytest.mark.django_db
def test_the_workers_refuse_a_misdeclared_vendor_and_never_call_it(
    sandbox, vendor, settings, monkeypatch
):
    name, emulator, env = vendor
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    settings.ONEFOLD_CRM = name
    verification_forget()
    capability = _misdeclare(name, emulator)
    enquiry = op(ingest(f"misdeclared-{name}"), "create_enquiry")
    assert operation_execute(operation_id=enquiry.pk) == "waited"  # parked, not failed
    attempt = Attempt.objects.get(operation=enquiry)
    assert attempt.error_class == "DestinationRefusedError"
    assert attempt.error_message.startswith(f"destination crm refused, not called: {capability}")
    stats = httpx.get(f"{emulator.http_url}/_sandbox/stats", timeout=10).json()
    assert stats["records"] == 0
    assert stats["calls"].get("create_record", 0) == 0
    verification_forget()
