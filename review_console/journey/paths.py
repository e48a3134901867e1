"""A form's customer journey: what the customer and the CRM get on each path.

The console's page /console/journey/<source>/<form>/ (views_journey.py) takes one kept
submission of the form (or, when none is kept, a synthetic example labelled as such)
and shows, rendered from the current configuration version, what each path sends and
which record and task it touches: a first delivery, a retry after a lost answer, a
replay, "send again", an edit (`revises`), a held duplicate settled as "same enquiry",
and a submission without an email address. Nothing is stored, no round robin's turn
is taken and no destination is written; the only read beyond the database is the
destinations' capabilities (the sandbox's, bounded, as a replay preview reads them).

Each path is derived from the engine's own rules, not described by hand:

- the steps a path plans: `steps.pipeline_for` (a first delivery, a submission without
  email, a retry, a replay), `steps.EDIT_PIPELINE` (an edit; `_update_enquiry` updates
  the record of the submission it revises), the email step alone
  (`review.email_cases.email_send_again`: a new `send_confirmation:<n>` operation with
  its own key), none (`review.held_duplicates.held_duplicate_link` cancels every step
  of the held submission, none of them tried);
- which party a step touches: `Step.destination` and `Step.creates_task` of `STEPS`;
- what a step sends: `content.content_preview` under `versions.config_current()`; a
  replay sends the operation's stored `content` when it has one (what
  `content.content_ensure` returns ever after its first attempt);
- whether a confirmation goes out: `steps.confirmation_skipped` (no address, turned off);
- what a retry after a lost answer does: `policy.recovery_for` with the step's flags
  (`Step.at_most_once`, `Step.idempotent_action`) and the destination's capabilities
  (`destinations.destination_for`, `capabilities_of`, `Capabilities.for_tasks`), the
  retry at `RetryPolicy.ceiling(1)`; a replay follows the same rule
  (`review.replay.replay_refusal` asks a person to check first where it is "review").

For a viewer who may not see contact details (VIEW_CONTACT, or a reveal in force),
everything shown is rendered from masked values (config_edit.shown_payload: the
contact by masking.py, every other value the visitor typed as the field map masks
it), never the real values' text with them scrubbed out (a template may transform a
value, `|urlencode`, `|upper`, past recognition). A step's stored content is then
rendered again from the masked submission under the version it was stored with;
only its choices that hold nothing of the customer (assignee, due date, language)
are shown as stored.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from idempotency_core.configuration.document import ANY_FORM, form_block
from idempotency_core.configuration.versions import ConfigVersion, config_current
from idempotency_core.execution.content import content_preview
from idempotency_core.execution.destinations import capabilities_of, destination_for
from idempotency_core.execution.policy import OperationState, RetryPolicy, recovery_for
from idempotency_core.execution.steps import (
    EDIT_PIPELINE,
    STEPS,
    confirmation_skipped,
    pipeline_for,
)
from idempotency_core.models import BusinessConfigVersion, Event, Operation, Source
from integrations.base import Capabilities, DestinationError
from review_console.glossary import step_label
from review_console.journey.selectors import configured_forms
from review_console.settings.config_edit import shown_payload

Recovery = Operation.Recovery

# What a template's `reference` shows before the CRM has given the enquiry one.
REFERENCE_PLACEHOLDER = "(the CRM's reference)"
CONFIRMATION, ENQUIRY, TASK = "send_confirmation", "create_enquiry", "assign_task"
# The second send of a confirmation, as `email_send_again` names it.
SEND_AGAIN_STEP = f"{CONFIRMATION}:2"
# The synthetic example's contact: example.com is reserved (RFC 2606), nobody's address.
EXAMPLE_CONTACT = {"name": "Alex Example", "email": "alex@example.com", "phone": "+44 20 7946 0000"}
_FIELD_REFERENCE = re.compile(r"\bfields\.([A-Za-z0-9_\-]+)")

RETRY_RECORD: dict[str, str] = {
    Recovery.REPEAT_WITH_KEY: "No second {what}: the retry carries the same mark as the first try, "
    "and the CRM answers with the {what} it made.",
    Recovery.REPEAT_UNIQUE_REF: "No second {what}: the CRM refuses another {what} with the same "
    "mark of this submission and names the first, which Onefold adopts.",
    Recovery.LOOKUP_FIRST: "No second {what}: Onefold looks the {what} up by this submission's "
    "mark first and adopts it; it is created only if it is absent.",
    Recovery.REPEAT: "The same change again: doing it twice is the same as once.",
    Recovery.REVIEW: "Not repeated: this CRM offers nothing that recognises a repeat (it "
    "remembers no mark, refuses no copy and cannot be searched), so a case asks a "
    "person to look for the {what}.",
}
RETRY_MESSAGE: dict[str, str] = {
    Recovery.REPEAT_WITH_KEY: "No second email: the stored email is presented again under the "
    "same mark, which the mail service recognises for a while.",
    Recovery.REVIEW: "No second email: the mail service cannot recognise a resend (plain email "
    "carries no mark it remembers), so Onefold does not resend; a case asks a person to check with "
    "the customer, who may then have it sent again.",
}


@dataclass(frozen=True)
class Side:
    """What one party gets on one path: the customer, the CRM's record, or its task."""

    # "sent", "created", "updated", "linked", "none"
    verb: str
    summary: str
    # What is shown of the content: (label, value) lines, a message's text and HTML.
    lines: tuple[tuple[str, str], ...] = ()
    text: str = ""
    html: str = ""
    # The code that decides it, for the page's technical details.
    rule: str = ""

    @property
    def touched(self) -> bool:
        return self.verb != "none"

    @property
    def badge(self) -> str:
        """The console's badge colour (base.html's b-* classes)."""
        return VERB_BADGES[self.verb]

    @property
    def label(self) -> str:
        return "nothing" if self.verb == "none" else self.verb


