"""The steps of a pipeline: what each business effect calls, and how it is looked up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from idempotency_core.audit.cases import review_case_settle
from idempotency_core.configuration.versions import ConfigVersion
from idempotency_core.execution.confirmations import (
    NO_ADDRESS,
    TURNED_OFF,
    Allowance,
    ConfirmationSkippedError,
    confirmation_allow,
)
from idempotency_core.execution.destinations import adapter_for, capabilities_of
from idempotency_core.execution.rendering import (
    RenderInput,
    Turn,
    confirmation_render,
    enquiry_render,
    task_render,
)
from idempotency_core.models import Event, Operation, ReviewCase, Source
from integrations.base import (
    Adapter,
    Capabilities,
    Classification,
    CrmAdapter,
    DestinationError,
    Effect,
    EmailAdapter,
    RecordContent,
)

_conformance: dict[tuple[type, type], bool] = {}


def _conforms(adapter: object, protocol: type) -> bool:
    """`isinstance(adapter, protocol)`, decided once per adapter class and process.
    Python 3.11's check of a runtime protocol calls `hasattr` on every member, which
    evaluates properties, and the sandbox adapter's `capabilities` is a network read."""
    key = (type(adapter), protocol)
    if key not in _conformance:
        _conformance[key] = isinstance(adapter, protocol)
    return _conformance[key]


@dataclass(frozen=True)
class StepContext:
    operation: Operation
    event: Event
    # destination_ref of the event's earlier, succeeded steps, by step name.
    refs: dict[str, str]
    adapter: Adapter
    # A confirmation's decision, made by the statement that claimed it (a chain's).
    allowance: Allowance | None = None

    @property
    def crm(self) -> CrmAdapter:
        return cast(CrmAdapter, self._adapter_as(CrmAdapter, "a CRM"))

    @property
    def mail(self) -> EmailAdapter:
        return cast(EmailAdapter, self._adapter_as(EmailAdapter, "a mail service"))

    def _adapter_as(self, protocol: type, what: str) -> Adapter:
        """The destination's adapter, refused (PERMANENT) unless it is `what` the step
        needs (`protocol`)."""
        if not _conforms(self.adapter, protocol):
            raise DestinationError(
                f"{self.operation.step} needs {what}, and its destination is not one",
                classification=Classification.PERMANENT,
            )
        return self.adapter

    @property
    def payload(self) -> dict[str, Any]:
        if self.event.payload is None:
            raise DestinationError(
                "the event's payload was purged after its retention period",
                classification=Classification.PERMANENT,
            )
        payload: dict[str, Any] = self.event.payload
        return payload

    @property
    def content(self) -> dict[str, Any]:
        """What this operation sends, rendered and stored before its first call
        (execution/content.py `content_ensure`, which the engine runs first)."""
        content = self.operation.content
        if content is None:
            raise DestinationError(
                f"{self.operation.step} has no stored content: it is rendered before the call",
                classification=Classification.PERMANENT,
            )
        return dict(content)

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
    perform: Callable[[StepContext], Effect]
    # Finds the effect by its external reference; None where the step has no lookup.
    find: Callable[[StepContext], str | None] | None = None
    # No idempotency at the destination: an unclear send goes to review, never resent.
    at_most_once: bool = False
    # Doing it twice is the same as once at the destination (a merge): an unclear
    # attempt is simply repeated.
    idempotent_action: bool = False
    # Runs in the transaction that records the success (e.g. resolve a case).
    on_success: Callable[[Operation, str], None] | None = None
    # Steps that must come earlier in the same pipeline (their references are used).
    requires: tuple[str, ...] = ()
    # It creates a task: recovery follows what the CRM recognises of tasks
    # (`Capabilities.for_tasks`), which may differ from records (HubSpot).
    creates_task: bool = False
    # Renders what the effect sends from the business configuration (rendering.py):
    # stored on the operation before its first call and sent as stored ever after
    # (content.py). None: the step sends what its arguments say (a merge).
    render: Callable[[RenderInput, ConfigVersion, Turn], dict[str, Any]] | None = None


def _record_content(content: dict[str, Any]) -> RecordContent:
    return RecordContent(
        properties=dict(content.get("properties") or {}),
        contact_properties=dict(content.get("contact") or {}),
        pipeline=str(content.get("pipeline") or ""),
        stage=str(content.get("stage") or ""),
    )


def _create_enquiry(ctx: StepContext) -> Effect:
    content = ctx.content
    return ctx.crm.create_record(
        external_ref=ctx.operation.key,
        fields=dict(content["fields"]),
        allow_duplicate=ctx.operation.allow_duplicate,
        content=_record_content(content),
    )


