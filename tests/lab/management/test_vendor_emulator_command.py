"""`manage.py emulator VENDOR`: a real process that says where it listens, answers
its vendor's controls there, and exits 0 on SIGTERM or SIGINT."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import httpx
import pytest

from lab.emulators import VENDORS, available
from tests.support.processes import spawn, wait_for

NAMES = {
    "hubspot": "HubSpot",
    "salesforce": "Salesforce",
    "pipedrive": "Pipedrive",
    "dataverse": "Dataverse",
    "resend": "Resend",
}


@pytest.mark.parametrize("vendor", available(VENDORS))
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_emulator_command_listens_answers_and_stops_cleanly(
    vendor: str, sig: signal.Signals, tmp_path: Path
) -> None:
    child = spawn(f"emulator-{vendor}", ["emulator", vendor, "--port", "0"], tmp_path)
    try:
        listening = rf"^{NAMES[vendor]} emulator listening on (http://127\.0\.0\.1:\d+)$"
        pattern = re.compile(listening, re.M)

        def url() -> str | None:
            if child.process.poll() is not None:
                raise RuntimeError(child.log())
            found = pattern.search(child.log())
            return found.group(1) if found else None

        base = wait_for(url, timeout=30, what=f"the {vendor} emulator to listen")
        stats = httpx.get(f"{base}/_sandbox/stats", timeout=10)
        assert stats.status_code == 200
        assert {"records", "tasks", "messages"} <= set(stats.json())
        child.process.send_signal(sig)
        assert child.process.wait(timeout=20) == 0
    finally:
        child.stop()


def test_an_unknown_vendor_is_refused_by_the_command(tmp_path: Path) -> None:
    child = spawn("emulator-zoho", ["emulator", "zoho"], tmp_path)
    assert child.process.wait(timeout=30) != 0
    assert "invalid choice: 'zoho'" in child.log()
