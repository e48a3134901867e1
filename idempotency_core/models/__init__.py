"""Onefold's data model. The invariants of docs/architecture.md live here as database constraints.

Sources send events; each HTTP receipt is a delivery; each business effect of an
event is an operation with an opaque, permanent key; each execution try of an
operation is an attempt. What cannot be proven lands in a review case, and every
consequential decision leaves an audit entry. One module a domain; Django and every
caller import the classes from here.
"""

from __future__ import annotations

from idempotency_core.models.audit import AuditEntry
from idempotency_core.models.cases import CaseRoute, ReviewCase
from idempotency_core.models.choices import (
    AttemptOutcome,
    AttemptTrigger,
    CaseKind,
    CaseStatus,
    DeliveryOutcome,
    DestinationKind,
    DestinationPause,
    FindingKind,
    NotificationPreference,
    NotificationStatus,
    OperationRecovery,
    OperationStatus,
    ReconciliationStatus,
)
from idempotency_core.models.configuration import AssigneeTurn, BusinessConfigVersion
from idempotency_core.models.destinations import Destination, DestinationBudget, DestinationRequest
from idempotency_core.models.events import BodyDigest, Delivery, Event
from idempotency_core.models.notifications import Notification, NotificationChoice
from idempotency_core.models.operations import Attempt, ConfirmationAllowance, Operation
from idempotency_core.models.reconciliation import (
    ReconciliationFinding,
    ReconciliationRecord,
    ReconciliationRun,
)
from idempotency_core.models.sources import Source, SourceApiKey, SourceSecret

__all__ = [
    "AssigneeTurn",
    "Attempt",
    "AttemptOutcome",
    "AttemptTrigger",
    "AuditEntry",
    "BodyDigest",
    "BusinessConfigVersion",
    "CaseKind",
    "CaseRoute",
    "CaseStatus",
    "ConfirmationAllowance",
    "Delivery",
    "DeliveryOutcome",
    "Destination",
    "DestinationBudget",
    "DestinationKind",
    "DestinationPause",
    "DestinationRequest",
    "Event",
    "FindingKind",
    "Notification",
    "NotificationChoice",
    "NotificationPreference",
    "NotificationStatus",
    "Operation",
    "OperationRecovery",
    "OperationStatus",
    "ReconciliationFinding",
    "ReconciliationRecord",
    "ReconciliationRun",
    "ReconciliationStatus",
    "ReviewCase",
    "Source",
    "SourceApiKey",
    "SourceSecret",
]