def _update_enquiry(ctx: StepContext) -> Effect:
    """An edit: the revised event's enquiry takes this event's content."""
    original = (
        Operation.objects.filter(event_id=ctx.event.revises_id, step="create_enquiry")
        if ctx.event.revises_id is not None
        else Operation.objects.none()
    ).first()
    if original is None or original.status != Operation.Status.SUCCEEDED:
        # Not an error of the edit: the enquiry it revises is not there yet.
        raise DestinationError(
            "the revised submission's enquiry is not created yet",
            classification=Classification.RETRYABLE,
        )
    content = ctx.content
    return ctx.crm.update_record(
        record_id=original.destination_ref,
        fields=dict(content["fields"]),
        content=_record_content(content),
    )


def _remap_enquiry(ctx: StepContext) -> Effect:
    """A corrected field map (`remap`): this event's own enquiry takes its new content."""
    content = ctx.content
    return ctx.crm.update_record(
        record_id=ctx.ref_of("create_enquiry"),
        fields=dict(content["fields"]),
        content=_record_content(content),
    )


def _find_enquiry(ctx: StepContext) -> str | None:
    return ctx.crm.find_record(external_ref=ctx.operation.key)


def _assign_task(ctx: StepContext) -> Effect:
    content = ctx.content
    due_at = content.get("due_at")
    return ctx.crm.create_task(
        record_id=ctx.ref_of("create_enquiry"),
        external_ref=ctx.operation.key,
        title=str(content["title"]),
        assignee=str(content["assignee"]),
        due_at=datetime.fromisoformat(due_at) if due_at else None,
        # A configured assignee names a CRM owner; the source's own is a label.
        assignee_is_owner=content.get("assignee_rule", "source") != "source",
    )


def _find_task(ctx: StepContext) -> str | None:
    return ctx.crm.find_task(record_id=ctx.ref_of("create_enquiry"), external_ref=ctx.operation.key)


def confirmation_skipped(content: dict[str, Any]) -> str | None:
    """Why a confirmation with this stored content is not sent (`NO_ADDRESS`,
    `TURNED_OFF`), or None: it goes to the mail service. The one rule, for the step and
    for what the console shows a form's customers get."""
    if not str(content.get("to") or ""):
        # A contact without an address (a form with no email field) is processed, and
        # this step skipped, before the allowance counts anything.
        return NO_ADDRESS
    if not content.get("send", True):
        return TURNED_OFF
    return None


def confirmation_recipient(step: str, content: dict[str, Any]) -> str | None:
    """The address a step with this content asks the sending limits' decision for:
    a confirmation's that is not skipped; None for any other."""
    if STEPS[step.partition(":")[0]].perform is not _send_confirmation:
        return None
    return None if confirmation_skipped(content) is not None else str(content["to"])


def _send_confirmation(ctx: StepContext) -> Effect:
    content = ctx.content
    skipped = confirmation_skipped(content)
    if skipped is not None:
        raise ConfirmationSkippedError(skipped)
    to = str(content["to"])
    # Counted, or held for a person, before anything reaches the mail service (decided
    # already when the statement that claimed it did: a worker's chain).
    confirmation_allow(operation=ctx.operation, recipient=to, decided=ctx.allowance)
    return ctx.mail.send(
        operation_key=ctx.operation.key,
        to=to,
        subject=str(content["subject"]),
        body=str(content["text"]),
        html=content.get("html") or None,
        reply_to=content.get("reply_to") or None,
    )


def _merge_duplicate(ctx: StepContext) -> Effect:
    arguments = ctx.operation.arguments or {}
    return ctx.crm.merge_records(
        survivor_id=arguments["survivor_ref"],
        duplicate_id=arguments["duplicate_ref"],
        key=ctx.operation.key,
    )


def _merge_done(operation: Operation, survivor_ref: str) -> None:
    """Resolves the suspected-duplicate case the merge was decided on."""
    arguments = operation.arguments or {}
    case_id = arguments.get("case_id")
    case = ReviewCase.objects.filter(pk=case_id).first() if case_id is not None else None
    if case is None:
        return
    review_case_settle(
        case,
        status=ReviewCase.Status.RESOLVED,
        code="merged",
        note=(
            f"{arguments['duplicate_ref']} merged into {arguments['survivor_ref']} "
            f"by operation {operation.pk}"
        ),
        action="merged",
        system="worker",
        operation=operation,
        details={**arguments, "survivor": survivor_ref, "operation_key": operation.key},
    )


