"""Onefold's data model. The invariants of docs/architecture.md live here as database constraints.

Sources send events; each HTTP receipt is a delivery; each business effect of an
event is an operation with an opaque, permanent key; each execution try of an
operation is an attempt. What cannot be proven lands in a review case, and every
consequential decision leaves an audit entry.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class Source(models.Model):
    """A sender of submissions (a website form). Idempotency keys are scoped per source."""

    name = models.CharField(max_length=100, unique=True)
    is_active = models.BooleanField(default=True)
    # Mixed into operation keys so none can be recomputed from a guessed event key;
    # never changed, or the keys would (docs/architecture.md).
    key_salt = models.CharField(max_length=64, editable=False)
    rate_per_minute = models.PositiveIntegerField(null=True, blank=True)
    task_assignee = models.CharField(max_length=100, default="sales")
    # Steps per form, e.g. {"newsletter": ["send_confirmation"], "*": [...]}; a form
    # not named (and "*" absent) gets the default pipeline. Set through
    # `sources.source_pipeline_set`, which checks each step's prerequisites.
    pipelines = models.JSONField(default=dict, blank=True)
    # Where this source's effects go; empty means the destinations named "crm"
    # and "email" (see Destination).
    crm = models.ForeignKey(
        "Destination", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    mailer = models.ForeignKey(
        "Destination", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # How its deliveries are read (intake/senders/profiles.py): "api" is the JSON
    # API; any other profile has a hook at /hooks/<name>/.
    profile = models.CharField(max_length=20, default="api")
    # The parts of the profile's preset this source replaces (field map, ids, ...).
    profile_overrides = models.JSONField(default=dict, blank=True)
    # SHA-256 of the token in the hook's path, for senders that cannot sign.
    hook_token_digest = models.CharField(max_length=64, blank=True)
    # The form name of submissions whose delivery names none.
    default_form = models.CharField(max_length=100, blank=True)
    # Where the html profile sends the browser after a submission (303).
    thank_you_url = models.URLField(max_length=500, blank=True)
    # A near-identical submission under another key: "flag" (both processed, a
    # case offers a merge) or "hold" (waits for a person before its CRM write).
    duplicates = models.CharField(max_length=10, default="flag")
    # The html profile's CAPTCHA (intake/senders/captcha.py). The secret is kept in clear
    # (siteverify needs it), shown only by its first characters, never logged.
    captcha_provider = models.CharField(max_length=20, blank=True, default="")
    captcha_secret = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(duplicates__in=["flag", "hold"]), name="source_duplicates_valid"
            ),
            models.CheckConstraint(
                condition=Q(captcha_provider__in=["", "turnstile", "hcaptcha", "recaptcha"]),
                name="source_captcha_provider_valid",
            ),
            # A provider without its secret could verify nothing.
            models.CheckConstraint(
                condition=Q(captcha_provider="") | ~Q(captcha_secret=""),
                name="source_captcha_has_secret",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class SourceSecret(models.Model):
    """A signing secret of a source's sender. Several at once while one is rotated:
    a delivery signed with any of them verifies. Kept in clear (an HMAC needs it),
    shown once, never logged."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="secrets")
    secret = models.CharField(max_length=200)
    prefix = models.CharField(max_length=8, help_text="First characters, to recognise it.")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.source.name}:{self.prefix}…"


