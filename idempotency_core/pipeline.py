"""The steps of a pipeline: what each business effect calls, and how it is looked up.

Each step has its own boundary: it reads the references earlier steps left on
their operations and never repeats them. A failed task assignment therefore never
recreates the enquiry, and a resent confirmation can never come from a retried
enquiry step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from idempotency_core.models import Destination, Event, Operation, Source
from integrations.base import Classification, DestinationError, Effect
from integrations.crm import CrmClient
from integrations.email import SmtpSender

Adapter = CrmClient | SmtpSender


@dataclass(frozen=True)
class StepContext:
    operation: Operation
    event: Event
    # destination_ref of the event's earlier, succeeded steps, by step name.
    refs: dict[str, str]

    @property
    def payload(self) -> dict[str, Any]:
        if self.event.payload is None:
            raise DestinationError(
                "the event's payload was purged after its retention period",
                classification=Classification.PERMANENT,
            )
        return self.event.payload

    @property
    def contact(self) -> dict[str, Any]:
        return self.payload.get("contact") or {}

    def ref_of(self, step: str) -> str:
        try:
            return self.refs[step]
        except KeyError:
            raise DestinationError(
                f"step {step!r} has no destination reference yet",
                classification=Classification.PERMANENT,
            ) from None


@dataclass(frozen=True)
class Step:
    name: str
    # The role of the destination: "crm" or "email" (see destination_for).
    destination: str
    perform: Callable[[StepContext, Any], Effect]
    # Finds the effect by its external reference; None where the step has no lookup.
    find: Callable[[StepContext, Any], str | None] | None = None
    # No idempotency at the destination: an unclear send goes to review, never resent.
    at_most_once: bool = False


def _create_enquiry(ctx: StepContext, crm: CrmClient) -> Effect:
    payload = ctx.payload
    contact = ctx.contact
    return crm.create_record(
        external_ref=ctx.operation.key,
        fields={
            "name": contact.get("name", ""),
            "email": contact.get("email", ""),
            "phone": contact.get("phone", ""),
            "message": payload.get("message", ""),
            "form": payload.get("form", ""),
            "source": ctx.event.source.name,
            "submitted_at": payload.get("submitted_at"),
            "fields": payload.get("fields") or {},
        },
    )


def _find_enquiry(ctx: StepContext, crm: CrmClient) -> str | None:
    return crm.find_record(external_ref=ctx.operation.key)


def _assign_task(ctx: StepContext, crm: CrmClient) -> Effect:
    return crm.create_task(
        record_id=ctx.ref_of("create_enquiry"),
        external_ref=ctx.operation.key,
        title=f"Follow up {ctx.payload.get('form', 'website')} enquiry",
        assignee=ctx.event.source.task_assignee,
    )


def _find_task(ctx: StepContext, crm: CrmClient) -> str | None:
    return crm.find_task(record_id=ctx.ref_of("create_enquiry"), external_ref=ctx.operation.key)


def _send_confirmation(ctx: StepContext, mail: SmtpSender) -> Effect:
    contact = ctx.contact
    name = contact.get("name") or "there"
    body = (
        f"Hello {name},\n\n"
        "Thank you for your enquiry. We have received it and someone will be in touch.\n\n"
        f"Your reference: {ctx.ref_of('create_enquiry')}\n"
    )
    return mail.send(
        operation_key=ctx.operation.key,
        to=contact.get("email", ""),
        subject="We received your enquiry",
        body=body,
    )


STEPS: dict[str, Step] = {
    step.name: step
    for step in (
        Step("create_enquiry", "crm", _create_enquiry, _find_enquiry),
        Step("assign_task", "crm", _assign_task, _find_task),
        Step("send_confirmation", "email", _send_confirmation, at_most_once=True),
    )
}

DEFAULT_PIPELINE: tuple[str, ...] = ("create_enquiry", "assign_task", "send_confirmation")


def destination_for(source: Source, role: str) -> Destination:
    """The source's own destination for a role, else the default one of that name."""
    override = {"crm": source.crm, "email": source.mailer}.get(role)
    return override or Destination.objects.get(name=role)


def adapter_for(destination: Destination) -> Adapter:
    timeout = settings.ONEFOLD_HTTP_TIMEOUT_SECONDS
    if destination.kind == Destination.Kind.SMTP:
        host, _, port = destination.base_url.partition(":")
        return SmtpSender(
            host or settings.EMAIL_HOST,
            int(port or settings.EMAIL_PORT),
            timeout=timeout,
            sender=settings.DEFAULT_FROM_EMAIL,
        )
    return CrmClient(destination.base_url or settings.DESTINATION_URL, timeout=timeout)
