"""What every destination adapter offers and speaks: interfaces, capabilities, errors.

Onefold's engine talks to destinations only through the two protocols here,
`CrmAdapter` and `EmailAdapter`; it never knows which CRM or mail service is
behind them. An adapter call either returns an `Effect` (the destination holds
the effect, and here is its reference) or raises `DestinationError` classified
as one of:

- RETRYABLE: certainly not applied (connection refused before sending, 429, 503);
- PERMANENT: refused and will be refused again (400, 401, 403, 404, 422);
- AMBIGUOUS: may have been applied (timeout after sending, connection dropped
  before the answer, 500).

The engine decides what to do with each class; adapters only classify (an HTTP
status by the one rule in `integrations.http`). What
an adapter can recognise of a repeat is its `Capabilities`, built by the
adapter from its configuration: recovery after an unclear attempt is chosen
from that value alone.

Nothing here imports Onefold's models: integrations sit below the core.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, NotRequired, Protocol, TypedDict, Unpack, runtime_checkable

if TYPE_CHECKING:
    import httpx


class Classification(StrEnum):
    RETRYABLE = "retryable"
    PERMANENT = "permanent"
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class Reply:
    """A destination's answer code, named by the protocol that gave it: an HTTP
    status and an SMTP reply code are different things (SMTP 250 is success)."""

    protocol: str  # "http" or "smtp"
    code: int

    def __str__(self) -> str:
        return f"{self.protocol.upper()} {self.code}"


def http_reply(code: int | None) -> Reply | None:
    return Reply("http", code) if code is not None else None


def smtp_reply(code: int | None) -> Reply | None:
    return Reply("smtp", code) if code is not None else None


class RateLimit(StrEnum):
    """Which of a destination's limits refused a request (DestinationError.rate_limit):
    each is a wait, never a failed attempt."""

    NONE = ""
    # A short window (HubSpot's ten seconds, Resend's second): asked again after its reset,
    # without spending one of the operation's bounded attempts.
    WINDOW = "window"
    # A day's allowance is spent (HubSpot's DAILY policy, Salesforce's
    # REQUEST_LIMIT_EXCEEDED): the destination's work is parked until the reset.
    DAILY = "daily"
    # Not a limit of the destination's but of this one request: the same request (its
    # idempotency key) is still being processed (Resend's 409
    # concurrent_idempotent_requests). This attempt did nothing; it is asked again after
    # `retry_after`, not counted, and nothing else waits.
    IN_PROGRESS = "in_progress"


class RequestGate(Protocol):
    """What surrounds each request to a destination (`integrations.http.send`): `before`
    waits for the destination's shared budget, or raises a RETRYABLE `DestinationError`
    with `rate_limit` set when the wait would be long; `after` learns from the answer's
    rate-limit headers; `failed` (optional) is told when no answer came. `scope` names
    what it spends: two gates of one scope around one request are one."""

    scope: str

    def before(self, method: str, url: str) -> None: ...

    def after(self, response: httpx.Response) -> None: ...


class Gated(Protocol):
    """An HTTP adapter: each of its requests goes through `gate` (None: no budget)."""

    gate: RequestGate | None


@dataclass(frozen=True)
class RequestBudget:
    """How many requests a destination accepts, as its vendor documents it: `requests`
    in any `per_seconds`, and `daily` in a day where there is such a limit. `source`
    names the vendor's page. The engine shares it between every worker."""

    requests: int
    per_seconds: float
    source: str
    daily: int | None = None


@dataclass(frozen=True)
class BudgetHint:
    """What one answer's rate-limit headers say (`integrations.http.budget_hint`):
    learned from the destination rather than assumed. Any part may be unknown."""

    limit: int | None = None
    remaining: int | None = None
    # Seconds until the window (or, `daily`, the day's allowance) starts again.
    reset_seconds: float | None = None
    window_seconds: float | None = None
    daily: bool = False


