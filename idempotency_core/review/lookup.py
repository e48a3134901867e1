"""A reviewer's look at the destination: does this operation's effect exist there?"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User

from idempotency_core.audit.entries import audit_record
from idempotency_core.execution.destinations import (
    NotACrmError,
    capabilities_of,
    crm_adapter_for,
    is_crm,
)
from idempotency_core.execution.steps import step_context, step_of
from idempotency_core.models import AuditEntry, Destination, Operation, ReviewCase
from idempotency_core.review.refusals import CaseActionRefusedError
from integrations.base import Capabilities, CrmAdapter, DestinationError

# How far back from the first presentation the listing scan starts: clocks of
# Onefold and the destination may disagree a little.
_LISTING_SLACK = timedelta(minutes=10)
_LISTING_MAX_PAGES = 20


@dataclass(frozen=True)
class LookupResult:
    """What the destination said about an operation's effect.

    `found` is True (the effect exists, `refs` names it), False (looked and it is
    absent) or None (the destination cannot say; the reviewer must check by hand).
    """

    found: bool | None
    method: str
    message: str
    refs: list[str] = field(default_factory=list)

    def as_details(self) -> dict[str, Any]:
        return asdict(self)


def operation_destination_lookup(
    *, operation_id: int, actor: User, case: ReviewCase | None = None
) -> LookupResult:
    """Asks the destination whether the operation's effect exists, and audits the answer:
    by external reference where it can, else (a CRM's enquiry) from its listing since
    just before the key was first presented; for email, what to check by hand.
    """
    operation = Operation.objects.select_related("event__source", "destination").get(
        pk=operation_id
    )
    result = _lookup(operation)
    audit_record(
        action="destination_lookup",
        actor=actor,
        case=case,
        operation=operation,
        details=result.as_details(),
    )
    return result


def latest_lookup(operation: Operation) -> AuditEntry | None:
    """The last recorded lookup of this operation's effect, shown on the case page."""
    return (
        AuditEntry.objects.filter(operation=operation, action="destination_lookup")
        .order_by("-at", "-pk")
        .first()
    )


def lookup_found_reference(operation: Operation) -> tuple[str, AuditEntry]:
    """The one record the last lookup found for this operation, and that lookup's
    audit entry: what "resolve with the record found" settles with, read from the
    stored lookup (never from the request). Refused when the last lookup found
    nothing, could not say, found more than one record, or is older than the last
    attempt (which may have changed what the destination holds)."""
    lookup = latest_lookup(operation)
    if lookup is None:
        raise CaseActionRefusedError("No lookup yet: look the record up in the CRM first.")
    refs = [str(r) for r in lookup.details.get("refs") or []]
    if lookup.details.get("found") is not True or not refs:
        raise CaseActionRefusedError(
            "The last lookup did not find the record, so there is nothing to resolve with."
        )
    if len(refs) > 1:
        raise CaseActionRefusedError(
            f"The last lookup found {len(refs)} records ({', '.join(refs)}); choose one with "
            "'mark resolved' and say why, or close the case."
        )
    last_attempt = operation.attempts.order_by("-number").values_list("started_at", flat=True)
    started = last_attempt.first()
    if started is not None and lookup.at < started:
        raise CaseActionRefusedError(
            "The last lookup is older than the last try: look the record up again first."
        )
    return refs[0], lookup


def lookup_can_answer(operation: Operation, *, capabilities: Capabilities | None = None) -> bool:
    """Whether `operation_destination_lookup` can tell if this operation's effect exists:
    by the destination's lookup, or (an enquiry in a CRM without one) its listing.
    `capabilities`, the destination's as the caller read them, saves a second read
    (for the sandbox a request)."""
    destination = operation.destination
    if not is_crm(destination):
        return False
    try:
        step = step_of(operation)
    except KeyError:
        return False
    offered = capabilities if capabilities is not None else capabilities_of(destination)
    native = offered.lookup and step.find is not None
    return native or operation.step == "create_enquiry"


def _lookup(operation: Operation) -> LookupResult:
    try:
        step = step_of(operation)
    except KeyError:
        return LookupResult(None, "none", f"Unknown step {operation.step}; check by hand.")
    destination = operation.destination
    if destination.kind == Destination.Kind.SMTP:
        return LookupResult(
            None,
            "none",
            "Email cannot be looked up. Search the mailbox or the mail relay's log for "
            f"Message-ID <{operation.key}@onefold>, or ask the customer.",
        )
    if not lookup_can_answer(operation):
        return LookupResult(
            None,
            "none",
            f"{destination.name} offers no lookup for {operation.step}. Check it by hand for "
            f"external reference {operation.key}.",
        )
    context = step_context(operation)
    try:
        if context.adapter.capabilities.lookup and step.find is not None:
            found = step.find(context)
            if found:
                return LookupResult(
                    True, "lookup", f"Found by external reference {operation.key}.", [found]
                )
            return LookupResult(
                False, "lookup", f"No effect holds external reference {operation.key}."
            )
        return _scan_listing(operation, context.crm)  # an enquiry, in a CRM without lookup
    except DestinationError as exc:
        return LookupResult(None, "error", f"The destination did not answer usefully: {exc}")


def _scan_listing(operation: Operation, crm: CrmAdapter) -> LookupResult:
    started = operation.first_presented_at or operation.created_at
    since = (started - _LISTING_SLACK).isoformat()
    found: list[str] = []
    for pages, (page, _cursor) in enumerate(crm.iter_records(since=since, limit=2000), 1):
        found.extend(str(r["id"]) for r in page if r.get("external_ref") == operation.key)
        if pages >= _LISTING_MAX_PAGES:
            return LookupResult(
                bool(found) or None,
                "listing",
                f"Scanned {pages} pages of records since {since} and stopped; "
                "check the rest by hand.",
                found,
            )
    if found:
        return LookupResult(
            True,
            "listing",
            f"The CRM has no lookup; its record listing since {since} holds "
            f"{len(found)} record(s) with external reference {operation.key}.",
            found,
        )
    return LookupResult(
        False,
        "listing",
        f"The CRM has no lookup; its record listing since {since} holds no record with "
        f"external reference {operation.key}.",
    )


# A typed reference is echoed in refusals; a pasted page of text is not.
_ECHO_MAX = 60


def reference_verify(operation: Operation | None, destination_ref: str) -> str:
    """Checks that a reference a reviewer typed names this operation's CRM record.

    An enquiry's reference must have the CRM's id format (checked before any call), exist,
    not be merged away and carry this operation's key: "exists" alone would let another
    customer's record settle this one. A task must be the one found under this enquiry
    by this operation's key. Other references are the reviewer's word.
    """
    if operation is None or operation.step not in ("create_enquiry", "assign_task"):
        return "reviewer"
    try:
        crm = crm_adapter_for(operation.destination)
    except NotACrmError:
        return "reviewer"
    if operation.step == "assign_task":
        return _task_of_this_enquiry(operation, crm, destination_ref)
    name = operation.destination.name
    shown = _shown(destination_ref)
    problem = crm.reference_check(destination_ref)
    if problem is not None:
        raise CaseActionRefusedError(f"{shown} is not a {name} record reference: {problem}.")
    try:
        record = crm.get_record(destination_ref)
    except DestinationError as exc:
        raise CaseActionRefusedError(f"Could not check {shown} in {name}: {exc}") from exc
    if record is None:
        raise CaseActionRefusedError(f"{name} has no record {shown}; check the reference.")
    if record.get("merged_into"):
        raise CaseActionRefusedError(
            f"{shown} was merged into {_shown(str(record['merged_into']))}; use that reference."
        )
    return _record_of_operation(record, operation, shown)


def _task_of_this_enquiry(operation: Operation, crm: CrmAdapter, destination_ref: str) -> str:
    """A typed task id settles an `assign_task` case only when it is the task the CRM
    holds under this submission's enquiry with this operation's key as its reference:
    another customer's task, or this enquiry's task made for another reason, is
    refused. The typed id is only compared, never sent. A CRM that cannot look a task
    up cannot show whose a task is, so a typed id is refused there too."""
    shown = _shown(destination_ref)
    name = operation.destination.name
    enquiry = (
        Operation.objects.filter(event_id=operation.event_id, step="create_enquiry")
        .values_list("destination_ref", flat=True)
        .first()
    )
    if not enquiry:
        raise CaseActionRefusedError(
            "This submission's enquiry is not in the CRM yet, so no task can be its task."
        )
    if not capabilities_of(operation.destination).lookup:
        raise CaseActionRefusedError(
            f"{name} cannot look a task up, so nothing shows that {shown} is this "
            "submission's task: try the step again, or close the case."
        )
    try:
        found = crm.find_task(record_id=enquiry, external_ref=operation.key)
    except DestinationError as exc:
        raise CaseActionRefusedError(f"Could not check {shown} in {name}: {exc}") from exc
    if found is None or str(found) != destination_ref:
        raise CaseActionRefusedError(
            f"{shown} is not the task this submission made: {name} holds "
            + (f"task {_shown(str(found))}" if found else "no task")
            + " under this submission's enquiry with this step's reference. Check the id."
        )
    return "task_of_this_enquiry"


def _record_of_operation(record: dict[str, Any], operation: Operation, shown: str) -> str:
    external_ref = record.get("external_ref")
    if external_ref == operation.key:
        return "external_ref_matches"
    if not external_ref:
        raise CaseActionRefusedError(
            f"{shown} carries no external reference, so nothing shows it is this enquiry. "
            f"Set its external reference to {operation.key} in "
            f"{operation.destination.name} first, or close the case."
        )
    raise CaseActionRefusedError(
        f"{shown} belongs to another submission: its external reference is not this "
        f"operation's ({operation.key}). Check the reference."
    )


def _shown(reference: str) -> str:
    """A typed reference as refusals quote it: repr (control characters visible), cut short."""
    if len(reference) > _ECHO_MAX:
        reference = reference[:_ECHO_MAX] + "…"
    return repr(reference)
