"""The console's words: one place that turns Onefold's codes into plain language.

Steps, case kinds, outcomes, recovery rules, resolutions, audit actions and
reply codes are stored as short codes (`create_enquiry`, `ambiguous_outcome`,
`SMTP 250`). A reviewer reads the label; the code stays behind a "Technical
details" disclosure. Templates reach these through the `console` template
filters (`step_label`, `kind_label`, ...); tests/review_console/test_glossary.py
renders every console page and fails when a code shows where a label exists.
"""

from __future__ import annotations

import re
from typing import Any

STEPS: dict[str, str] = {
    "create_enquiry": "Create the enquiry in the CRM",
    "assign_task": "Assign a follow-up task in the CRM",
    "send_confirmation": "Send the confirmation email",
    "update_enquiry": "Update the enquiry with the edited submission",
    "remap_enquiry": "Update the enquiry after its fields were read again",
    "merge_duplicate": "Merge the duplicate CRM record",
    "erase_person": "Delete the person's data at the CRM (erasure request)",
}
# A step name may carry a suffix after ":" (a merge names its record, a send
# again its number); the label then says which.
_STEP_SUFFIX: dict[str, str] = {
    "merge_duplicate": "Merge CRM record {suffix} into the one that stays",
    "send_confirmation": "Send the confirmation email again ({suffix})",
    "remap_enquiry": "Update the enquiry after its fields were read again {suffix}",
}

CASE_KINDS: dict[str, str] = {
    "ambiguous_outcome": "Not sure it happened",
    "interrupted_send": "Email may or may not have gone out",
    "permanent_failure": "Refused",
    "retries_exhausted": "Gave up after several tries",
    "suspected_duplicate": "Possible duplicate enquiry",
    "duplicate_held": "Possible duplicate, held before the CRM",
    "duplicate_rule": "The CRM matched an existing record",
    "late_replay": "Sent again after a long time",
    "confirmation_held": "Confirmation email held, not sent",
    "unreadable_submission": "Kept, but its fields could not be read",
    "recon_missing": "Check: record missing in the CRM",
    "recon_duplicate": "Check: two CRM records for one enquiry",
    "recon_orphan": "Check: CRM record with no submission",
    "recon_removed": "Check: record deleted in the CRM",
    "recon_changed": "Check: record reference changed in the CRM",
    "recon_stuck": "Check: step stuck for too long",
}

CASE_STATUSES: dict[str, str] = {
    "open": "Open",
    "in_progress": "In progress",
    "resolved": "Resolved",
    "closed": "Closed",
}

OPERATION_STATUSES: dict[str, str] = {
    "pending": "Waiting",
    "running": "Running now",
    "retry_scheduled": "Will try again",
    "succeeded": "Done",
    "needs_review": "Waiting for a person",
    "cancelled": "Cancelled",
}

OUTCOMES: dict[str, str] = {
    "succeeded": "Worked",
    "retryable": "Failed, will try again",
    "permanent": "Refused",
    "ambiguous": "Unclear: it may have happened",
    "interrupted": "Cut off: it may have happened",
    "skipped": "Skipped: nothing to do",
    "waited": "Waited: the CRM or mail service asked to slow down or is paused (not counted)",
    "running": "Running now",
}

RECOVERY: dict[str, str] = {
    "": "Normal try",
    "repeat": "Try again (doing it twice is harmless)",
    "repeat_with_key": "Try again; the CRM or mail service recognises a repeat",
    "repeat_unique_ref": "Try again; the CRM refuses a second copy",
    "lookup_first": "Look for it first, then create it only if missing",
    "review": "A person decides",
}

TRIGGERS: dict[str, str] = {
    "worker": "automatic",
    "sweeper": "automatic recovery",
    "replay": "replay by a person",
    "reviewer": "a reviewer's decision",
}

# How a case was settled: closing codes (review/cases.py RESOLUTION_CODES) and
# the codes the services set when they resolve.
RESOLUTIONS: dict[str, str] = {
    "verified_in_destination": "Found in the CRM and confirmed",
    "replayed": "Tried again and it worked",
    "merged": "Duplicate records merged",
    "not_duplicate": "Not a duplicate: both enquiries kept",
    "separate_enquiry": "Separate enquiry: the held submission went ahead",
    "same_enquiry": "Same enquiry: linked to the first submission, nothing written",
    "linked_to_match": "Linked to the record the CRM matched, nothing created",
    "customer_confirmed_receipt": "Customer confirmed they received the email",
    "sent_again": "Email sent again",
    "handled_elsewhere": "Handled outside Onefold",
    "customer_withdrew": "Customer withdrew",
    "spam_or_test": "Spam or test",
    "duplicate_submission": "Same request sent twice",
    "remapped": "Read once its fields could be read, and processed",
    "not_fixable": "Cannot be fixed",
    "other": "Other (see the reason)",
    "superseded": "Replaced by a newer case about the same step",
    "person_erased": "Closed: the person's data was erased on request",
}

