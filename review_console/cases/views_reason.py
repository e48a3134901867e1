"""Decisions on one case whose one input is the reason (a preset's or typed): each a
service of idempotency_core/review behind the usual confirmation page, declared here
once by its route's name, its presets, its service and its texts (`ReasonDecision`).
"""

from __future__ import annotations

from idempotency_core.review.cases import case_mark_not_duplicate, case_reopen
from idempotency_core.review.duplicate_rule import duplicate_rule_create_anyway
from idempotency_core.review.hand_on import case_hand_on
from idempotency_core.review.held_duplicates import held_duplicate_link, held_duplicate_separate
from idempotency_core.review.notifications import hand_on_group
from review_console.cases.decisions import ReasonDecision, reason_decision_view
from review_console.cases.presets import (
    CREATE_ANYWAY,
    HAND_ON,
    HOLD_SAME,
    HOLD_SEPARATE,
    NOT_DUPLICATE,
    REOPEN,
)
from review_console.permissions import REPLAY

REASON_DECISIONS = {
    "case-reopen": ReasonDecision(
        REOPEN,
        case_reopen,
        success="Case {case} is open again, and yours.",
        title="Reopen case {case}",
        submit="Reopen the case",
        explanation=(
            "The case goes back to open, owned by you. What closing it cancelled waits for "
            "a decision again; nothing done outside Onefold is undone."
        ),
    ),
    "case-hand-on": ReasonDecision(
        HAND_ON,
        case_hand_on,
        success="Case {case} handed on to {group}: it is first in their Next case.",
        title="Case {case}: hand it on to {group}",
        submit="Hand it on to {group}",
        explanation=(
            "The case is no longer yours: it goes back to open, first in the Next case of "
            "{group}, who can decide it, and they are told by email. Say what you found, "
            "so they need not look again."
        ),
        words=lambda case: {"group": hand_on_group(case)},
    ),
    # A suspected duplicate: both records kept.
    "case-not-duplicate": ReasonDecision(
        NOT_DUPLICATE,
        case_mark_not_duplicate,
        success="Case {case} resolved: not a duplicate, both records kept.",
        title="Case {case}: not a duplicate",
        submit="Resolve as not a duplicate",
        explanation="Both records stay as they are; the case is resolved.",
    ),
    # A suspected duplicate held before the write (the `hold` policy,
    # review/held_duplicates.py): "Same enquiry" and "Separate enquiry".
    "case-hold-same": ReasonDecision(
        HOLD_SAME,
        held_duplicate_link,
        success="Case {case} resolved: the same enquiry; nothing more was written.",
        title="Case {case}: same enquiry",
        submit="Link to the first submission",
        explanation=(
            "The held submission is linked to the first one and never written: no second "
            "CRM record, no second task, no second confirmation email. This cannot be "
            "undone from the console."
        ),
    ),
    "case-hold-separate": ReasonDecision(
        HOLD_SEPARATE,
        held_duplicate_separate,
        success="Case {case} resolved: a separate enquiry; it is being written now.",
        title="Case {case}: separate enquiry",
        submit="Let it through as a separate enquiry",
        explanation=(
            "The held submission goes ahead as usual: its own CRM record, task and "
            "confirmation email, within seconds."
        ),
    ),
    # The CRM's duplicate rule matched existing records and only alerts: Replay admins
    # may create anyway (views_duplicate_rule.py links to the record matched).
    "case-duplicate-rule-create": ReasonDecision(
        CREATE_ANYWAY,
        duplicate_rule_create_anyway,
        success="Case {case}: the enquiry is being created anyway, as a second record.",
        title="Case {case}: create anyway",
        submit="Create a second record anyway",
        explanation=(
            "The enquiry is sent to the CRM again with its original reference, telling it "
            "to allow the duplicate: a second record next to the one it matched, then the "
            "task and the confirmation email."
        ),
        permission=REPLAY,
        irreversible=True,
    ),
}

VIEWS = {name: reason_decision_view(name, decision) for name, decision in REASON_DECISIONS.items()}