class DestinationError(Exception):
    def __init__(
        self,
        message: str,
        *,
        classification: Classification,
        reply: Reply | None = None,
        retry_after: float | None = None,
        matches: tuple[str, ...] = (),
        create_anyway: bool = False,
        rate_limit: RateLimit = RateLimit.NONE,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.classification = classification
        self.reply = reply
        self.retry_after = retry_after
        # A rate limit refused it (nothing applied): asked again after `retry_after`,
        # never counted as a failed attempt.
        self.rate_limit = rate_limit
        # The records the destination says this create would duplicate (a CRM's
        # duplicate rule), and whether it would accept the create if told to allow a
        # duplicate (the rule only alerts). A person decides: link, or create anyway.
        self.matches = matches
        self.create_anyway = create_anyway


@dataclass(frozen=True)
class Effect:
    """The destination holds the effect; `ref` names it there."""

    ref: str
    reply: Reply | None = None
    # True when the effect already existed (409 on a unique reference, or found
    # by lookup) and was adopted rather than created by this call.
    adopted: bool = False

    @classmethod
    def deletion(cls, ref: str, status_code: int) -> Effect:
        """A DELETE's effect: a 404 is the deletion already made (a repeat after a lost
        answer), adopted."""
        return cls(ref=ref, reply=http_reply(status_code), adopted=status_code == 404)


@dataclass(frozen=True)
class RecordContent:
    """What the business configured an enquiry to carry beyond its core fields, rendered
    once for the operation (the engine's execution/content.py): the same on every retry.

    `properties` go on the enquiry object itself (a deal's `amount`, a lead's
    `Company`), `contact_properties` on its contact or person, where the CRM has one;
    `pipeline` and `stage` place it ("": the adapter's own setting).
    Names are the CRM's property names as the configuration wrote them; whether the CRM
    has them is checked against its schema by `check_destinations`, not here. Empty
    (the default) means the adapter's built-in content alone."""

    properties: dict[str, str] = field(default_factory=dict)
    contact_properties: dict[str, str] = field(default_factory=dict)
    pipeline: str = ""
    stage: str = ""


NO_CONTENT = RecordContent()


@dataclass(frozen=True)
class Capabilities:
    """What a destination can recognise of a repeat (docs/architecture.md, Flow step 4).

    Built by the adapter from its configuration, never assembled by a caller:
    one value travels from the adapter to `policy.decide()`, so a capability
    added here cannot be forgotten on the way.
    """

    # The destination honours an idempotency key, for `key_retention` (None: forever).
    idempotency_keys: bool = False
    key_retention: timedelta | None = None
    # A second create with the same external reference is refused and names the first.
    unique_external_ref: bool = False
    # Effects can be found by their external reference.
    lookup: bool = False
    # Whether "not found" by that lookup proves the effect absent. False where the
    # only lookup is a search that lags writes (Pipedrive): then an unclear create
    # that is not found is a case, never a blind repeat.
    lookup_proves_absence: bool = True
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


def assignee_check(name: str, verified: bool, how: str) -> CapabilityCheck:
    return CapabilityCheck(f"task.assignee[{name}]", verified, how)


def unknown_owner_error(assignee: str, how: str) -> DestinationError:
    """A configured assignee the CRM has no owner for: refused, and refused again until the
    configuration (or the CRM's users) changes. `check_destinations` says so first."""
    return DestinationError(
        f"no owner {assignee!r} in the CRM ({how}); correct task.assignee "
        "(manage.py config apply) or add the user, then replay",
        classification=Classification.PERMANENT,
    )


@contextmanager
def unclear_is_retryable(worded: Callable[[str], str]) -> Iterator[None]:
    """What an adapter does before the write that counts: an AMBIGUOUS failure in it left
    that write unsent, so it is RETRYABLE, its message as `worded` puts it."""
    try:
        yield
    except DestinationError as exc:
        if exc.classification != Classification.AMBIGUOUS:
            raise
        raise DestinationError(
            worded(exc.message), classification=Classification.RETRYABLE, reply=exc.reply
        ) from exc


def read_before_write(what: str) -> AbstractContextManager[None]:
    """A read an adapter makes before its write (the owners, a schema): a lost answer to
    it changed nothing, so it is RETRYABLE, never AMBIGUOUS (which would send the
    engine looking for an effect that cannot exist)."""
    return unclear_is_retryable(lambda message: f"{what}: {message} (nothing was written)")


def unknown_property_error(names: list[str], where: str) -> DestinationError:
    """Configured properties the CRM's schema does not have: nothing is sent."""
    return DestinationError(
        f"no property {', '.join(repr(n) for n in names)} in {where}; correct the "
        "configuration's fields (manage.py config apply), then replay",
        classification=Classification.PERMANENT,
    )


class VerificationError(Exception):
    """A destination whose declared capabilities do not hold: it is refused, never used."""

    def __init__(self, destination: str, refused: list[CapabilityCheck]) -> None:
        self.destination = destination
        self.refused = refused
        reasons = "; ".join(f"{check.capability}: {check.how}" for check in refused)
        super().__init__(f"destination {destination} refused: {reasons}")


# The keyword arguments of the adapters' calls, declared once here for the protocols and
# every adapter (`**record: Unpack[NewRecord]`); an absent key takes the default noted.


class NewRecord(TypedDict):
    """`CrmAdapter.create_record`'s arguments."""

    external_ref: str
    fields: dict[str, Any]
    allow_duplicate: NotRequired[bool]  # default False
    content: NotRequired[RecordContent]  # default NO_CONTENT


class RecordUpdate(TypedDict):
    """`CrmAdapter.update_record`'s arguments."""

    record_id: str
    fields: dict[str, Any]
    content: NotRequired[RecordContent]  # default NO_CONTENT


class NewTask(TypedDict):
    """`CrmAdapter.create_task`'s arguments."""

    record_id: str
    external_ref: str
    title: str
    assignee: str
    due_at: NotRequired[datetime | None]  # default None
    assignee_is_owner: NotRequired[bool]  # default False


# How many records a page of `CrmAdapter.iter_records` asks for when the caller names none.
LISTING_LIMIT = 2000


class RecordListing(TypedDict):
    """`CrmAdapter.iter_records`'s arguments."""

    since: str
    until: NotRequired[str | None]  # default None
    cursor: NotRequired[str | None]  # default None
    limit: NotRequired[int]  # default LISTING_LIMIT


def content_of(call: NewRecord | RecordUpdate) -> RecordContent:
    """The configured content a create or an update carries (NO_CONTENT: none)."""
    return call.get("content", NO_CONTENT)


def listing_limit(listing: RecordListing) -> int:
    """How many records a page of the listing asks for: the caller's, else LISTING_LIMIT."""
    return listing.get("limit", LISTING_LIMIT)


class MailMessage(TypedDict):
    """`EmailAdapter.send`'s arguments."""

    operation_key: str
    to: str
    subject: str
    body: str
    html: NotRequired[str | None]  # default None
    reply_to: NotRequired[str | None]  # default None


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