VERB_BADGES = {
    "sent": "succeeded",
    "created": "succeeded",
    "updated": "pending",
    "linked": "open",
    "none": "cancelled",
}


@dataclass(frozen=True)
class JourneyPath:
    slug: str
    title: str
    what: str
    customer: Side
    record: Side
    task: Side


@dataclass(frozen=True)
class Journey:
    source: Source
    form: str
    version: ConfigVersion
    # The block of the configuration that applies ("*" or the form's own; "" for none).
    block_key: str
    # The kept submission shown; None with `synthetic`.
    event: Event | None
    steps: tuple[str, ...]
    paths: list[JourneyPath]
    notes: list[str] = field(default_factory=list)

    @property
    def synthetic(self) -> bool:
        return self.event is None


# -- which submissions and forms ------------------------------------------------------


# -- the journey ----------------------------------------------------------------------


def journey_build(*, source: Source, form: str, event: Event | None, unmasked: bool) -> Journey:
    """Every path of `event` (None: a synthetic example built from the form's block)
    under the current configuration version."""
    version = config_current()
    block_key, block = form_block(version.document, source.name, form)
    block = block or {}
    payload = dict(event.payload or {}) if event is not None else _example(block, form, source)
    shown_form = str(payload.get("form") or form)
    refs = _refs(event)
    renderer = _Renderer(
        source=source,
        version=version,
        refs=refs,
        unmasked=unmasked or event is None,
        real=payload,
    )
    steps = pipeline_for(source, shown_form)
    facts = _Facts(
        renderer=renderer,
        payload=payload,
        steps=steps,
        stored=_stored_contents(event),
        retry=_retry_rules(source, steps),
        duplicates=source.duplicates,
    )
    return Journey(
        source=source,
        form=form,
        version=version,
        block_key=block_key if block_key in configured_forms(source) else "",
        event=event,
        steps=steps,
        paths=[facts.first, *(path(facts) for path in PATHS)],
        notes=_notes(facts, refs),
    )