ACTIONS: dict[str, str] = {
    "case_opened": "Case opened",
    "case_taken": "Took the case",
    "case_routed": "Sent to the people who receive it",
    "case_escalated": "Nobody took it: sent to more people",
    "case_handed_on": "Handed on to the group that can decide it",
    "case_resolved": "Resolved with a confirmed record",
    "case_closed": "Closed",
    "case_settled_by_success": "Settled: the step then worked",
    "case_superseded": "Replaced by a newer case about the same step",
    "case_reopened": "Reopened",
    "replay_failed": "Tried again: it failed again, back in the queue",
    "contact_revealed": "Contact details shown to a reviewer",
    "destination_lookup": "Looked it up in the CRM",
    "replay": "Asked for another try",
    "merge_requested": "Asked for a merge",
    "merged": "Records merged",
    "not_duplicate": "Marked not a duplicate",
    "duplicate_released": "Held submission let through as a separate enquiry",
    "duplicate_linked": "Held submission linked to the first one",
    "duplicate_rule_linked": "Linked to the record the CRM matched",
    "duplicate_rule_create_anyway": "Asked the CRM to create it anyway",
    "email_receipt_confirmed": "Customer confirmed receipt",
    "email_send_again": "Asked to send the email again",
    "late_outcome_discarded": "Late answer kept as evidence",
    "late_replay_checked": "Late repeat checked",
    "bulk_replay_requested": "Bulk replay started",
    "bulk_replay_finished": "Bulk replay finished",
    "reconciliation_completed": "Reconciliation finished",
    "payloads_purged": "Old submissions' contents deleted",
    "remapped": "Its fields read again, and run",
    "field_map_saved": "How a form's fields are read, changed",
    "config_applied": "Business configuration changed (a new version)",
    "config_restored": "Business configuration restored from an older version",
    "config_test_sent": "Test confirmation sent to a Settings admin",
    "source_enabled": "Source enabled",
    "source_disabled": "Source disabled",
    "source_secret_added": "Signing secret added",
    "source_secret_removed": "Signing secret removed",
    "source_captcha_set": "CAPTCHA setting changed",
    "source_settings_changed": "Source settings changed",
    "api_key_rotated": "API key replaced",
    "api_key_revoked": "API key revoked",
    "person_exported": "A person's data exported on request",
    "person_erased": "A person's data erased on request",
    "crm_erasure_resumed": "The person's deletion at the CRM asked again",
}

DELIVERY_OUTCOMES: dict[str, str] = {
    "accepted": "Received (first time)",
    "replayed": "Received again (a repeat, answered from the first)",
    "key_reused": "Refused: same key, different content",
    "key_missing": "Refused: no key",
    "invalid": "Refused: not a valid submission",
    "too_large": "Refused: too large",
    "unsupported_media": "Refused: not JSON",
    "unauthorized": "Refused: signature or token wrong",
    "disabled": "Refused for now: source switched off",
    "honeypot": "Ignored: filled in by a bot",
    "captcha_failed": "Refused: CAPTCHA missing or failed",
    "unreadable": "Kept: its fields could not be read (it waits until they can be)",
}

# The evidence a case carries, by key: the labelled table of the case page.
EVIDENCE_FIELDS: dict[str, str] = {
    "attempt": "Try number",
    "outcome": "What happened",
    "error_class": "Error type",
    "reply": "Answer",
    "message": "What the CRM or mail service said",
    "held_operations": "Steps waiting for this case",
    "matched_records": "CRM records it matched",
    "create_anyway": "CRM would create it anyway if asked",
    "http_status": "Answer",
    "smtp_code": "Answer",
    "external_ref": "Reference Onefold gave the record",
    "record_ids": "CRM records",
    "records": "CRM records",
    "event_ids": "Submissions",
    "existing_id": "Existing CRM record",
    "survivor_id": "CRM record that stays",
    "duplicate_id": "Duplicate CRM record",
    "run": "Reconciliation run",
    "finding": "Finding",
}

# Evidence shown only under "Technical details": opaque keys mean nothing to a reviewer.
TECHNICAL_EVIDENCE = frozenset({"external_ref", "operation_key", "merge_key"})

