"""The locks that `make install` and a deployment install are the ones pyproject.toml
asks for: a pin changed in pyproject.toml without `make lock` fails here, before a venv
built from a lock runs code pyproject.toml no longer describes. requirements/dev.txt
holds the project with its dev tools, requirements/base.txt the project alone."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# `name==version \` opens each entry; a marker (`; python_full_version < '3.11.3'`) may follow.
_LOCKED = re.compile(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)", re.MULTILINE)
_PINNED = re.compile(r"^([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==(\S+)$")
LOCKS = ("dev.txt", "base.txt")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(lock: str) -> dict[str, str]:
    text = (REPO / "requirements" / lock).read_text()
    return {normalized(name): version for name, version in _LOCKED.findall(text)}


def pins(requirements: list[str]) -> dict[str, str]:
    found = {}
    for requirement in requirements:
        match = _PINNED.match(requirement.replace(" ", ""))
        assert match, f"{requirement!r} is not pinned exactly (name==version)"
        found[normalized(match[1])] = match[2]
    return found


PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


@pytest.mark.parametrize(
    ("lock", "wanted"),
    [
        ("dev.txt", [*PROJECT["dependencies"], *PROJECT["optional-dependencies"]["dev"]]),
        ("base.txt", PROJECT["dependencies"]),
    ],
)
def test_every_pin_of_pyproject_is_the_version_the_lock_installs(
    lock: str, wanted: list[str]
) -> None:
    wanted_pins = pins(wanted)
    lock_pins = locked(lock)
    assert {name: lock_pins.get(name) for name in wanted_pins} == wanted_pins, "run `make lock`"


def test_a_deployment_installs_what_the_tests_ran_on() -> None:
    """The deployment's lock is the dev lock less the dev tools: no package in another
    version, and none of the dev extra's own pins."""
    dev, base = locked("dev.txt"), locked("base.txt")
    assert {name: dev.get(name) for name in base} == base
    assert not base.keys() & pins(PROJECT["optional-dependencies"]["dev"]).keys()


@pytest.mark.parametrize("lock", LOCKS)
def test_every_locked_package_carries_its_hashes(lock: str) -> None:
    entries = re.split(r"\n(?=[A-Za-z0-9])", (REPO / "requirements" / lock).read_text())
    packages = [entry for entry in entries if _LOCKED.match(entry)]
    assert len(packages) == len(locked(lock)) > 20
    assert [entry.split()[0] for entry in packages if "--hash=sha256:" not in entry] == []