def _notes(facts: _Facts, refs: Mapping[str, str]) -> list[str]:
    notes = []
    if ENQUIRY not in refs:
        notes.append(
            f"The CRM's reference of this enquiry is not known yet: templates show "
            f"“{REFERENCE_PLACEHOLDER}” for it."
        )
    if not facts.renderer.unmasked:
        notes.append(
            "Contact details are masked: the messages are rendered from the masked name, "
            "address and phone number (seeing them needs the “see unmasked contact details” "
            "permission)."
        )
    return notes


def _refs(event: Event | None) -> dict[str, str]:
    refs: dict[str, str] = {}
    if event is not None:
        refs = dict(
            event.operations.filter(status=Operation.Status.SUCCEEDED).values_list(
                "step", "destination_ref"
            )
        )
    return refs


def _stored_contents(event: Event | None) -> dict[str, dict[str, Any]]:
    """The content each step of `event` stored at its first attempt (what a replay sends)."""
    if event is None:
        return {}
    rows = event.operations.filter(content__isnull=False).values_list("step", "content")
    return {step: dict(content or {}) for step, content in rows}


def _retry_rules(source: Source, steps: tuple[str, ...]) -> dict[str, str]:
    """The recovery rule (policy.recovery_for) a retry of each step follows after an
    answer lost at its first attempt, with its destination's capabilities as they are now."""
    now = timezone.now()
    retry_at = now + timedelta(seconds=RetryPolicy.from_settings().ceiling(1))
    offered: dict[str, Capabilities] = {}
    rules = {}
    for name in steps:
        step = STEPS[name]
        if step.destination not in offered:
            offered[step.destination] = capabilities_of(destination_for(source, step.destination))
        capabilities = offered[step.destination]
        state = OperationState(
            step=name,
            attempt_number=1,
            first_presented_at=now,
            at_most_once=step.at_most_once,
            idempotent_action=step.idempotent_action,
        )
        rules[name] = recovery_for(
            state=state,
            capabilities=capabilities.for_tasks() if step.creates_task else capabilities,
            retry_at=retry_at,
        )
    return rules


def _example(block: Mapping[str, Any], form: str, source: Source) -> dict[str, Any]:
    """A synthetic submission of `form`: the example contact, and each extra field the
    form's block reads (`fields.<name>` in a template, a from_field rule, a language
    field), a from_field rule's first choice where it has a map."""
    names = sorted(set(_FIELD_REFERENCE.findall(repr(block))))
    fields = {name: f"example {name}" for name in names}
    assignee = (block.get("task") or {}).get("assignee")
    if isinstance(assignee, Mapping) and assignee.get("map"):
        chosen = str(assignee.get("from_field") or "").partition(".")[2]
        if chosen:
            fields[chosen] = str(next(iter(assignee["map"])))
    if form == ANY_FORM:  # "*" is no form's name: any other form is what it covers
        form = _unconfigured_name(configured_forms(source))
    return {
        "form": form,
        "submitted_at": timezone.now().isoformat(),
        "contact": dict(EXAMPLE_CONTACT),
        "message": "An example message: what a customer might write in this form.",
        "fields": fields,
    }


def _unconfigured_name(taken: set[str]) -> str:
    candidates = ("other", *(f"other-{n}" for n in range(2, 100)))
    return next(name for name in candidates if name not in taken)


# -- rendering, masked for the viewer ---------------------------------------------------


# What a stored content says that holds nothing of the customer: shown as stored to a
# viewer who may not see contact details (the rest is rendered from masked values).
STORED_CHOICES = ("kind", "version", "send", "assignee", "assignee_rule", "due_at", "language")


