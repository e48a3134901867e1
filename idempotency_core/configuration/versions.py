"""The configuration's versions: the current one, applying a new one, exporting."""

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
from idempotency_core.configuration.review_block import REVIEW_ORDER, review_target_problems
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
    problems = document_problems(document, sources=sources, marks=marks)
    return problems + review_target_problems(document, marks=marks)


def config_apply(
    *,
    document: Mapping[str, Any],
    actor: User | None = None,
    reason: str = "",
    dry_run: bool = False,
    marks: Marks | None = None,
    audit_action: str = "config_applied",
    audit_details: Mapping[str, Any] | None = None,
) -> ApplyResult:
    """Applies `document` as one new version, or raises ConfigInvalidError and writes
    nothing. The sources it names replace theirs (a source named with an empty block
    has no configuration afterwards); the sources it does not name keep theirs. With
    `dry_run`, only validates and says what would change. An apply that changes
    nothing writes no version. `audit_action` and `audit_details` name a special kind
    of apply in its audit entry (a restore: `config_restore`)."""
    problems = config_problems(document, marks=marks)
    if problems:
        raise ConfigInvalidError(problems)
    with transaction.atomic():
        if not dry_run:
            _apply_lock()
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
            action=audit_action,
            actor=actor,
            system=SYSTEM,
            reason=reason,
            details={
                "version": version.number,
                "previous_version": current.number,
                "sources": sorted((document.get("sources") or {}).keys()),
                "changes": changes,
                **(audit_details or {}),
            },
        )
    return result


def _apply_lock() -> None:
    """Taken by every writer of a version, in its transaction; a writer that reads the
    current version to build its document (a section's edit, a restore) takes it
    before that read, so no apply lands between its read and its write (PostgreSQL's
    transaction-level advisory locks stack: `config_apply` taking it again is free)."""
    with prepared_cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s::bigint)", [_APPLY_LOCK])


def _merged(current: Mapping[str, Any], applied: Mapping[str, Any]) -> dict[str, Any]:
    """The current document with each source `applied` names replaced by its block."""
    sources = dict(copy.deepcopy(current.get("sources") or {}))
    for name, block in (applied.get("sources") or {}).items():
        if block:
            sources[name] = copy.deepcopy(dict(block))
        else:
            sources.pop(name, None)
    merged: dict[str, Any] = {"sources": dict(sorted(sources.items()))}
    # The review block is replaced whole when the document names it (`review: {}`
    # removes it), and kept when it does not, as a source not named is.
    review = applied.get("review", current.get("review"))
    if review:
        merged["review"] = copy.deepcopy(dict(review))
    return merged


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
        return document_ordered({"sources": {source: sources.get(source) or {}}})
    return document_ordered({**document, "sources": sources})


def document_ordered(document: Mapping[str, Any]) -> dict[str, Any]:
    """`document` in the order the documentation writes it, for a person to read."""
    sources = dict(document.get("sources") or {})
    ordered = {"sources": {name: _source_ordered(b) for name, b in sorted(sources.items())}}
    if document.get("review"):
        ordered["review"] = _in_order(document["review"], REVIEW_ORDER)
    return ordered


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


# -- The console's edits: one section of one form's block, and a restore -------------


class ConfigConflictError(Exception):
    """The section was changed by someone else since the version the edit started from."""


class ConfigVersionMissingError(LookupError):
    """No version has that number."""


def section_of(document: Mapping[str, Any], *, source: str, form: str, section: str) -> Any:
    """What `document` says for one section of one form's block (`{}` for nothing)."""
    forms = ((document.get("sources") or {}).get(source) or {}).get("forms") or {}
    return (forms.get(form) or {}).get(section) or {}


def config_with_section(
    document: Mapping[str, Any],
    *,
    source: str,
    form: str,
    section: str,
    values: Mapping[str, Any],
) -> dict[str, Any]:
    """A copy of `document` whose `source`/`form` block has `values` as its `section`
    (empty `values`: the section removed, and a block or source left empty with it).
    The draft a console edit is previewed and applied from; writes nothing."""
    sources = dict(copy.deepcopy(dict(document.get("sources") or {})))
    block = dict(sources.get(source) or {})
    forms = dict(block.get("forms") or {})
    sections = dict(forms.get(form) or {})
    if values:
        sections[section] = copy.deepcopy(dict(values))
    else:
        sections.pop(section, None)
    if sections:
        forms[form] = sections
    else:
        forms.pop(form, None)
    if forms:
        sources[source] = {**block, "forms": forms}
    else:
        sources.pop(source, None)
    return {"sources": sources}


def config_section_apply(
    *,
    source: str,
    form: str,
    section: str,
    values: Mapping[str, Any],
    actor: User,
    reason: str,
    based_on: int | None = None,
    marks: Marks | None = None,
) -> ApplyResult:
    """One section of one form's block set to `values`, as a new version (`config_apply`).
    ConfigConflictError when the section changed since version `based_on` (saving would
    undo someone's change unseen); a change elsewhere is kept."""
    with transaction.atomic():
        _apply_lock()  # before the read: no apply lands between it and the write
        current = _newest()
        if based_on is not None and based_on != current.number:
            then = (
                BusinessConfigVersion.objects.filter(number=based_on)
                .values_list("document", flat=True)
                .first()
            )
            where = {"source": source, "form": form, "section": section}
            if section_of(then or {}, **where) != section_of(current.document, **where):
                raise ConfigConflictError(
                    f"The {section} settings of {source}/{form} were changed by version "
                    f"{current.number} after you opened them (version {based_on}): "
                    "open the page again to start from that version."
                )
        draft = config_with_section(
            current.document, source=source, form=form, section=section, values=values
        )
        block = (draft.get("sources") or {}).get(source) or {}
        return config_apply(
            document={"sources": {source: block}}, actor=actor, reason=reason, marks=marks
        )


def config_restore(*, number: int, actor: User, reason: str, dry_run: bool = False) -> ApplyResult:
    """Version `number`'s whole document applied as a new version, audited as
    `config_restored`; with `dry_run`, what restoring would change. Raises
    ConfigVersionMissingError, or ConfigInvalidError when it no longer holds."""
    with transaction.atomic():
        if not dry_run:
            _apply_lock()  # the sources to empty are read from the current version
        old = (
            BusinessConfigVersion.objects.filter(number=number)
            .values_list("document", flat=True)
            .first()
        )
        if old is None:
            raise ConfigVersionMissingError(f"There is no configuration version {number}.")
        restored = dict((old or {}).get("sources") or {})
        existing = set(Source.objects.values_list("name", flat=True))
        # A removed source's block stays in the document (nothing reads it); emptying
        # it would be refused by validation, which knows only the sources that exist.
        emptied: dict[str, Any] = {
            name: {}
            for name in (_newest().document.get("sources") or {})
            if name not in restored and name in existing
        }
        return config_apply(
            document={"sources": {**emptied, **restored}, "review": old.get("review") or {}},
            actor=actor,
            reason=reason,
            dry_run=dry_run,
            audit_action="config_restored",
            audit_details={"restored_version": number},
        )
