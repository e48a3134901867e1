"""The states and kinds the models' fields hold: the vocabulary of the CHECK
constraints (`choices_valid`), and of the hand-written statements that write the
same rows."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class DestinationKind(models.TextChoices):
    CRM_HTTP = "crm_http", "Sandbox CRM"
    HUBSPOT = "hubspot", "HubSpot"
    SALESFORCE = "salesforce", "Salesforce"
    PIPEDRIVE = "pipedrive", "Pipedrive"
    DATAVERSE = "dataverse", "Microsoft Dataverse"
    SMTP = "smtp", "Email over SMTP"
    RESEND = "resend", "Resend (email API)"


class DestinationPause(models.TextChoices):
    """Why a destination's work waits (DestinationBudget.pause_kind)."""

    NONE = "", "Not paused"
    # Its short window is spent (a 429, or its headers said none remain).
    WINDOW = "window", "Rate limit"
    # A day's allowance is spent (HubSpot's DAILY, Salesforce's REQUEST_LIMIT_EXCEEDED).
    DAILY = "daily", "Daily limit"
    # Its declared capabilities do not hold: nothing is sent until they verify again.
    REFUSED = "refused", "Refused by verification"


class DeliveryOutcome(models.TextChoices):
    ACCEPTED = "accepted", "Accepted (new event)"
    REPLAYED = "replayed", "Repeat answered from the stored event"
    KEY_REUSED = "key_reused", "Refused: key reused with another payload"
    KEY_MISSING = "key_missing", "Refused: no idempotency key"
    INVALID = "invalid", "Refused: invalid body"
    TOO_LARGE = "too_large", "Refused: body too large"
    UNSUPPORTED_MEDIA = "unsupported_media", "Refused: not JSON"
    UNAUTHORIZED = "unauthorized", "Refused: bad or stale signature, or wrong token"
    DISABLED = "disabled", "Refused: source disabled (sender told to retry)"
    HONEYPOT = "honeypot", "Ignored: a bot filled the hidden field"
    CAPTCHA_FAILED = "captcha_failed", "Refused: CAPTCHA token missing or rejected"
    # Verified and parsed, but its field map found no submission in it: kept, raw body
    # and all, as an event that waits for a corrected map (an `unreadable_submission`).
    UNREADABLE = "unreadable", "Kept for review: does not map to a submission"


class OperationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    RETRY_SCHEDULED = "retry_scheduled", "Retry scheduled"
    SUCCEEDED = "succeeded", "Succeeded"
    NEEDS_REVIEW = "needs_review", "Needs review"
    CANCELLED = "cancelled", "Cancelled"


class OperationRecovery(models.TextChoices):
    """How the next attempt proceeds after an ambiguous or interrupted one."""

    NONE = "", "Normal call"
    REPEAT = "repeat", "Repeat: the action is idempotent by nature"
    REPEAT_WITH_KEY = "repeat_with_key", "Repeat with the same idempotency key"
    REPEAT_UNIQUE_REF = "repeat_unique_ref", "Repeat; a unique reference refuses a copy"
    LOOKUP_FIRST = "lookup_first", "Look up by external reference first"
    REVIEW = "review", "A person decides"


class AttemptTrigger(models.TextChoices):
    """Who or what made an attempt due: shown on the case page's timeline."""

    WORKER = "worker", "Worker"  # the pipeline, or the worker's own retry
    SWEEPER = "sweeper", "Sweeper"  # recovery after an expired lease
    REPLAY = "replay", "Manual replay"
    REVIEWER = "reviewer", "Reviewer's request"  # e.g. a merge


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded", "Succeeded"
    RETRYABLE = "retryable", "Retryable (not applied)"
    PERMANENT = "permanent", "Permanent (needs correction)"
    AMBIGUOUS = "ambiguous", "Ambiguous (may have been applied)"
    INTERRUPTED = "interrupted", "Interrupted (lease expired)"
    # Onefold's own rule says there is nothing to do (a confirmation with no address):
    # nothing was called, and the operation ends cancelled, not failed.
    SKIPPED = "skipped", "Skipped (nothing to do)"
    # A rate limit or a paused destination refused it before anything was applied: asked
    # again after the wait, and not counted as a failed attempt.
    WAITED = "waited", "Waited (rate limit or paused destination)"


class CaseKind(models.TextChoices):
    AMBIGUOUS = "ambiguous_outcome", "Ambiguous outcome"
    INTERRUPTED_SEND = "interrupted_send", "Interrupted send (may have been sent)"
    PERMANENT = "permanent_failure", "Permanent failure"
    RETRIES_EXHAUSTED = "retries_exhausted", "Retries exhausted"
    SUSPECTED_DUPLICATE = "suspected_duplicate", "Suspected duplicate"
    # A source's `hold` policy: the second submission waits, unwritten, for a reviewer.
    DUPLICATE_HELD = "duplicate_held", "Suspected duplicate held before the write"
    # The CRM's own duplicate rule refused the create and named the records it matched.
    DUPLICATE_RULE = "duplicate_rule", "The CRM matched an existing record"
    LATE_REPLAY = "late_replay", "Late replay"
    # A confirmation Onefold did not send: over a sending limit, or its submission's
    # CAPTCHA could not be checked (execution/confirmations.py). A person decides.
    CONFIRMATION_HELD = "confirmation_held", "Confirmation held, not sent"
    # A verified delivery whose field map found no submission in it: kept with its raw
    # body as an event without operations until a corrected map is applied (remap.py).
    UNREADABLE = "unreadable_submission", "Unreadable submission, kept for a corrected map"
    RECON_MISSING = "recon_missing", "Reconciliation: missing in destination"
    RECON_DUPLICATE = "recon_duplicate", "Reconciliation: duplicate external reference"
    RECON_ORPHAN = "recon_orphan", "Reconciliation: orphan destination record"
    RECON_REMOVED = "recon_removed", "Reconciliation: record removed"
    RECON_CHANGED = "recon_changed", "Reconciliation: reference changed"
    RECON_STUCK = "recon_stuck", "Reconciliation: operation stuck"


class CaseStatus(models.TextChoices):
    OPEN = "open", "Open"
    IN_PROGRESS = "in_progress", "In progress"
    RESOLVED = "resolved", "Resolved"
    CLOSED = "closed", "Closed"


class ReconciliationStatus(models.TextChoices):
    LISTING = "listing", "Listing the destination"
    COMPARING = "comparing", "Comparing"
    OPENING = "opening", "Opening review cases"
    COMPLETED = "completed", "Completed"


class FindingKind(models.TextChoices):
    MISSING = "missing", "Missing"
    DUPLICATE = "duplicate", "Duplicate external reference"
    ORPHAN = "orphan", "Orphan record"
    REMOVED = "removed", "Removed"
    CHANGED = "changed", "Changed"
    STUCK = "stuck", "Stuck"


class NotificationStatus(models.TextChoices):
    PENDING = "pending", "Waiting to be sent"
    SENDING = "sending", "Being sent"
    SENT = "sent", "Sent"
    FAILED = "failed", "Could not be sent"
    SKIPPED = "skipped", "Not sent (the person chose none)"


class NotificationPreference(models.TextChoices):
    EVERY = "every", "An email for every case"
    DIGEST = "digest", "A digest"
    NONE = "none", "No email"


def choices_valid(
    field: str, choices: type[models.TextChoices], name: str
) -> models.CheckConstraint:
    """The database's own check that `field` holds one of `choices`' values: a row
    a hand-written statement writes is held to the same list as the ORM's."""
    return models.CheckConstraint(
        condition=Q(**{f"{field}__in": [c.value for c in choices]}), name=name
    )
