"""A case in two sentences: what happened, and what to do.

The case page opens with these, in the glossary's plain words, before any
evidence: a reviewer reads one sentence and decides. The engine's own summary
(written for the audit trail, with step codes, exception classes and reply
codes) stays under "Technical details". Nothing here queries the database: the
view passes what it read (the case, the viewer's view of the contact, the
case's audit trail).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from idempotency_core.models import AuditEntry, Destination, Operation, ReviewCase
from review_console.glossary import http_why, resolution_label

# What each step makes, as the object of a sentence ("the CRM refused the enquiry").
STEP_THINGS: dict[str, str] = {
    "create_enquiry": "the enquiry",
    "assign_task": "the follow-up task",
    "send_confirmation": "the confirmation email",
    "update_enquiry": "the update to the enquiry",
    "remap_enquiry": "the corrected enquiry",
    "merge_duplicate": "the merge of the two records",
    "erase_person": "the deletion of the person's data",
}


@dataclass(frozen=True)
class Story:
    """What the case page says first: `happened` and `todo` are whole sentences."""

    happened: str
    todo: str
    tone: str = "bad"  # bad (waits for a person), info (being handled), good (settled)


def step_thing(step: str | None) -> str:
    name = (step or "").partition(":")[0]
    return STEP_THINGS.get(name, "this step")


def destination_words(destination: Destination | None) -> str:
    """'the CRM' or 'the mail service': what a reviewer calls it (its configured name
    is a technical detail)."""
    if destination is None:
        return "the CRM"
    if destination.kind in Destination.EMAIL_KINDS:
        return "the mail service"
    return "the CRM"


def why_words(evidence: dict[str, Any]) -> str:
    """Why an attempt failed, from the case's evidence, in words; "" when unknown."""
    status = _status_of(evidence)
    if status is not None and status[0] == "HTTP":
        code = status[1]
        return http_why(code)
    if status is not None:  # SMTP
        code = status[1]
        if code >= 500:
            return "the mailbox refused it"
        return "the mail server asked to try later"
    error = str(evidence.get("error_class") or "").lower()
    if "timeout" in error:
        return "it did not answer in time"
    outcome = str(evidence.get("outcome") or "")
    if outcome in ("ambiguous", "interrupted") or error:
        return "the connection was cut off before it answered"
    return ""


def _status_of(evidence: dict[str, Any]) -> tuple[str, int] | None:
    reply = str(evidence.get("reply") or "")
    protocol, _, number = reply.partition(" ")
    if protocol in ("HTTP", "SMTP") and number.isdigit():
        return protocol, int(number)
    for key, protocol in (("http_status", "HTTP"), ("smtp_code", "SMTP")):
        value = evidence.get(key)
        if isinstance(value, int):
            return protocol, value
    return None


def case_story(
    case: ReviewCase,
    *,
    customer: str,
    can_replay: bool,
    can_lookup: bool,
    audit: list[AuditEntry],
    can_map: bool = False,
    can_reopen: bool = True,
) -> Story:
    """The two sentences of `case` for this viewer (their role decides what to do;
    `can_map`: they may correct how a form's fields are read; `can_reopen`: the
    settled case may be reopened, by them)."""
    if case.status not in ReviewCase.OPEN_STATUSES:
        return _settled(case, audit, can_reopen=can_reopen)
    happened, todo = _open_story(
        case, customer=customer, can_replay=can_replay, can_lookup=can_lookup, can_map=can_map
    )
    failed = _replay_failed(case, audit)
    if failed:
        happened = f"{failed} {happened}"
    elif case.status == ReviewCase.Status.IN_PROGRESS and _waiting_on_a_try(case, audit):
        asked = _waiting_on_a_try(case, audit)
        return Story(
            happened=happened,
            todo=f"{_UNDER_WAY.get(asked, _UNDER_WAY['replay'])} The case settles by itself "
            "when that works; if it fails, the case comes back to the queue.",
            tone="info",
        )
    return Story(happened=happened, todo=todo)


# What a person asked for that is under way, as the case page says it (nothing else
# is offered meanwhile: the decision is made).
_UNDER_WAY = {
    "replay": "It is being tried again now.",
    "merge_requested": "The two records are being merged into one now.",
    "email_send_again": "The email is being sent again now.",
    "duplicate_rule_create_anyway": "It is being created in the CRM now.",
}