class _Renderer:
    """Renders a step's content from a payload (content_preview), as the viewer may see it."""

    def __init__(
        self,
        *,
        source: Source,
        version: ConfigVersion,
        refs: Mapping[str, str],
        unmasked: bool,
        real: Mapping[str, Any],
    ) -> None:
        self.source = source
        self.version = version
        self.refs = {ENQUIRY: REFERENCE_PLACEHOLDER, **refs}
        self.unmasked = unmasked
        self.real = real

    def preview(
        self, payload: Mapping[str, Any], step: str, version: ConfigVersion | None = None
    ) -> dict[str, Any]:
        """Raises DestinationError when a template cannot be rendered."""
        version = version or self.version
        shown = shown_payload(payload, unmasked=self.unmasked)
        if not self.unmasked:
            _choices_kept(shown, payload, version, self.source.name)
        event = Event(source=self.source, payload=shown, form=str(shown.get("form") or ""))
        content = content_preview(event=event, step=step, version=version, refs=self.refs)
        return content or {}

    def stored(self, step: str, content: Mapping[str, Any]) -> dict[str, Any]:
        """What `step` stored, as the viewer may see it: as stored, or rendered again
        from the masked submission under the version it was stored with, with the
        choices that hold nothing of the customer as stored."""
        if self.unmasked:
            return dict(content)
        try:
            rendered = self.preview(self.real, step, _version(content.get("version")))
        except DestinationError:
            rendered = {}
        return {**rendered, **{key: content[key] for key in STORED_CHOICES if key in content}}


def _choices_kept(
    shown: dict[str, Any], real: Mapping[str, Any], version: ConfigVersion, source: str
) -> None:
    """Puts back into the masked `shown` each field that only chooses among configured
    options (a `language_field`, an assignee's `from_field`) when its real value is one
    of them: it says nothing the configuration does not, and the masked page then shows
    the language and the assignee the real submission gets."""
    block = form_block(version.document, source, str(real.get("form") or ""))[1] or {}
    confirmation = block.get("confirmation") or {}
    assignee = (block.get("task") or {}).get("assignee")
    # Each field, its options, and whether its first part chooses too ("fr-CA": "fr").
    options: dict[str, tuple[set[str], bool]] = {}
    if confirmation.get("language_field"):
        codes = {str(code).casefold() for code in confirmation.get("languages") or {}}
        options[str(confirmation["language_field"])] = (codes, True)
    if isinstance(assignee, Mapping) and assignee.get("from_field"):
        keys = {str(key).casefold() for key in assignee.get("map") or {}}
        options[str(assignee["from_field"])] = (keys, False)
    real_fields = real.get("fields") or {}
    for path, (allowed, by_prefix) in options.items():
        head, _, name = path.partition(".")
        value = real_fields.get(name) if head == "fields" else None
        if not isinstance(value, str):
            continue
        folded = value.strip().casefold()
        prefix = folded.replace("_", "-").partition("-")[0]
        if folded in allowed or (by_prefix and prefix in allowed):
            shown.setdefault("fields", {})[name] = value


def _version(number: Any) -> ConfigVersion:
    """Version `number` as rendering reads it (0, or one since lost: nothing configured)."""
    document = (
        BusinessConfigVersion.objects.filter(number=number)
        .values_list("document", flat=True)
        .first()
        if isinstance(number, int) and number > 0
        else None
    )
    return ConfigVersion(number if isinstance(number, int) else 0, document or {})


# -- the paths --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Facts:
    renderer: _Renderer
    payload: Mapping[str, Any]
    steps: tuple[str, ...]
    stored: Mapping[str, Mapping[str, Any]]
    retry: Mapping[str, str]
    duplicates: str

    @cached_property
    def first(self) -> JourneyPath:
        """The first delivery, which the retry and the replay start from (rendered once)."""
        return _first_delivery(self)


def _first_delivery(facts: _Facts) -> JourneyPath:
    return _planned(
        facts,
        slug="first",
        title="The first time",
        what="The submission arrives for the first time and each step of the form's "
        "pipeline runs once.",
        steps=facts.steps,
        payload=facts.payload,
    )