# SMTP reply codes (RFC 5321, section 4.2.3) and HTTP statuses (RFC 9110) a
# reviewer meets, in words. Unknown codes fall back to their class.
_SMTP: dict[int, str] = {
    250: "accepted by the mail server",
    251: "accepted by the mail server (forwarded)",
    421: "mail server busy, try later",
    450: "mailbox busy, try later",
    451: "mail server error, try later",
    452: "mail server full, try later",
    550: "mailbox refused the message",
    552: "mailbox full",
    553: "address not accepted",
    554: "mail server refused the message",
}
# Each HTTP answer in words, once: as a label ("not found"), and as the end of a
# sentence saying why a step failed ("... because it could not find what Onefold asked for").
HTTP_ANSWERS: dict[int, tuple[str, str]] = {
    200: ("done", ""),
    201: ("created", ""),
    204: ("done", ""),
    400: ("refused: the data was not accepted", "it did not accept the details that were sent"),
    401: (
        "refused: Onefold's credentials were not accepted",
        "it did not accept Onefold's sign-in details",
    ),
    403: ("refused: not allowed", "Onefold is not allowed to do this there"),
    404: ("not found", "it could not find what Onefold asked for"),
    409: ("refused: it already exists", "it says this already exists"),
    413: ("refused: too large", "what was sent is too large for it"),
    422: ("refused: the data was not accepted", "it did not accept the details that were sent"),
    429: ("too many requests, try later", "it asked Onefold to slow down"),
    500: (
        "it failed on its side, and may have done it anyway",
        "it had an internal error while doing it",
    ),
    502: ("it could not be reached", "it could not be reached"),
    503: ("it is unavailable, try later", "it was unavailable"),
    504: ("it did not answer in time", "it did not answer in time"),
}
_HTTP: dict[int, str] = {code: label for code, (label, _) in HTTP_ANSWERS.items()}


def http_why(code: int) -> str:
    """Why a step failed with HTTP `code`, as the end of a sentence."""
    why = HTTP_ANSWERS.get(code, ("", ""))[1]
    return why or ("it refused it" if 400 <= code < 500 else "it failed while doing it")


def step_label(step: str) -> str:
    name, _, suffix = (step or "").partition(":")
    if suffix and name in _STEP_SUFFIX:
        return _STEP_SUFFIX[name].format(suffix=suffix)
    return STEPS.get(name, step)


def _lookup(table: dict[str, str], code: Any) -> str:
    text = "" if code is None else str(code)
    return table.get(text, text.replace("_", " ").capitalize() if text else "")


def kind_label(code: Any) -> str:
    return _lookup(CASE_KINDS, code)


def case_status_label(code: Any) -> str:
    return _lookup(CASE_STATUSES, code)


def operation_status_label(code: Any) -> str:
    return _lookup(OPERATION_STATUSES, code)


def outcome_label(code: Any) -> str:
    return _lookup(OUTCOMES, code or "running")


def recovery_label(code: Any) -> str:
    return RECOVERY.get("" if code is None else str(code), str(code))


def trigger_label(code: Any) -> str:
    return _lookup(TRIGGERS, code)


def resolution_label(code: Any) -> str:
    return _lookup(RESOLUTIONS, code)


def action_label(code: Any) -> str:
    return _lookup(ACTIONS, code)


def delivery_outcome_label(code: Any) -> str:
    return _lookup(DELIVERY_OUTCOMES, code)


def evidence_field_label(key: Any) -> str:
    return _lookup(EVIDENCE_FIELDS, key)


def reply_label(*, smtp_code: int | None = None, http_status: int | None = None) -> str:
    """An answer code in words: SMTP 250 is "accepted by the mail server"."""
    if smtp_code is not None:
        return _SMTP.get(smtp_code) or (
            "accepted by the mail server"
            if 200 <= smtp_code < 300
            else "mail server asks to try later"
            if 400 <= smtp_code < 500
            else "mail server refused"
        )
    if http_status is not None:
        return _HTTP.get(http_status) or (
            "done"
            if 200 <= http_status < 300
            else "refused"
            if 400 <= http_status < 500
            else "it failed on its side"
        )
    return ""


def reply_text_label(reply: Any) -> str:
    """A stored reply text ("SMTP 250", "HTTP 409") in words; other text as it is."""
    protocol, _, number = str(reply or "").partition(" ")
    if number.isdigit() and protocol in ("SMTP", "HTTP"):
        code = int(number)
        return reply_label(**{"smtp_code" if protocol == "SMTP" else "http_status": code})
    return str(reply or "")


def evidence_rows(evidence: Any) -> list[dict[str, Any]]:
    """A case's evidence as labelled rows: (label, plain value, technical key).

    Reply codes are put in words; lists of held steps become step labels; other
    values are shown as text. The raw key stays available for the technical details.
    """
    if not isinstance(evidence, dict):
        return []
    rows = []
    for key, value in evidence.items():
        if value in (None, "", [], {}) or key in TECHNICAL_EVIDENCE:
            continue
        rows.append({"label": evidence_field_label(key), "value": _evidence_value(key, value)})
    return rows


