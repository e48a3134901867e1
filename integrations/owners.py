"""A CRM's owners as adapters read them, and the one rule that finds the owner an
assignee names.

The business configuration names a task's assignee as people write it: an owner id,
an email address, or a full name (configuration/document.py). Each CRM adapter reads
its vendor's users (HubSpot's owners, Salesforce's and Dataverse's users, Pipedrive's
users) into `Owner`s, once per adapter, and `owner_match` picks the one the assignee
names: by id exactly; by email address ignoring case; by full name ignoring case and
runs of spaces. Two owners with one name are no answer (the email tells them apart).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from integrations.capabilities import CapabilityCheck
from integrations.outcomes import Classification, DestinationError, read_before_write
from integrations.writes import NewTask

# An owner id as the vendor takes it: a string, or Pipedrive's number.
T = TypeVar("T", str, int)


@dataclass(frozen=True)
class Owner:
    """A user a CRM record or task can be assigned to, by the vendor's `id`."""

    id: str
    name: str
    email: str


def owner_match(assignee: str, owners: Iterable[Owner], *, asked: str) -> tuple[Owner | None, str]:
    """The one owner `assignee` names, and what was found, in one line for a check's
    `how` or an error's text (`asked`: the request that listed the owners)."""
    wanted = assignee.strip()
    listed = list(owners)
    if "@" in wanted:
        found = [o for o in listed if o.email.casefold() == wanted.casefold()]
        by = "email"
    else:
        found = [o for o in listed if o.id == wanted]
        by = "id"
        if not found:
            name = _folded(wanted)
            found = [o for o in listed if _folded(o.name) == name]
            by = "name"
    if len(found) == 1:
        owner = found[0]
        return owner, f"{asked}: {wanted!r} is owner {owner.id} ({owner.name or owner.email})"
    if found:
        ids = ", ".join(o.id for o in found)
        return (
            None,
            f"{asked}: {len(found)} owners have the {by} {wanted!r} ({ids}): name one by email",
        )
    return None, f"{asked}: no owner has the id, email or name {wanted!r} ({len(listed)} listed)"


def owner_id_of(
    assignee: str,
    owners: Callable[[], Iterable[Owner]],
    *,
    asked: str,
    is_id: Callable[[str], object],
) -> str:
    """The owner id a configured assignee names, for a task's create: an id of the
    vendor's own form (`is_id`) as it is, else the one owner `owner_match` finds among
    `owners()` (read once per adapter; a failed read is a read before the write). None
    found: PERMANENT, naming it. The one rule every CRM adapter's `_owner_id` follows."""
    if is_id(assignee):
        return assignee
    with read_before_write("the owners could not be read"):
        listed = list(owners())
    owner, how = owner_match(assignee, listed, asked=asked)
    if owner is None:
        raise unknown_owner_error(assignee, how)
    return owner.id


def task_owner(
    task: NewTask, *, owner_id: Callable[[str], T], own_id: Callable[[str], T | None]
) -> T | None:
    """A task's owner. An assignee the configuration chose (`assignee_is_owner`) names
    one of the CRM's owners (`owner_id`, PERMANENT when none); the source's own label is
    the owner only when it is an id of the vendor's form already (`own_id`: the id, or
    None)."""
    assignee = task["assignee"]
    if task.get("assignee_is_owner", False) and assignee:
        return owner_id(assignee)
    return own_id(assignee) if assignee else None


def unknown_owner_error(assignee: str, how: str) -> DestinationError:
    """A configured assignee the CRM has no owner for: refused, and refused again until the
    configuration (or the CRM's users) changes. `check_destinations` says so first."""
    return DestinationError(
        f"no owner {assignee!r} in the CRM ({how}); correct task.assignee "
        "(manage.py config apply) or add the user, then replay",
        classification=Classification.PERMANENT,
    )


def assignee_check(name: str, verified: bool, how: str) -> CapabilityCheck:
    return CapabilityCheck(f"task.assignee[{name}]", verified, how)


def assignee_checks(
    assignees: Iterable[str],
    owners: Callable[[], Iterable[Owner]],
    *,
    asked: str,
    matched_as: Callable[[str], str] = str,
) -> list[CapabilityCheck]:
    """One check per configured assignee against `owners()` (`check_destinations`),
    each looked for as `matched_as` writes it (a vendor's own spelling of an id); the
    owners are not read when no assignee is configured."""
    names = sorted(assignees)
    listed = list(owners()) if names else []
    checks = []
    for assignee in names:
        owner, how = owner_match(matched_as(assignee), listed, asked=asked)
        checks.append(assignee_check(assignee, owner is not None, how))
    return checks


def _folded(name: str) -> str:
    return " ".join(name.split()).casefold()