class SourceApiKey(models.Model):
    """An API key of a source, stored as a SHA-256 digest only (keys are 32 random bytes)."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="api_keys")
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise a key.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Revoked (`revoke_key`): refused from this moment on.
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Replaced (`rotate_key --overlap-seconds N`): keeps working until then, so the
    # sender can switch to the new key without a gap; refused afterwards.
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.source.name}:{self.prefix}…"


class Destination(models.Model):
    """A configured adapter: which CRM or mail service, and where it answers. Its
    capabilities are not stored: the adapter derives and verifies them
    (execution/destinations.py), so nobody can type one the destination does not honour.
    """

    class Kind(models.TextChoices):
        CRM_HTTP = "crm_http", "Sandbox CRM"
        HUBSPOT = "hubspot", "HubSpot"
        SALESFORCE = "salesforce", "Salesforce"
        PIPEDRIVE = "pipedrive", "Pipedrive"
        DATAVERSE = "dataverse", "Microsoft Dataverse"
        SMTP = "smtp", "Email over SMTP"
        RESEND = "resend", "Resend (email API)"

    CRM_KINDS = (Kind.CRM_HTTP, Kind.HUBSPOT, Kind.SALESFORCE, Kind.PIPEDRIVE, Kind.DATAVERSE)
    EMAIL_KINDS = (Kind.SMTP, Kind.RESEND)

    name = models.SlugField(max_length=50, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    # Blank means the URL from settings (DESTINATION_URL / EMAIL_HOST, or the
    # vendor's own variable, e.g. HUBSPOT_BASE_URL, else its real URL).
    base_url = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    kind__in=[
                        "crm_http",
                        "hubspot",
                        "salesforce",
                        "pipedrive",
                        "dataverse",
                        "smtp",
                        "resend",
                    ]
                ),
                name="destination_kind_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_crm(self) -> bool:
        return self.kind in self.CRM_KINDS


class DestinationPause(models.TextChoices):
    """Why a destination's work waits (DestinationBudget.pause_kind)."""

    NONE = "", "Not paused"
    # Its short window is spent (a 429, or its headers said none remain).
    WINDOW = "window", "Rate limit"
    # A day's allowance is spent (HubSpot's DAILY, Salesforce's REQUEST_LIMIT_EXCEEDED).
    DAILY = "daily", "Daily limit"
    # Its declared capabilities do not hold: nothing is sent until they verify again.
    REFUSED = "refused", "Refused by verification"