def _evidence_value(key: str, value: Any) -> str:
    if key == "reply":
        return reply_text_label(value)
    if key == "smtp_code" and isinstance(value, int):
        return reply_label(smtp_code=value)
    if key == "http_status" and isinstance(value, int):
        return reply_label(http_status=value)
    if key == "outcome":
        return outcome_label(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key == "held_operations" and isinstance(value, list):
        return "; ".join(
            step_label(str(item.get("step", ""))) if isinstance(item, dict) else str(item)
            for item in value
        )
    if isinstance(value, list):
        return ", ".join(
            str(item.get("id", item)) if isinstance(item, dict) else str(item) for item in value
        )
    if isinstance(value, dict):
        return "; ".join(f"{evidence_field_label(k)}: {v}" for k, v in value.items())
    return plain_text(value)


# Codes that must never reach a page's visible text where one of these labels
# exists (tests/review_console/test_glossary.py scans rendered pages for them):
# the snake_case ones, which no English sentence contains by chance.
def technical_codes() -> set[str]:
    tables = (STEPS, CASE_KINDS, RESOLUTIONS, RECOVERY, ACTIONS, DELIVERY_OUTCOMES)
    codes = {code for table in tables for code in table}
    codes |= set(OPERATION_STATUSES) | set(CASE_STATUSES)
    return {code for code in codes if "_" in code}


# -- free text: summaries, destination messages, refusals ---------------------------

_REPLY_IN_TEXT = re.compile(r"\b(SMTP|HTTP) ([1-5]\d\d)\b")


def _code_pattern() -> re.Pattern[str]:
    codes = sorted(_TEXT_LABELS, key=len, reverse=True)
    return re.compile(r"\b(" + "|".join(re.escape(c) for c in codes) + r")(:[\w.-]+)?\b")


# Codes that may appear inside sentences the engine and the services write; each
# snake_case code of the tables above, with the label a sentence can carry.
_TEXT_LABELS: dict[str, str] = {
    **{k: v for k, v in CASE_KINDS.items()},
    **{k: v for k, v in RESOLUTIONS.items() if "_" in k},
    **{k: v for k, v in RECOVERY.items() if "_" in k},
    **{k: v for k, v in DELIVERY_OUTCOMES.items() if "_" in k},
    **{k: v for k, v in ACTIONS.items() if "_" in k},
    "needs_review": OPERATION_STATUSES["needs_review"],
    "retry_scheduled": OPERATION_STATUSES["retry_scheduled"],
    "in_progress": CASE_STATUSES["in_progress"],
}
_CODES_IN_TEXT = _code_pattern()
_STEPS_IN_TEXT = re.compile(
    r"\b(" + "|".join(sorted(STEPS, key=len, reverse=True)) + r")(?::([\w.-]+))?\b"
)


def plain_text(text: Any) -> str:
    """A sentence written with codes, in words: steps and kinds become their labels
    (quoted), "SMTP 250" becomes "accepted by the mail server (250)"."""
    value = "" if text is None else str(text)
    value = _REPLY_IN_TEXT.sub(
        lambda m: f"{_reply_words(m.group(1), int(m.group(2)))} ({m.group(2)})", value
    )
    value = _STEPS_IN_TEXT.sub(lambda m: f"“{step_label(m.group(0))}”", value)
    return _CODES_IN_TEXT.sub(lambda m: f"“{_TEXT_LABELS[m.group(1)]}”", value)


def _reply_words(protocol: str, code: int) -> str:
    if protocol == "SMTP":
        return reply_label(smtp_code=code)
    return reply_label(http_status=code)


# A submission's fields by their path, as "what could not be read" names them.
_FIELD_WORDS: dict[str, str] = {
    "contact": "The contact details",
    "contact.email": "The email address",
    "contact.name": "The name",
    "contact.phone": "The phone number",
    "message": "The message",
    "submitted_at": "When it was sent",
    "submission_id": "The submission's number",
    "event_id": "The submission's number",
    "form": "The form's name",
    "fields": "The other fields",
    "submission": "The submission",
}


def missing_words(line: Any) -> str:
    """One "what could not be read" line ("contact.email: Enter a valid email address.")
    in words: "The email address: enter a valid email address." The field's path stays
    under Technical details."""
    path, _, problem = str(line or "").partition(": ")
    what = _FIELD_WORDS.get(path.strip(), "A field")
    problem = problem.strip()
    return f"{what}: {problem[:1].lower() + problem[1:]}" if problem else what


def reference_text(ref: Any) -> str:
    """A destination reference as a reviewer reads it: a CRM record or task id; an
    email's Message-ID (derived from the operation key) is technical, so it is ""."""
    value = "" if ref is None else str(ref)
    if value.startswith("<") and "@" in value:
        return ""
    return value


def counted(number: int, noun: str) -> str:
    """ "1 case", "3 cases": a count with its noun in the right number (regular plurals)."""
    return f"{number} {noun}{'' if number == 1 else 's'}"