def _without_email(facts: _Facts) -> JourneyPath:
    payload = copy.deepcopy(dict(facts.payload))
    payload["contact"] = {**(payload.get("contact") or {}), "email": ""}
    return _planned(
        facts,
        slug="no-email",
        title="A submission without an email address",
        what="The same submission with no email address (a form without an email field). "
        "It is processed like any other; only the confirmation has nobody to go to.",
        steps=facts.steps,
        payload=payload,
    )


def _edit(facts: _Facts) -> JourneyPath:
    return _planned(
        facts,
        slug="edit",
        title="An edit (revises)",
        what="The customer corrects this submission: the same contact sends it again under "
        "a new key with its “revises” field naming this one. It is a new submission whose "
        "effect is an update, planned by the edit pipeline, not a retry.",
        steps=EDIT_PIPELINE,
        payload=facts.payload,
    )


def _planned(
    facts: _Facts,
    *,
    slug: str,
    title: str,
    what: str,
    steps: tuple[str, ...],
    payload: Mapping[str, Any],
) -> JourneyPath:
    """A path whose effects are the steps it plans, each rendered from `payload`."""
    planned = ", ".join(step_label(s).lower() for s in steps)
    record_steps = [s for s in steps if STEPS[s].destination == "crm" and not STEPS[s].creates_task]
    task_steps = [s for s in steps if STEPS[s].creates_task]
    if record_steps:
        record = _record_side(facts, payload, record_steps[0])
    else:
        record = Side("none", f"No record: the steps planned ({planned}) write none.")
    task = (
        _task_side(facts, payload, task_steps[0])
        if task_steps
        else Side("none", f"No task: the steps planned ({planned}) create none.")
    )
    if CONFIRMATION in steps:
        customer = _message_side(facts, payload, CONFIRMATION)
    else:
        customer = Side("none", f"No message: the steps planned ({planned}) send none.")
    return JourneyPath(slug, title, what, customer, record, task)


def _record_side(facts: _Facts, payload: Mapping[str, Any], step: str) -> Side:
    try:
        content = facts.renderer.preview(payload, step)
    except DestinationError as exc:
        return _unrenderable(step, exc)
    if step == ENQUIRY:
        summary = "A new record, marked as this submission's so that a repeat is recognised."
        verb = "created"
    else:  # an edit's update_enquiry
        summary = (
            "The CRM's record of the submission it revises takes the edit's content; no new record."
        )
        verb = "updated"
    return Side(verb, summary, lines=tuple(_record_lines(content)), rule=f"step {step}")


