"""What a destination can recognise of a repeat (`Capabilities`), and each claim checked
against the live destination (`CapabilityCheck`), as are the names the business
configuration uses in a CRM (`ConfiguredCrmNames`).

The adapter builds its `Capabilities` from its configuration: recovery after an
unclear attempt is chosen from that value alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Capabilities:
    """What a destination can recognise of a repeat (docs/architecture.md, Flow step 4).

    Built by the adapter from its configuration, never assembled by a caller:
    one value travels from the adapter to `policy.decide()`, so a capability
    added here cannot be forgotten on the way. The defaults claim nothing (no key, no
    unique reference, no lookup, no absence proven by one, no merge): an adapter names
    only what it offers.
    """

    # The destination honours an idempotency key, for `key_retention` (None: forever).
    idempotency_keys: bool = False
    key_retention: timedelta | None = None
    # A second create with the same external reference is refused and names the first.
    unique_external_ref: bool = False
    # Effects can be found by their external reference.
    lookup: bool = False
    # Whether "not found" by that lookup proves the effect absent: True only where the
    # lookup is a read that sees every write (not a search that lags writes, as
    # Pipedrive's): else an unclear create that is not found is a case, never a blind
    # repeat.
    lookup_proves_absence: bool = False
    # How long after an unclear attempt a lookup is worth asking (search lag).
    lookup_settle_seconds: float = 0.0
    # Records can be merged (duplicates settled in the CRM).
    merge: bool = False
    # What it recognises of a repeated task, where that differs from records (HubSpot:
    # no unique task property, but the enquiry's association list is a consistent read).
    tasks: Capabilities | None = None

    def for_tasks(self) -> Capabilities:
        return self.tasks if self.tasks is not None else self

    def recognises_repeat_at(self, *, first_presented_at: datetime | None, at: datetime) -> bool:
        """Whether a repeat presented at `at` is recognised by the idempotency key."""
        if not self.idempotency_keys or first_presented_at is None:
            return False
        return self.key_retention is None or at < first_presented_at + self.key_retention


@dataclass(frozen=True)
class CapabilityCheck:
    """One declared capability, checked against the live destination.

    `how` says in one line what was asked and what the destination answered
    (e.g. "GET /crm/v3/properties/deals/onefold_ref: hasUniqueValue=true"), for
    `check_destinations` and for the worker's refusal. It never holds a credential.
    A name the business configuration uses (`CrmAdapter.names_check`) is checked the
    same way; its `capability` then says which name: "enquiry.fields[amount]",
    "contact.fields[company]", "task.assignee[ana@example.com]".
    """

    capability: str  # a field name of Capabilities: "unique_external_ref", "lookup", ...
    verified: bool
    how: str


@dataclass(frozen=True)
class ConfiguredCrmNames:
    """What the business configuration names in a CRM (configuration/document.py
    `configured_names`, for every source that uses the CRM): the enquiry's and the
    contact's property names as written, and the task assignees (a name, an email
    address or an owner id), each to be found in the CRM's schema or among its owners."""

    enquiry_properties: frozenset[str] = frozenset()
    contact_properties: frozenset[str] = frozenset()
    assignees: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.enquiry_properties or self.contact_properties or self.assignees)

    def property_checks(
        self, enquiry: Callable[[str], tuple[bool, str]], contact: Callable[[str], tuple[bool, str]]
    ) -> list[CapabilityCheck]:
        """One check per configured property, by name: `enquiry` and `contact` say of a
        name whether the CRM's schema has it, and what was asked and answered."""
        return [
            *(enquiry_property_check(n, *enquiry(n)) for n in sorted(self.enquiry_properties)),
            *(contact_property_check(n, *contact(n)) for n in sorted(self.contact_properties)),
        ]


def enquiry_property_check(name: str, verified: bool, how: str) -> CapabilityCheck:
    return CapabilityCheck(f"enquiry.fields[{name}]", verified, how)


def contact_property_check(name: str, verified: bool, how: str) -> CapabilityCheck:
    return CapabilityCheck(f"contact.fields[{name}]", verified, how)
