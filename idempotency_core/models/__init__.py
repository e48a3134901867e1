"""Onefold's data model. The invariants of docs/architecture.md live here as database constraints.

Sources send events; each HTTP receipt is a delivery; each business effect of an
event is an operation with an opaque, permanent key; each execution try of an
operation is an attempt. What cannot be proven lands in a review case, and every
consequential decision leaves an audit entry. One module a domain; Django and every
caller import the classes from here.
"""

from __future__ import annotations

from idempotency_core.models.audit import (
    AuditEntry,
)
from idempotency_core.models.cases import (
    CaseKind,
    CaseRoute,
    CaseStatus,
    ReviewCase,
)
from idempotency_core.models.configuration import (
    AssigneeTurn,
    BusinessConfigVersion,
)
from idempotency_core.models.destinations import (
    Destination,
    DestinationBudget,
    DestinationPause,
    DestinationRequest,
)
from idempotency_core.models.events import (
    Delivery,
    DeliveryOutcome,
    Event,
)
from idempotency_core.models.notifications import (
    Notification,
    NotificationChoice,
    NotificationStatus,
)
from idempotency_core.models.operations import (
    Attempt,
    AttemptOutcome,
    AttemptTrigger,
    ConfirmationAllowance,
    Operation,
    OperationStatus,
)
from idempotency_core.models.reconciliation import (
    FindingKind,
    ReconciliationFinding,
    ReconciliationRecord,
    ReconciliationRun,
    ReconciliationStatus,
)
from idempotency_core.models.sources import (
    Source,
    SourceApiKey,
    SourceSecret,
)

__all__ = [
    "AssigneeTurn",
    "Attempt",
    "AttemptOutcome",
    "AttemptTrigger",
    "AuditEntry",
    "BusinessConfigVersion",
    "CaseKind",
    "CaseRoute",
    "CaseStatus",
    "ConfirmationAllowance",
    "Delivery",
    "DeliveryOutcome",
    "Destination",
    "DestinationBudget",
    "DestinationPause",
    "DestinationRequest",
    "Event",
    "FindingKind",
    "Notification",
    "NotificationChoice",
    "NotificationStatus",
    "Operation",
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