def _record_lines(content: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    core = content.get("fields") or {}
    for key in ("name", "email", "phone", "message"):
        yield key.capitalize(), str(core.get(key) or "")
    for name, value in (content.get("properties") or {}).items():
        yield f"Property {name}", str(value)
    for name, value in (content.get("contact") or {}).items():
        yield f"Contact property {name}", str(value)
    for key in ("pipeline", "stage"):
        if content.get(key):
            yield key.capitalize(), str(content[key])


def _task_side(facts: _Facts, payload: Mapping[str, Any], step: str) -> Side:
    try:
        content = facts.renderer.preview(payload, step)
    except DestinationError as exc:
        return _unrenderable(step, exc)
    return Side(
        "created",
        "A task on the enquiry's record.",
        lines=tuple(_task_lines(content)),
        rule=f"step {step}",
    )


RULES = {
    "fixed": "a fixed name",
    "round_robin": "round robin: the name its next turn would give",
    "from_field": "chosen by a field's value",
    "source": "the source's default assignee",
}


def _task_lines(content: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    yield "Title", str(content.get("title") or "")
    rule = RULES.get(str(content.get("assignee_rule")), str(content.get("assignee_rule")))
    yield "Assignee", f"{content.get('assignee')} ({rule})"
    due = parse_datetime(str(content.get("due_at") or ""))
    yield "Due", _due_words(due) if due is not None else "no due date"


def _due_words(due: datetime) -> str:
    hours = round((due - timezone.now()).total_seconds() / 3600)
    return f"{hours} hours after the first attempt (if that were now: {due:%Y-%m-%d %H:%M} UTC)"


def _message_side(facts: _Facts, payload: Mapping[str, Any], step: str) -> Side:
    try:
        content = facts.renderer.preview(payload, step)
    except DestinationError as exc:
        return _unrenderable(step, exc)
    return _message_of(content, summary="The confirmation, rendered now.", rule=f"step {step}")


def _message_of(content: Mapping[str, Any], *, summary: str, rule: str) -> Side:
    """A confirmation's content as sent, or why it is not (confirmation_skipped)."""
    skipped = confirmation_skipped(dict(content))
    if skipped is not None:
        return Side("none", f"No message ({skipped}).", rule=f"{rule}; confirmation_skipped")
    lines = [("To", str(content.get("to")))]
    if content.get("reply_to"):
        lines.append(("Reply-To", str(content["reply_to"])))
    lines.append(("Subject", str(content.get("subject") or "")))
    if content.get("language"):
        lines.append(("Language", str(content["language"])))
    return Side(
        "sent",
        summary,
        lines=tuple(lines),
        text=str(content.get("text") or ""),
        html=str(content.get("html") or ""),
        rule=rule,
    )


def _unrenderable(step: str, exc: DestinationError) -> Side:
    return Side(
        "none",
        f"Not sent: the configuration cannot be rendered for this submission ({exc.message}). "
        "The step would be refused and open a case.",
        rule=f"step {step}",
    )


def _retry(facts: _Facts) -> JourneyPath:
    """Each step's first attempt reached the destination, its answer was lost."""
    first = facts.first

    def side(step: str, what: str, was: Side) -> Side:
        if step not in facts.steps or not was.touched:
            return Side("none", f"Nothing new: no {what} the first time either.")
        rule = facts.retry[step]
        table = RETRY_MESSAGE if step == CONFIRMATION else RETRY_RECORD
        summary = table.get(rule, RETRY_RECORD[Recovery.REVIEW]).format(what=what)
        return Side("none", summary, rule=f"recovery_for: {rule or 'normal call'}")

    return JourneyPath(
        "retry",
        "A retry after a lost answer",
        "A step's first try reached the CRM or the mail service but its answer was lost (a timeout "
        "after sending, a reset connection). The retry sends the content stored at that "
        "first attempt, never a new rendering, under the same mark.",
        customer=side(CONFIRMATION, "message", first.customer),
        record=side(ENQUIRY, "record", first.record),
        task=side(TASK, "task", first.task),
    )


def _replay(facts: _Facts) -> JourneyPath:
    """A person replays a step in review: the original key and the stored content."""
    first = facts.first
    customer = Side("none", "No message: this form's pipeline has no confirmation.")
    if CONFIRMATION in facts.steps:
        customer, label = _stored_or(facts, CONFIRMATION, first.customer)
        check = facts.retry[CONFIRMATION] == Recovery.REVIEW
        customer = _with_summary(
            customer,
            (
                "Only after a person has checked that the first email did not arrive (the "
                "mail service cannot recognise a resend). "
                if check and customer.touched
                else ""
            )
            + "The email under its original mark (the same email, as the mailbox sees it), "
            + f"as {label}.",
        )
    record = _replayed(facts, ENQUIRY, "record", first.record)
    task = _replayed(facts, TASK, "task", first.task)
    return JourneyPath(
        "replay",
        "A replay",
        "A person replays a step that needs review. It goes through the same claim and "
        "recovery rules as a retry, with the original mark and the stored content.",
        customer,
        record,
        task,
    )


def _stored_or(facts: _Facts, step: str, was: Side) -> tuple[Side, str]:
    """What a replay of `step` sends: the content its first attempt stored, else (never
    attempted) what that first attempt will render and store, `was`; and which it is."""
    content = facts.stored.get(step)
    if content is None:
        return was, "not attempted yet: it stores what its first attempt renders, as above"
    version = content.get("version")
    label = f"stored at the first attempt (configuration version {version})"
    if version != facts.renderer.version.number:
        label += f"; the current version, {facts.renderer.version.number}, is not used"
    return _stored_side(facts, step, content), label


def _replayed(facts: _Facts, step: str, what: str, was: Side) -> Side:
    if step not in facts.steps:
        return was
    side, label = _stored_or(facts, step, was)
    if not side.touched:
        return side
    rule = facts.retry[step]
    how = (
        "A person checks the CRM first: nothing there recognises a repeat."
        if rule == Recovery.REVIEW
        else RETRY_RECORD.get(rule, "").format(what=what)
    )
    return _with_summary(
        side,
        f"At most one {what}, under its original mark. {how} Content {label}.",
        rule=f"recovery_for: {rule or 'normal call'}",
    )


def _stored_side(facts: _Facts, step: str, content: Mapping[str, Any]) -> Side:
    shown = facts.renderer.stored(step, content)
    if step == CONFIRMATION:
        return _message_of(shown, summary="", rule="stored content")
    if STEPS[step].creates_task:
        return Side("created", "", lines=tuple(_task_lines(shown)), rule="stored content")
    return Side("created", "", lines=tuple(_record_lines(shown)), rule="stored content")


def _with_summary(side: Side, summary: str, *, rule: str = "") -> Side:
    if not side.touched:
        return side
    return Side(side.verb, summary, side.lines, side.text, side.html, rule or side.rule)


def _send_again(facts: _Facts) -> JourneyPath:
    """email_send_again: a new operation of the email step, rendered afresh."""
    untouched = Side(
        "none",
        "Not touched: sending the email again is a step of its own.",
        rule="email_send_again",
    )
    if CONFIRMATION in facts.steps:
        customer = _message_side(facts, facts.payload, SEND_AGAIN_STEP)
        customer = _with_summary(
            customer,
            "A new email, rendered now from the current version, under a new key of its own "
            "(a new email, as the mailbox sees it), linked to the first.",
            rule="email_send_again",
        )
    else:
        customer = Side("none", "No message: this form sends no confirmation to send again.")
    return JourneyPath(
        "send-again",
        "“Send again”",
        "The customer says the confirmation never arrived and a reviewer chooses “Not "
        "received: send again”.",
        customer,
        untouched,
        untouched,
    )


def _same_enquiry(facts: _Facts) -> JourneyPath:
    """held_duplicate_link: every step of the held submission cancelled, never tried."""
    rule = "held_duplicate_link"
    what = (
        "The same customer sends the same message again under a new key, the source holds "
        "it as a suspected duplicate before its CRM write, and a reviewer settles it as "
        "“Same enquiry”."
    )
    if facts.duplicates != "hold":
        what += (
            " This source flags duplicates instead (policy “flag”): both are written and a "
            "case offers a merge. Switch the source's duplicates setting to “hold” for this path."
        )
    return JourneyPath(
        "same-enquiry",
        "A held duplicate settled as “same enquiry”",
        what,
        customer=Side(
            "none", "No message: the held submission's steps end cancelled, never tried.", rule=rule
        ),
        record=Side(
            "linked",
            "Nothing written: the held submission is linked to the CRM's record of the first "
            "one, which the case names; there is nothing to merge later.",
            rule=rule,
        ),
        task=Side("none", "No task: this submission's task stays the only one.", rule=rule),
    )


# After the first delivery (`_Facts.first`), in the order the page shows them.
PATHS = (_retry, _replay, _send_again, _edit, _same_enquiry, _without_email)