def _settled(case: ReviewCase, audit: list[AuditEntry], *, can_reopen: bool) -> Story:
    how = resolution_label(case.resolution_code) or "settled"
    verb = "Closed" if case.status == ReviewCase.Status.CLOSED else "Resolved"
    return Story(
        happened=f"{verb}: {how[0].lower() + how[1:]}.",
        todo="Nothing left to do."
        + (" If this was decided wrongly, reopen it." if can_reopen else ""),
        tone="good",
    )


def _replay_failed(case: ReviewCase, audit: list[AuditEntry]) -> str:
    """'Tried again, and it failed again.' when the last thing that happened to the case
    was a failed replay (the engine put it back in the queue)."""
    decisions = [e for e in audit if e.case_id == case.pk and e.action != "destination_lookup"]
    if decisions and decisions[-1].action == "replay_failed":
        return "It was tried again, and that failed too, so it is back in the queue."
    return ""


def _waiting_on_a_try(case: ReviewCase, audit: list[AuditEntry]) -> str:
    """What was asked for (a replay, a send again, a merge...) and has not come back
    yet: its audit action, or ""."""
    decisions = [e for e in audit if e.case_id == case.pk or e.operation_id == case.operation_id]
    decisions = [e for e in decisions if e.action not in ("destination_lookup", "case_taken")]
    if decisions and decisions[-1].action in _UNDER_WAY:
        return decisions[-1].action
    return ""


_Kind = ReviewCase.Kind
# (what happened, what to do) by kind, with {where}, {thing}, {customer}, {why} (": it
# did not accept ..." or "."), {retry} ("try it again", or who to ask), {check} (the
# lookup's sentence), and capitalised forms {Where}, {Thing}, {Customer}, {Retry}.
_STORIES: dict[str, tuple[str, str]] = {
    _Kind.AMBIGUOUS: (
        "Onefold does not know whether {where} made {thing} for {customer}{why}",
        "{check}",
    ),
    _Kind.INTERRUPTED_SEND: (
        "The confirmation email to {customer} may or may not have gone out: the mail "
        "service's answer was lost, and an email cannot be looked up.",
        "Ask the customer whether they have it: if they do, say so; if not, send it again.",
    ),
    _Kind.PERMANENT: (
        "{Where} refused {thing} for {customer}{why}",
        "Correct the cause (in {where} or in the form), then {retry}; or close the case if "
        "it should not go through.",
    ),
    _Kind.RETRIES_EXHAUSTED: (
        "Onefold tried several times to send {thing} for {customer} to {where} and gave up{why}",
        "When {where} works again, {retry}; or close the case.",
    ),
    _Kind.SUSPECTED_DUPLICATE: (
        "{Customer} seems to have sent the same enquiry twice, and both are in the CRM.",
        "Compare them: merge them into one if they are the same request, or keep both.",
    ),
    _Kind.RECON_DUPLICATE: (
        "Two CRM records exist for one enquiry.",
        "Compare them: merge them into one, or keep both.",
    ),
    _Kind.DUPLICATE_HELD: (
        "{Customer} sent the same message twice. The second one is held: it is not in the CRM.",
        "Decide: the same enquiry (nothing more is written) or a separate one (it goes ahead "
        "as usual).",
    ),
    _Kind.DUPLICATE_RULE: (
        "The CRM says {customer}'s enquiry matches a record it already has, so it created nothing.",
        "Link the enquiry to that record, or create it anyway.",
    ),
    _Kind.LATE_REPLAY: (
        "The website sent {customer}'s submission again long after the first time; nothing "
        "new was created.",
        "Check that nothing is missing, then close the case.",
    ),
    _Kind.CONFIRMATION_HELD: (
        "The confirmation email to {customer} was held back and not sent: too many emails "
        "went to this address or from this form today.",
        "If it is a real enquiry, {retry} (it is then sent); otherwise close the case.",
    ),
    _Kind.UNREADABLE: (
        "A submission arrived, but Onefold could not read its fields, so nothing was created "
        "yet. It is kept.",
        "{Map}; or close the case if it is spam or a test.",
    ),
    _Kind.RECON_MISSING: (
        "{Thing} for {customer} is missing in the CRM.",
        "Check the CRM: if it really is missing, {retry}; otherwise close the case.",
    ),
    _Kind.RECON_ORPHAN: (
        "The CRM holds a record that no submission in Onefold explains.",
        "Find out in the CRM who made it, then close the case.",
    ),
    _Kind.RECON_REMOVED: (
        "{Thing} for {customer} was deleted in the CRM.",
        "If that was a mistake, {retry} to make it again; otherwise close the case.",
    ),
    _Kind.RECON_CHANGED: (
        "{Thing} for {customer} was changed in the CRM and no longer points back to its "
        "submission.",
        "Check it in the CRM, then close the case.",
    ),
    _Kind.RECON_STUCK: (
        "{Thing} for {customer} has been waiting far too long.",
        "{Retry}, or close the case.",
    ),
}


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def _open_story(
    case: ReviewCase, *, customer: str, can_replay: bool, can_lookup: bool, can_map: bool = False
) -> tuple[str, str]:
    operation = case.operation
    where = destination_words(operation.destination if operation else None)
    why = why_words(case.evidence or {})
    retry = "try it again" if can_replay else "ask a Replay admin to try it again"
    check = (
        f"Look it up in {where}: if it is there, resolve the case; if not, {retry}."
        if can_lookup
        else f"Check {where} by hand: if it is there, resolve the case; if not, {retry}."
    )
    words = {
        "where": where,
        "thing": step_thing(operation.step if operation else None),
        "customer": customer,
        "why": f": {why}." if why else ".",
        "retry": retry,
        "check": check,
        # Only those who may change sources have the link to the choices.
        "map": "choose which of the form's fields are the name, email and message (the "
        "link below), then save and apply"
        if can_map
        else "hand it on to the Settings admins, who choose how this form's fields are read",
    }
    words |= {_upper_first(k): _upper_first(v) for k, v in list(words.items())}
    happened, todo = _STORIES.get(
        case.kind, ("Something needs a person.", "Read the details below, then decide.")
    )
    if operation is not None and operation.status in _NOTHING_TO_TRY:
        # Onefold cannot try it again (the page's decisions say so too): only a person in
        # the CRM can remake a record deleted there.
        words["retry"] = "re-create it in the CRM by hand"
        if case.kind not in (_Kind.RECON_REMOVED, _Kind.RECON_CHANGED):
            todo = f"Nothing is left to try: {_NOTHING_TO_TRY[operation.status]}. Close the case."
    return happened.format(**words), todo.format(**words)


