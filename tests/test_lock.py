"""The lock (requirements/dev.txt) that `make install` installs is the one pyproject.toml
asks for: a pin changed in pyproject.toml without `make lock` fails here, before a venv
built from the lock runs code pyproject.toml no longer describes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# `name==version \` opens each entry; a marker (`; python_full_version < '3.11.3'`) may follow.
_LOCKED = re.compile(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)", re.MULTILINE)
_PINNED = re.compile(r"^([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==(\S+)$")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked() -> dict[str, str]:
    text = (REPO / "requirements" / "dev.txt").read_text()
    return {normalized(name): version for name, version in _LOCKED.findall(text)}


def test_every_pin_of_pyproject_is_the_version_the_lock_installs() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    pins = {}
    for requirement in wanted:
        match = _PINNED.match(requirement.replace(" ", ""))
        assert match, f"{requirement!r} is not pinned exactly (name==version)"
        pins[normalized(match[1])] = match[2]
    lock = locked()
    assert {name: lock.get(name) for name in pins} == pins, "run `make lock`"


def test_every_locked_package_carries_its_hashes() -> None:
    entries = re.split(r"\n(?=[A-Za-z0-9])", (REPO / "requirements" / "dev.txt").read_text())
    packages = [entry for entry in entries if _LOCKED.match(entry)]
    assert len(packages) == len(locked()) > 50
    assert [entry.split()[0] for entry in packages if "--hash=sha256:" not in entry] == []