class DestinationBudget(models.Model):
    """A destination's request budget and pause, shared by every worker (execution/budget.py):
    a cell rate spreads requests, each moving `next_free_at` on by `spacing_seconds`
    (at most `tolerance_seconds` ahead of now), and the log of its requests
    (`DestinationRequest`) caps any rolling window at `requests`.
    """

    Pause = DestinationPause

    destination = models.OneToOneField(
        Destination, on_delete=models.CASCADE, primary_key=True, related_name="budget"
    )
    # The budget in force, and where it comes from: the vendor's documentation, an
    # ONEFOLD_RATE_LIMIT_<NAME> setting, or the destination's own headers.
    requests = models.PositiveIntegerField(null=True, blank=True)
    per_seconds = models.FloatField(null=True, blank=True)
    origin = models.CharField(max_length=20, blank=True)
    spacing_seconds = models.FloatField(default=0)
    tolerance_seconds = models.FloatField(default=0)
    next_free_at = models.DateTimeField(null=True, blank=True)
    paused_until = models.DateTimeField(null=True, blank=True)
    pause_kind = models.CharField(max_length=20, choices=Pause.choices, blank=True)
    pause_reason = models.TextField(blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    # 429s its answers gave: after the budget was learned from its headers or set by
    # the operator (a defect: the budget should have held), and before.
    rate_limited_known = models.PositiveIntegerField(default=0, db_default=0)
    rate_limited_unknown = models.PositiveIntegerField(default=0, db_default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"budget of {self.destination_id}"


class DestinationRequest(models.Model):
    """One request within a destination's rolling window (execution/budget.py), by the
    database's clock alone: sent no earlier than `at`, answered (so counted by the
    vendor) no later than `finished_at`; it holds a place in the window until
    `finished_at` plus the window. A row with `at` = `finished_at` stands for requests
    the vendor counted and Onefold did not send (its headers said so)."""

    destination = models.ForeignKey(Destination, on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The budget's reservation: a destination's requests still in its window.
            models.Index(fields=["destination", "at"], name="destination_request_at"),
        ]

    def __str__(self) -> str:
        return f"request to {self.destination_id} at {self.at}"


class Event(models.Model):
    """One logical submission, identified by (source, key). Created once."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Not indexed alone: `event_unique_source_key` starts with it. (Every index is written
    # by each submission's one statement; docs/benchmarks.md says what each costs.)
    source = models.ForeignKey(
        Source, on_delete=models.PROTECT, related_name="events", db_index=False
    )
    key = models.CharField(max_length=255)
    # SHA-256 of the canonical JSON payload: kept after the payload is purged so
    # a late repeat can still be told apart from a reused key.
    fingerprint = models.CharField(max_length=64)
    payload = models.JSONField(null=True, blank=True)
    form = models.CharField(max_length=100, blank=True)
    # HMAC of the normalised contact email: links events of one person without
    # keeping the address in an index.
    contact_digest = models.CharField(max_length=64, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    # An edit: this event's effect is an update of that event's enquiry.
    revises = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="revisions",
        db_index=False,  # event_revises_idx: edits only
    )
    received_at = models.DateTimeField(auto_now_add=True)
    payload_purged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "key"], name="event_unique_source_key"),
        ]
        indexes = [
            # Reconciliation and retention scan events by arrival time.
            models.Index(fields=["received_at"], name="event_received_idx"),
            # A person's submissions (equality only: no pattern index beside it).
            models.Index(fields=["contact_digest"], name="event_contact_idx"),
            models.Index(
                fields=["revises"], condition=Q(revises__isnull=False), name="event_revises_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source_id}:{self.key}"


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


class Delivery(models.Model):
    """One HTTP receipt of a submission, first or repeat: evidence of retries."""

    Outcome = DeliveryOutcome

    # Neither foreign key is indexed alone: the two indexes below start with them.
    source = models.ForeignKey(
        Source, on_delete=models.PROTECT, related_name="deliveries", db_index=False
    )
    # Null for refused bodies: nothing of their content is kept.
    event = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="deliveries",
        db_index=False,
    )
    received_at = models.DateTimeField(auto_now_add=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    status_code = models.PositiveSmallIntegerField()
    fingerprint = models.CharField(max_length=64, blank=True)
    payload_matched = models.BooleanField(null=True)
    # A hook's delivery as received (verified ones only), kept until the event's
    # payload is purged, so a corrected field map can be re-run (`remap`).
    raw_body = models.BinaryField(null=True, blank=True)
    content_type = models.CharField(max_length=200, blank=True)
    # How the sender was authenticated ("signature verified with secret 1", "token
    # verified"), or why it was not: never the signature or the secret themselves.
    verification = models.CharField(max_length=200, blank=True)
    # How many HTTP receipts the row stands for: 1, except a hook's failed
    # verifications, counted into one row per source a minute (the latest reason
    # kept), so that a flood of wrong credentials cannot flood the table.
    receipts = models.PositiveIntegerField(default=1)

    class Meta:
        verbose_name_plural = "deliveries"
        constraints = [
            models.CheckConstraint(
                condition=Q(outcome__in=[c.value for c in DeliveryOutcome]),
                name="delivery_outcome_valid",
            ),
        ]
        indexes = [
            # The case page lists an event's deliveries in order.
            models.Index(fields=["event", "received_at"], name="delivery_event_idx"),
            # A source's page: its recent deliveries and the last day's counts.
            models.Index(fields=["source", "received_at"], name="delivery_source_recent_idx"),
            # A source's page: its latest refused verification, however long ago.
            models.Index(
                fields=["source", "-received_at"],
                condition=Q(outcome="unauthorized"),
                name="delivery_source_refused_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.outcome} ({self.status_code}) at {self.received_at:%Y-%m-%d %H:%M:%S}"


class OperationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    RETRY_SCHEDULED = "retry_scheduled", "Retry scheduled"
    SUCCEEDED = "succeeded", "Succeeded"
    NEEDS_REVIEW = "needs_review", "Needs review"
    CANCELLED = "cancelled", "Cancelled"


class AttemptTrigger(models.TextChoices):
    """Who or what made an attempt due: shown on the case page's timeline."""

    WORKER = "worker", "Worker"  # the pipeline, or the worker's own retry
    SWEEPER = "sweeper", "Sweeper"  # recovery after an expired lease
    REPLAY = "replay", "Manual replay"
    REVIEWER = "reviewer", "Reviewer's request"  # e.g. a merge


class Operation(models.Model):
    """One business effect that must happen once: (event, step)."""

    Status = OperationStatus

    CLAIMABLE = (Status.PENDING, Status.RETRY_SCHEDULED)
    DONE = (Status.SUCCEEDED, Status.CANCELLED)

    class Recovery(models.TextChoices):
        """How the next attempt proceeds after an ambiguous or interrupted one."""

        NONE = "", "Normal call"
        REPEAT = "repeat", "Repeat: the action is idempotent by nature"
        REPEAT_WITH_KEY = "repeat_with_key", "Repeat with the same idempotency key"
        REPEAT_UNIQUE_REF = "repeat_unique_ref", "Repeat; a unique reference refuses a copy"
        LOOKUP_FIRST = "lookup_first", "Look up by external reference first"
        REVIEW = "review", "A person decides"

    # Not indexed alone: `operation_unique_event_step` starts with it.
    event = models.ForeignKey(
        Event, on_delete=models.PROTECT, related_name="operations", db_index=False
    )
    step = models.CharField(max_length=50)
    position = models.PositiveSmallIntegerField()
    destination = models.ForeignKey(Destination, on_delete=models.PROTECT)
    # Opaque and permanent: what the destination sees as idempotency key,
    # external reference and Message-ID, on every retry and replay.
    # Unique by `operation_unique_key` (a constraint: no pattern index beside it).
    key = models.CharField(max_length=64)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    # Set after an ambiguous or interrupted attempt: the rule the next attempt
    # follows so that it cannot create a second effect.
    recovery = models.CharField(max_length=20, choices=Recovery.choices, blank=True)
    claim_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempt_count = models.PositiveIntegerField(default=0)
    # Attempts that waited (a rate limit, a paused destination) and called nothing that
    # could apply the effect: not counted against ONEFOLD_MAX_ATTEMPTS.
    waits = models.PositiveIntegerField(default=0, db_default=0)
    # Null while an earlier step is unfinished; the step becomes due when set.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # When a task was last put on the queue for this operation (sweeper bookkeeping).
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # When the operation key was first presented to the destination: the start of
    # the destination's idempotency-key retention window.
    first_presented_at = models.DateTimeField(null=True, blank=True)
    destination_ref = models.CharField(max_length=200, blank=True)
    # A reviewer decided "create anyway" on the CRM's duplicate rule: the create is
    # sent telling the destination to allow a duplicate.
    allow_duplicate = models.BooleanField(default=False, db_default=False)
    # What a step needs beyond the event (a merge: which records); null for
    # pipeline steps, which read the event.
    arguments = models.JSONField(null=True, blank=True)
    # What this effect sends, rendered once before the first call so that every retry
    # and replay sends exactly this (execution/content.py); purged with the payload.
    content = models.JSONField(null=True, blank=True)
    # Who or what scheduled the next attempt; the claim copies it onto the attempt.
    # (db_default too: rows that bulk loads insert with SQL start as the worker's.)
    next_trigger = models.CharField(
        max_length=20,
        choices=AttemptTrigger.choices,
        default=AttemptTrigger.WORKER,
        db_default=AttemptTrigger.WORKER,
    )
    next_triggered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # operation_triggered_by_idx: set rows only
    )
    # Set while an earlier step of the event is under review: this step waits in
    # `needs_review` behind it, named in that step's case, until the case is settled
    # (replayed or resolved: back to pending; closed: cancelled).
    held_by = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="holding",
        db_index=False,  # operation_held_by_idx: set rows only
    )
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["event", "step"], name="operation_unique_event_step"),
            models.UniqueConstraint(fields=["key"], name="operation_unique_key"),
            # Only a step that waits for a person can be held.
            models.CheckConstraint(
                condition=Q(held_by__isnull=True) | Q(status="needs_review"),
                name="operation_held_needs_review",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[c.value for c in OperationStatus]),
                name="operation_status_valid",
            ),
            # A running operation always has an owner and a lease.
            models.CheckConstraint(
                condition=~Q(status="running")
                | Q(claim_token__isnull=False, lease_expires_at__isnull=False),
                name="operation_running_has_claim",
            ),
        ]
        indexes = [
            # Sweeper: due work, `status IN (pending, retry_scheduled) AND next_attempt_at <= now`
            # (which implies NOT NULL: a step waiting for the one before it has no entry).
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(
                    status__in=["pending", "retry_scheduled"], next_attempt_at__isnull=False
                ),
                name="operation_due_idx",
            ),
            # Foreign keys that are NULL on almost every row: only set rows are indexed.
            models.Index(
                fields=["held_by"], condition=Q(held_by__isnull=False), name="operation_held_by_idx"
            ),
            models.Index(
                fields=["next_triggered_by"],
                condition=Q(next_triggered_by__isnull=False),
                name="operation_triggered_by_idx",
            ),
            # Sweeper: expired leases, `status = running AND lease_expires_at < now`.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status="running"),
                name="operation_lease_idx",
            ),
            # Dashboard counts by status.
            models.Index(fields=["status"], name="operation_status_idx"),
            # Console search and reconciliation: an operation by its destination reference.
            models.Index(
                fields=["destination_ref"],
                condition=~Q(destination_ref=""),
                name="operation_destination_ref_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.step} of {self.event_id}"


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


class Attempt(models.Model):
    """One execution try of an operation. Append-only: finished once, never rewritten."""

    Outcome = AttemptOutcome

    Trigger = AttemptTrigger

    operation = models.ForeignKey(Operation, on_delete=models.PROTECT, related_name="attempts")
    number = models.PositiveIntegerField()
    claim_token = models.UUIDField()
    trigger = models.CharField(max_length=20, choices=Trigger.choices, default=Trigger.WORKER)
    triggered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True
    )
    recovery = models.CharField(max_length=20, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # Null while the attempt holds the claim: the partial unique index below
    # relies on NULL meaning "running".
    outcome = models.CharField(  # noqa: DJ001
        max_length=20, choices=Outcome.choices, null=True, blank=True
    )
    error_class = models.CharField(max_length=100, blank=True)
    error_message = models.TextField(blank=True)
    # The destination's answer code, in its own protocol: an HTTP status for an
    # API, an SMTP reply code for a mail relay (250 is SMTP's success).
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    smtp_code = models.PositiveSmallIntegerField(null=True, blank=True)
    destination_ref = models.CharField(max_length=200, blank=True)
    adopted = models.BooleanField(default=False, help_text="The effect existed and was adopted.")
    retry_after_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["operation", "number"], name="attempt_unique_operation_number"
            ),
            # Invariant 3: at most one running (unfinished) attempt per operation.
            models.UniqueConstraint(
                fields=["operation"],
                condition=Q(outcome__isnull=True),
                name="attempt_one_running_per_operation",
            ),
            models.CheckConstraint(
                condition=Q(outcome__isnull=True)
                | Q(outcome__in=[c.value for c in AttemptOutcome]),
                name="attempt_outcome_valid",
            ),
        ]
        indexes = [
            # Dashboard: throughput and failure rate over the last 24 hours.
            models.Index(fields=["started_at"], name="attempt_started_idx"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of operation {self.operation_id}"

    @property
    def reply(self) -> str:
        """The answer code as a person reads it: "HTTP 409", "SMTP 250", or ""."""
        if self.smtp_code is not None:
            return f"SMTP {self.smtp_code}"
        if self.http_status is not None:
            return f"HTTP {self.http_status}"
        return ""


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


class ReviewCase(models.Model):
    """Work for a person: something Onefold could not prove or could not do."""

    Kind = CaseKind

    Status = CaseStatus

    OPEN_STATUSES = (Status.OPEN, Status.IN_PROGRESS)

    kind = models.CharField(max_length=30, choices=Kind.choices)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    # What the case is about, e.g. "operation:42" or "external_ref:opk_…".
    subject = models.CharField(max_length=255)
    event = models.ForeignKey(
        Event, on_delete=models.PROTECT, null=True, blank=True, related_name="review_cases"
    )
    operation = models.ForeignKey(
        Operation, on_delete=models.PROTECT, null=True, blank=True, related_name="review_cases"
    )
    summary = models.TextField(help_text="What happened and who should act.")
    evidence = models.JSONField(default=dict, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="owned_cases",
    )
    resolution_code = models.CharField(max_length=50, blank=True)
    resolution_note = models.TextField(blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        permissions = [
            ("replay_operation", "Can replay an operation"),
            ("view_contact_details", "Can see unmasked contact details"),
            ("erase_personal_data", "Can export and erase a person's personal data"),
        ]
        constraints = [
            # Invariant 5: at most one open case per subject and kind.
            models.UniqueConstraint(
                fields=["subject", "kind"],
                condition=Q(status__in=["open", "in_progress"]),
                name="reviewcase_one_open_per_subject_kind",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[c.value for c in CaseStatus]),
                name="reviewcase_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=[c.value for c in CaseKind]), name="reviewcase_kind_valid"
            ),
        ]
        indexes = [
            # Console queue: open cases, oldest first.
            models.Index(
                fields=["created_at", "id"],
                condition=Q(status__in=["open", "in_progress"]),
                name="reviewcase_open_queue_idx",
            ),
            # Console queue sorted by kind, then oldest.
            models.Index(
                fields=["kind", "created_at", "id"],
                condition=Q(status__in=["open", "in_progress"]),
                name="reviewcase_open_kind_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} ({self.subject})"

    @property
    def held_operation_ids(self) -> set[int]:
        """The later steps this case's operation holds, as named when it opened."""
        return {held["id"] for held in self.evidence.get("held_operations", [])}


class AuditEntry(models.Model):
    """An append-only record of a human decision or a consequential automatic one.

    Database triggers refuse UPDATE, DELETE and TRUNCATE on this table; the one UPDATE
    they allow is a person's erasure rewriting the personal parts of `reason` and
    `details` (migrations/sql/0.2.0/audit_trail.sql, idempotency_core/privacy/erasure.py).
    """

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True
    )
    # "user:alice" or "system:sweeper": readable even when the actor is gone.
    actor_label = models.CharField(max_length=150)
    action = models.CharField(max_length=50)
    case = models.ForeignKey(
        ReviewCase, on_delete=models.PROTECT, null=True, blank=True, related_name="audit_entries"
    )
    event = models.ForeignKey(Event, on_delete=models.PROTECT, null=True, blank=True)
    operation = models.ForeignKey(Operation, on_delete=models.PROTECT, null=True, blank=True)
    reason = models.TextField(blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name_plural = "audit entries"
        indexes = [
            # The case page shows its own trail.
            models.Index(fields=["case", "at"], name="audit_case_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action}"


class ConfirmationAllowance(models.Model):
    """A confirmation allowed to go out: what the per-recipient and per-source limits
    count (execution/confirmations.py). Written before the send, under the
    recipient's advisory lock, so that concurrent workers take an address's last
    places one at a time; one per operation, so a retry is counted once."""

    operation = models.OneToOneField(Operation, on_delete=models.PROTECT, related_name="+")
    source = models.ForeignKey(Source, on_delete=models.PROTECT, related_name="+", db_index=False)
    # contact_digest of the address: the limit is per person, without keeping the address.
    recipient_digest = models.CharField(max_length=64)
    granted_at = models.DateTimeField()
    # A reviewer's replay or send-again: counted, but never refused by the limit.
    by_person = models.BooleanField(default=False)

    class Meta:
        indexes = [
            # Sends to one address in the last 24 hours.
            models.Index(
                fields=["recipient_digest", "granted_at"], name="confirmation_recipient_idx"
            ),
            # Sends of one source in the last 24 hours.
            models.Index(fields=["source", "granted_at"], name="confirmation_source_idx"),
        ]

    def __str__(self) -> str:
        return f"confirmation of operation {self.operation_id} at {self.granted_at:%Y-%m-%d %H:%M}"


# --- Reconciliation ------------------------------------------------
# A period's events compared with the records a CRM holds, its listing staged in
# ReconciliationRecord (idempotency_core/reconciliation/); findings become cases.


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


class ReconciliationRun(models.Model):
    """One comparison of a period's events with one CRM destination's records.

    Resumable: `cursor` is the destination listing's cursor after the last page
    whose records were committed, written in the same transaction as them. The
    lease keeps two processes from working on one run at once.
    """

    Status = ReconciliationStatus

    destination = models.ForeignKey(Destination, on_delete=models.PROTECT, related_name="+")
    source = models.ForeignKey(
        Source, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # The period: events with since <= received_at < until.
    since = models.DateTimeField()
    until = models.DateTimeField()
    # The snapshot instant: "stuck" and "settled" are judged as of it, so that
    # a resumed run reaches the same findings as an uninterrupted one.
    as_of = models.DateTimeField()
    # The destination records listed (by their created_at): wider than the period,
    # because a record may be created long after its event (retries, replays).
    listing_since = models.DateTimeField()
    listing_until = models.DateTimeField()
    dry_run = models.BooleanField(default=False)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.LISTING)
    cursor = models.TextField(blank=True)
    pages_fetched = models.PositiveIntegerField(default=0)
    records_staged = models.PositiveBigIntegerField(default=0)
    events_count = models.PositiveBigIntegerField(null=True, blank=True)
    # Findings by kind: all of them, and those new in this run (no open case before).
    findings_total = models.JSONField(default=dict, blank=True)
    findings_new = models.JSONField(default=dict, blank=True)
    lease_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    trigger = models.CharField(max_length=20, default="command")
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[c.value for c in ReconciliationStatus]),
                name="reconciliationrun_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(since__lt=models.F("until")), name="reconciliationrun_period_valid"
            ),
        ]
        indexes = [
            # Automatic resume: the unfinished run of the same scope and period.
            models.Index(
                fields=["destination", "since", "until"],
                condition=~Q(status="completed"),
                name="reconciliationrun_unfinished",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"reconciliation {self.pk} ({self.since:%Y-%m-%d %H:%M} to {self.until:%Y-%m-%d %H:%M})"
        )


class ReconciliationRecord(models.Model):
    """A destination record as listed during a run: staging, deleted when the run completes."""

    # Filled by COPY, read only by set-based queries of its own run (hash joins),
    # so the run_id index is the only one it pays for while loading.
    run = models.ForeignKey(ReconciliationRun, on_delete=models.CASCADE, related_name="+")
    record_id = models.CharField(max_length=100)
    external_ref = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.record_id} ({self.external_ref})"


class ReconciliationFinding(models.Model):
    """One mismatch a run found; `case` is the review case it opened or found open."""

    Kind = FindingKind

    run = models.ForeignKey(ReconciliationRun, on_delete=models.CASCADE, related_name="findings")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    # The review case's subject: "operation:<id>", "external_ref:<ref>" or
    # "record:<destination>:<id>".
    subject = models.CharField(max_length=255)
    event = models.ForeignKey(
        Event, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    operation = models.ForeignKey(
        Operation, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    external_ref = models.CharField(max_length=255, blank=True)
    # Destination record ids involved, comma-separated, oldest first.
    record_ids = models.TextField(blank=True)
    case = models.ForeignKey(
        ReviewCase, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # Null until decided: true when no case of this subject and kind was open before.
    is_new = models.BooleanField(null=True)

    class Meta:
        constraints = [
            # One finding per subject and kind in a run (also makes recomputation
            # after a crash idempotent); serves the drill-down by kind too.
            models.UniqueConstraint(
                fields=["run", "kind", "subject"], name="reconciliationfinding_unique"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=[c.value for c in FindingKind]),
                name="reconciliationfinding_kind_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject}"

    @property
    def record_id_list(self) -> list[str]:
        return [r for r in self.record_ids.split(",") if r]


# --- Business configuration -------------------------------------------------
# What the effects contain (idempotency_core/configuration/): one document, versioned;
# the newest version is the configuration.


class BusinessConfigVersion(models.Model):
    """One version of the whole business configuration document. Never updated or
    deleted (a database trigger refuses both, migrations/sql/0.2.0/config_changes.sql):
    a restore is a new version holding an older document. An insert NOTIFYs
    `onefold_config`, so every process's cached configuration is dropped at its
    commit."""

    number = models.PositiveIntegerField(unique=True)
    # {"sources": {name: {"forms": {form or "*": {"enquiry": ..., "task": ...}}}}}
    document = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # "user:alice" or "system:config apply": readable even when the user is gone.
    actor_label = models.CharField(max_length=150)
    reason = models.TextField(blank=True)

    class Meta:
        permissions = [("change_businessconfig", "Can change the business configuration")]

    def __str__(self) -> str:
        return f"configuration version {self.number}"


class AssigneeTurn(models.Model):
    """A round-robin's counter: how many tasks it has assigned. Advanced by one atomic
    UPDATE in the transaction that stores the task's rendered content, so concurrent
    workers each take their own turn and a retry (whose content is stored) takes none."""

    # "<source>/<form key>": the configuration block the round robin is written in.
    scope = models.CharField(max_length=255, unique=True)
    turns = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.scope}: {self.turns} turns"


class CaseRoute(models.Model):
    """Who receives a case: the review block's first matching route (or the group
    Reviewers), written once by the case's first routing; then moved only by a hand on,
    and stamped once by escalation. *Next case* gives a routed case first to its people."""

    case = models.OneToOneField(ReviewCase, on_delete=models.CASCADE, related_name="route")
    # The name the route gave ("Sales desk", "ana"): kept when the group or user goes.
    target = models.CharField(max_length=150)
    group = models.ForeignKey(
        "auth.Group", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    routed_at = models.DateTimeField()
    # Set by the one escalation a case gets (a conditional UPDATE: only one pass wins).
    escalated_at = models.DateTimeField(null=True, blank=True)
    escalated_to = models.CharField(max_length=150, blank=True)
    handed_on_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(group__isnull=True) | Q(user__isnull=True),
                name="caseroute_group_or_user",
            ),
        ]
        indexes = [
            # The escalation pass: routed cases not escalated yet, oldest first.
            models.Index(
                fields=["routed_at"],
                condition=Q(escalated_at__isnull=True),
                name="caseroute_unescalated_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"case {self.case_id} -> {self.target}"


class NotificationStatus(models.TextChoices):
    PENDING = "pending", "Waiting to be sent"
    SENDING = "sending", "Being sent"
    SENT = "sent", "Sent"
    FAILED = "failed", "Could not be sent"
    SKIPPED = "skipped", "Not sent (the person chose none)"


class Notification(models.Model):
    """One notice of one case to one person (or to the webhook) for one reason: an
    effect like any other here, with a key (its email's Message-ID) and a unique row,
    so that no retry, sweep or worker crash sends it twice. Sent by a task holding a
    claim (`claim_token`, `lease_expires_at`) committed before the send."""

    class Reason(models.TextChoices):
        OPENED = "opened", "Opened"
        ESCALATED = "escalated", "Escalated"
        HANDED_ON = "handed_on", "Handed on"

    class Channel(models.TextChoices):
        EMAIL = "email", "Email"
        WEBHOOK = "webhook", "Webhook"

    Status = NotificationStatus
    OUTSTANDING = (Status.PENDING, Status.SENDING)

    case = models.ForeignKey(ReviewCase, on_delete=models.CASCADE, related_name="notifications")
    # Null for the webhook, and for an email nobody could receive (status failed).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="case_notifications",
    )
    reason = models.CharField(max_length=20, choices=Reason.choices)
    channel = models.CharField(max_length=20, choices=Channel.choices)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    # Sent in the person's digest rather than alone.
    digest = models.BooleanField(default=False)
    key = models.CharField(max_length=64, unique=True)
    due_at = models.DateTimeField()
    enqueued_at = models.DateTimeField(null=True, blank=True)
    claim_token = models.UUIDField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    # Why it could not be sent (never an address: see review/notifications.py).
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["case", "user", "reason"],
                condition=Q(user__isnull=False),
                name="notification_one_per_case_person_reason",
            ),
            models.UniqueConstraint(
                fields=["case", "reason", "channel"],
                condition=Q(user__isnull=True),
                name="notification_one_per_case_reason_channel",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[c.value for c in NotificationStatus]),
                name="notification_status_valid",
            ),
            models.CheckConstraint(
                condition=~Q(status="sending") | Q(claim_token__isnull=False),
                name="notification_sending_has_claim",
            ),
        ]
        indexes = [
            # The sweep: what waits to be sent, or is being sent, by when.
            models.Index(
                fields=["due_at"],
                condition=Q(status__in=["pending", "sending"]),
                name="notification_outstanding_idx",
            ),
            # The dashboard: the notices that could not be sent, newest first.
            models.Index(
                fields=["-created_at"],
                condition=Q(status="failed"),
                name="notification_failed_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.reason} notice of case {self.case_id} ({self.status})"


class NotificationChoice(models.Model):
    """What one person chose on the console to receive: every case, a digest, or none.
    No row: what the review block says (a digest when `digest_minutes` is set)."""

    class Choice(models.TextChoices):
        EVERY = "every", "An email for every case"
        DIGEST = "digest", "A digest"
        NONE = "none", "No email"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_choice"
    )
    choice = models.CharField(max_length=20, choices=Choice.choices)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(choice__in=["every", "digest", "none"]),
                name="notificationchoice_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.choice}"
