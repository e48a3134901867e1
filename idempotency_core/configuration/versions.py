"""The configuration's versions: the current one, applying a new one, exporting.

Every change is a new `BusinessConfigVersion` (never an update: a trigger refuses
one), written with who and why and audited as `config_applied`; the newest is the
configuration. `config_apply` is the one way to write one, for the command and the
console alike: it validates the whole document first and writes nothing unless all
of it holds.

The current version is read through the per-process cache of `config_cache.py`: a new
version NOTIFYs `onefold_config` at its commit (migration 0028), so a worker renders
the next operation from it, and no render pays a query while nothing changes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from idempotency_core.audit.entries import audit_record
from idempotency_core.config_cache import config_cached
from idempotency_core.configuration.document import (
    ANY_FORM,
    SECTIONS_ORDER,
    Marks,
    Problem,
    document_problems,
)
from idempotency_core.models import BusinessConfigVersion, Source
from idempotency_core.sql import prepared_cursor

SYSTEM = "config apply"
# One apply at a time: the version numbers of two at once would collide.
_APPLY_LOCK = 0x6F6E65666F6C6463  # "onefoldc"


@dataclass(frozen=True)
class ConfigVersion:
    """A version as rendering reads it: 0 with an empty document when none exists."""

    number: int
    document: Mapping[str, Any]


class ConfigInvalidError(Exception):
    """The document cannot be applied; `problems` names each thing wrong, in order."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(problem) for problem in problems))
        self.problems = problems


@dataclass(frozen=True)
class ApplyResult:
    """What an apply did, or with `dry_run` would do."""

    # The version written (with dry_run: the number it would get).
    number: int
    # What changed, as "sources.website.forms.*.task.title changed" lines.
    changes: list[str]
    dry_run: bool

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def config_current() -> ConfigVersion:
    """The newest version (number 0, nothing configured, when there is none)."""
    return config_cached(("business_config",), _newest)


def _newest() -> ConfigVersion:
    version = BusinessConfigVersion.objects.order_by("-number").only("number", "document").first()
    if version is None:
        return ConfigVersion(0, {})
    return ConfigVersion(version.number, version.document or {})


def config_problems(document: object, *, marks: Marks | None = None) -> list[Problem]:
    """Every problem of `document` against the sources that exist now."""
    sources = set(Source.objects.values_list("name", flat=True))
    return document_problems(document, sources=sources, marks=marks)


def config_apply(
    *,
    document: Mapping[str, Any],
    actor: User | None = None,
    reason: str = "",
    dry_run: bool = False,
    marks: Marks | None = None,
) -> ApplyResult:
    """Applies `document` as one new version, or raises ConfigInvalidError and writes
    nothing. The sources it names replace theirs (a source named with an empty block
    has no configuration afterwards); the sources it does not name keep theirs. With
    `dry_run`, only validates and says what would change. An apply that changes
    nothing writes no version."""
    problems = config_problems(document, marks=marks)
    if problems:
        raise ConfigInvalidError(problems)
    with transaction.atomic():
        if not dry_run:
            with prepared_cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s::bigint)", [_APPLY_LOCK])
        current = _newest()
        merged = _merged(current.document, document)
        changes = list(config_changes(current.document, merged))
        result = ApplyResult(current.number + 1, changes, dry_run)
        if dry_run or not changes:
            return result
        version = BusinessConfigVersion.objects.create(
            number=result.number,
            document=merged,
            created_by=actor,
            actor_label=f"user:{actor.get_username()}" if actor is not None else f"system:{SYSTEM}",
            reason=reason,
        )
        audit_record(
            action="config_applied",
            actor=actor,
            system=SYSTEM,
            reason=reason,
            details={
                "version": version.number,
                "previous_version": current.number,
                "sources": sorted((document.get("sources") or {}).keys()),
                "changes": changes,
            },
        )
    return result


def _merged(current: Mapping[str, Any], applied: Mapping[str, Any]) -> dict[str, Any]:
    """The current document with each source `applied` names replaced by its block."""
    sources = dict(copy.deepcopy(current.get("sources") or {}))
    for name, block in (applied.get("sources") or {}).items():
        if block:
            sources[name] = copy.deepcopy(dict(block))
        else:
            sources.pop(name, None)
    return {"sources": dict(sorted(sources.items()))}


def config_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> Iterator[str]:
    """What differs between two documents, one line per value added, removed or
    changed, by its path: never the values (a template may quote a customer's name)."""
    old, new = dict(_leaves(before)), dict(_leaves(after))
    for path in sorted(old.keys() | new.keys()):
        if path not in old:
            yield f"{path} added"
        elif path not in new:
            yield f"{path} removed"
        elif old[path] != new[path]:
            yield f"{path} changed"


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif path:  # the empty document has no leaf
        yield path, json.dumps(value, sort_keys=True)


def config_export(*, source: str | None = None) -> dict[str, Any]:
    """The current document, or only `source`'s block (empty when it has none), in the
    order the documentation writes it (PostgreSQL's jsonb keeps no key order)."""
    document = config_current().document
    sources = dict(document.get("sources") or {})
    if source is not None:
        sources = {source: sources.get(source) or {}}
    return {"sources": {name: _source_ordered(block) for name, block in sorted(sources.items())}}


def _source_ordered(block: Mapping[str, Any]) -> dict[str, Any]:
    forms = dict((block or {}).get("forms") or {})
    # "*" (the rest) last, after the forms it does not cover.
    names = sorted(forms, key=lambda name: (name == ANY_FORM, name))
    ordered = {name: _in_order(forms[name] or {}, SECTIONS_ORDER) for name in names}
    return {"forms": ordered} if block else {}


def _in_order(value: Any, order: Mapping[str, Any]) -> Any:
    """`value` with its keys in `order`'s order (unknown keys after, sorted), nested."""
    if not isinstance(value, Mapping):
        return copy.deepcopy(value)
    keys = [key for key in order if key in value] + sorted(k for k in value if k not in order)
    return {key: _in_order(value[key], order.get(key) or {}) for key in keys}