def _erase_person(ctx: StepContext) -> Effect:
    """A person's erasure at the CRM (privacy/crm.py): the ids it names, never an address."""
    arguments = ctx.operation.arguments or {}
    return ctx.crm.erase_person(
        record_id=str(arguments["record_id"]),
        task_ids=tuple(str(t) for t in arguments.get("task_ids") or ()),
    )


# A person's erasure at the CRM: one operation per erased event whose enquiry exists,
# with its own key; deleting twice is as once (a 404 is "already deleted").
ERASE_STEP = "erase_person"

# A merge is an operation of its own, on the event whose record survives or is
# merged away; its step name carries the duplicate's reference so that
# (event, step) stays unique per merge decision.
MERGE_STEP = "merge_duplicate"

STEPS: dict[str, Step] = {
    step.name: step
    for step in (
        Step("create_enquiry", "crm", _create_enquiry, _find_enquiry, render=enquiry_render),
        Step(
            "assign_task",
            "crm",
            _assign_task,
            _find_task,
            requires=("create_enquiry",),
            creates_task=True,
            render=task_render,
        ),
        Step(
            "send_confirmation",
            "email",
            _send_confirmation,
            at_most_once=True,
            requires=("create_enquiry",),
            render=confirmation_render,
        ),
        Step(
            "update_enquiry", "crm", _update_enquiry, idempotent_action=True, render=enquiry_render
        ),
        # "remap_enquiry:<n>": one per re-mapping of the event (intake/remap.py).
        Step(
            "remap_enquiry",
            "crm",
            _remap_enquiry,
            idempotent_action=True,
            requires=("create_enquiry",),
            render=enquiry_render,
        ),
        Step(MERGE_STEP, "crm", _merge_duplicate, idempotent_action=True, on_success=_merge_done),
        Step(ERASE_STEP, "crm", _erase_person, idempotent_action=True),
    )
}


# Steps a source may put in a pipeline (the others are created by Onefold itself).
PIPELINE_STEPS = ("create_enquiry", "assign_task", "send_confirmation")


class InvalidPipelineError(ValueError):
    """A pipeline names an unknown step, repeats one, or breaks a prerequisite."""


def pipeline_validate(steps: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    steps = tuple(steps)
    if not steps:
        raise InvalidPipelineError("A pipeline needs at least one step.")
    for position, name in enumerate(steps):
        if name not in PIPELINE_STEPS:
            raise InvalidPipelineError(
                f"Unknown step {name!r}; choose from {', '.join(PIPELINE_STEPS)}."
            )
        if name in steps[:position]:
            raise InvalidPipelineError(f"Step {name!r} appears twice.")
        missing = [r for r in STEPS[name].requires if r not in steps[:position]]
        if missing:
            raise InvalidPipelineError(f"Step {name!r} needs {', '.join(missing)} before it.")
    return steps


def pipeline_for(source: Source, form: str) -> tuple[str, ...]:
    """The steps for a submission of `form` at `source` (its own, else the default)."""
    configured = source.pipelines or {}
    steps = configured.get(form) or configured.get("*")
    return tuple(steps) if steps else DEFAULT_PIPELINE


def step_context(
    operation: Operation,
    *,
    refs: dict[str, str] | None = None,
    adapter: Adapter | None = None,
    allowance: Allowance | None = None,
) -> StepContext:
    """What a step sees: its operation, its event, and the references its event's
    earlier steps left: `refs` as its claim read them (statements.py, in the claim's
    statement: an earlier step succeeds before a later one can be claimed), else read."""
    if refs is None:
        refs = dict(
            Operation.objects.filter(
                event_id=operation.event_id,
                position__lt=operation.position,
                status=Operation.Status.SUCCEEDED,
            ).values_list("step", "destination_ref")
        )
    return StepContext(
        operation=operation,
        event=operation.event,
        refs=refs,
        adapter=adapter if adapter is not None else adapter_for(operation.destination),
        allowance=allowance,
    )


def capabilities_for(operation: Operation) -> Capabilities:
    """What the operation's destination recognises of a repeat of this step's effect."""
    capabilities = capabilities_of(operation.destination)
    return capabilities.for_tasks() if step_of(operation).creates_task else capabilities


def step_of(operation: Operation) -> Step:
    """The step definition of an operation ("merge_duplicate:rec_7" -> merge_duplicate)."""
    return STEPS[operation.step.partition(":")[0]]


DEFAULT_PIPELINE: tuple[str, ...] = ("create_enquiry", "assign_task", "send_confirmation")
# An edit (a submission that `revises` an earlier one) updates that enquiry and
# creates nothing: no second record, task or confirmation.
EDIT_PIPELINE: tuple[str, ...] = ("update_enquiry",)
