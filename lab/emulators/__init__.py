"""Which local emulator stands in for which vendor, found when first asked for.

Each vendor has a module here, `lab/emulators/<vendor>.py`, with one subclass of
`EmulatorServer` whose `vendor` attribute names it. They are imported only when
asked for (`manage.py emulator VENDOR`, the drill, tests): a vendor whose
module is absent is reported as such, never as an ImportError's traceback.
"""

from __future__ import annotations

import importlib
import inspect

from lab.emulators.kit import EmulatorServer

VENDORS = ("hubspot", "salesforce", "pipedrive", "dataverse", "resend")
CRM_VENDORS = ("hubspot", "salesforce", "pipedrive", "dataverse")


class EmulatorUnavailableError(LookupError):
    """No emulator for that vendor here (unknown vendor, or its package is absent)."""


def emulator_class(vendor: str) -> type[EmulatorServer]:
    """The vendor's `EmulatorServer` subclass, imported now."""
    if vendor not in VENDORS:
        raise EmulatorUnavailableError(f"no emulator for {vendor!r}; vendors: {', '.join(VENDORS)}")
    module_name = f"lab.emulators.{vendor}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise EmulatorUnavailableError(
                f"the {vendor} emulator is not installed ({module_name} is missing)"
            ) from exc
        raise
    for _, candidate in inspect.getmembers(module, inspect.isclass):
        if issubclass(candidate, EmulatorServer) and getattr(candidate, "vendor", "") == vendor:
            return candidate
    raise EmulatorUnavailableError(f"{module_name} defines no EmulatorServer for {vendor}")


def available(vendors: tuple[str, ...] = VENDORS) -> list[str]:
    """The vendors whose emulator can be imported here."""
    found = []
    for vendor in vendors:
        try:
            emulator_class(vendor)
        except EmulatorUnavailableError:
            continue
        found.append(vendor)
    return found