_NOTHING_TO_TRY: dict[str, str] = {
    Operation.Status.SUCCEEDED: "it already worked",
    Operation.Status.CANCELLED: "it was cancelled by a decision on this submission",
}


# One line per case in the queue, from its kind and step alone (the queue reads no
# evidence): {thing} is what the step makes.
_LINES: dict[str, str] = {
    _Kind.AMBIGUOUS: "Not sure {thing} was made: look it up first",
    _Kind.INTERRUPTED_SEND: "The confirmation email may not have arrived: ask the customer",
    _Kind.PERMANENT: "{Thing} was refused: correct the cause, then try again",
    _Kind.RETRIES_EXHAUSTED: "{Thing} failed several times: try again when it works",
    _Kind.SUSPECTED_DUPLICATE: "The same enquiry twice: merge, or keep both",
    _Kind.RECON_DUPLICATE: "Two CRM records for one enquiry: merge, or keep both",
    _Kind.DUPLICATE_HELD: "Sent twice, the second held: same enquiry or separate?",
    _Kind.DUPLICATE_RULE: "The CRM matched an existing record: link, or create anyway",
    _Kind.LATE_REPLAY: "Sent again long after: check, then close",
    _Kind.CONFIRMATION_HELD: "The confirmation email was held back: send it, or close",
    _Kind.UNREADABLE: "Its fields could not be read: choose how they are read",
    _Kind.RECON_MISSING: "{Thing} is missing in the CRM",
    _Kind.RECON_ORPHAN: "A CRM record no submission explains",
    _Kind.RECON_REMOVED: "{Thing} was deleted in the CRM",
    _Kind.RECON_CHANGED: "{Thing} was changed in the CRM",
    _Kind.RECON_STUCK: "{Thing} has waited far too long",
}


def queue_line(case: ReviewCase) -> str:
    """The queue card's one line for `case`, in plain words."""
    thing = step_thing(case.operation.step if case.operation_id and case.operation else None)
    line = _LINES.get(case.kind, "Needs a person")
    return line.format(thing=thing, Thing=_upper_first(thing))
