"""What every destination adapter offers and speaks: the interfaces the engine sees.

Onefold's engine talks to destinations only through the two protocols here,
`CrmAdapter` and `EmailAdapter`; it never knows which CRM or mail service is
behind them. An adapter call either returns an `Effect` or raises a classified
`DestinationError` (`integrations.outcomes`). What an adapter can recognise of a
repeat is its `Capabilities` (`integrations.capabilities`), built by the adapter from
its configuration; its calls' arguments are declared in `integrations.writes` and
`integrations.listing`, its request limits in `integrations.limits`. The engine
imports them from here, with the protocols; the adapters from where they are declared.

Nothing here imports Onefold's models: integrations sit below the core.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, Unpack, runtime_checkable

from integrations.capabilities import Capabilities, CapabilityCheck, ConfiguredCrmNames
from integrations.limits import Gated, RateLimit, RequestBudget
from integrations.listing import RecordListing
from integrations.outcomes import Classification, DestinationError, Effect, Reply
from integrations.writes import MailMessage, NewRecord, NewTask, RecordContent, RecordUpdate

__all__ = [
    "Adapter",
    "Capabilities",
    "CapabilityCheck",
    "Classification",
    "ConfiguredCrmNames",
    "CrmAdapter",
    "DestinationError",
    "Effect",
    "EmailAdapter",
    "Gated",
    "RateLimit",
    "RecordContent",
    "Reply",
    "RequestBudget",
]


@runtime_checkable
class CrmAdapter(Protocol):
    """A CRM: enquiries (records) and the tasks linked to them, keyed by our reference."""

    capabilities: Capabilities
    # The vendor's documented request limit (None: none to respect), shared by the
    # engine between every worker and corrected by the answers' headers.
    request_budget: RequestBudget | None

    def verify(self) -> list[CapabilityCheck]:
        """Each capability in `capabilities` checked against the live destination
        (network calls). A capability the adapter does not claim is not listed."""
        ...

    def names_check(self, names: ConfiguredCrmNames) -> list[CapabilityCheck]:
        """Each configured name checked against the live CRM (network calls): every
        enquiry and contact property against the schema of the objects the adapter
        writes, every assignee against its owners (by owner id, email address, or full
        name). One check per name, saying what was asked and what the CRM answered."""
        ...

    def create_record(self, **record: Unpack[NewRecord]) -> Effect:
        """`allow_duplicate`: a reviewer decided to create despite the destination's
        duplicate rule (DestinationError.create_anyway); ignored where there is none.
        `content`: the configured properties, contact properties, pipeline and stage."""
        ...

    def update_record(self, **update: Unpack[RecordUpdate]) -> Effect: ...

    def get_record(self, record_id: str) -> dict[str, Any] | None: ...

    def reference_check(self, record_id: str) -> str | None:
        """Why `record_id` cannot name a record of this CRM (its id format), or None.
        Asked before a reference a person typed is used in any call."""
        ...

    def find_record(self, *, external_ref: str) -> str | None: ...

    def create_task(self, **task: Unpack[NewTask]) -> Effect:
        """`assignee` is the name the configuration chose, or the source's own label.
        `assignee_is_owner` (the configuration chose it): it names one of the CRM's
        owners, and the task is that owner's: an owner id is used as it is, a name or
        email address is looked up in the CRM's owners (once per adapter), and one the
        CRM does not know is PERMANENT, naming it. Otherwise (the source's
        `task_assignee`): an id-shaped assignee is the owner, any other is only named in
        the task's text. `due_at`: when the task is due (None: no due date)."""
        ...

    def find_task(self, *, record_id: str, external_ref: str) -> str | None: ...

    def merge_records(self, *, survivor_id: str, duplicate_id: str, key: str) -> Effect: ...

    def erase_person(self, *, record_id: str, task_ids: tuple[str, ...] = ()) -> Effect:
        """A person's erasure (GDPR article 17): deletes the enquiry `record_id`, the
        tasks `task_ids` and the person or contact the enquiry names, by the ids
        Onefold holds (never by address). A part already gone (404) counts as
        deleted, so a repeat after a lost answer deletes nothing twice."""
        ...

    def iter_records(
        self, **listing: Unpack[RecordListing]
    ) -> Iterator[tuple[list[dict[str, Any]], str | None]]: ...


@runtime_checkable
class EmailAdapter(Protocol):
    """A mail service: one message per operation key."""

    capabilities: Capabilities
    request_budget: RequestBudget | None

    def verify(self) -> list[CapabilityCheck]: ...

    def send(self, **message: Unpack[MailMessage]) -> Effect:
        """`body` is the plain text; `html`, when given, its HTML alternative; `reply_to`
        one address for the Reply-To. The same arguments on every retry (rendered once)."""
        ...


Adapter = CrmAdapter | EmailAdapter
