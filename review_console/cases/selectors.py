"""Read-only queries of the console. Views render what these return; nothing here writes.

The queue pages by keyset (the last row's sort key, not an OFFSET), so page 2000
costs what page 1 costs; default sorts follow the partial index
`reviewcase_open_queue_idx` on `(created_at, id)` of open cases.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.db import connection
from django.db.models import (
    Q,
    QuerySet,
    Value,
)
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.http import QueryDict

from idempotency_core.execution.destinations import capabilities_of
from idempotency_core.models import (
    AuditEntry,
    Event,
    Operation,
    ReviewCase,
)
from idempotency_core.review.replay import (
    replay_facts,
    replay_plan_for,
    replay_proven_safe,
    replay_refusal,
)
from review_console.cases.causes import holds_in_force, without_held
from review_console.cases.filters import CaseFilter
from review_console.glossary import kind_label
from review_console.masking import contact_for
from review_console.settings.routing import handed_elsewhere, routed_first

# name -> (label, ordering fields). Each sort ends in a unique column so the
# keyset is total; all fields of one sort share a direction.
SORTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "oldest": ("Oldest first", ("created_at", "id")),
    "newest": ("Newest first", ("-created_at", "-id")),
    "kind": ("Kind, then oldest", ("kind", "created_at", "id")),
}
DEFAULT_SORT = "oldest"


def case_queryset() -> QuerySet[ReviewCase]:
    return ReviewCase.objects.select_related(
        "event__source", "operation__destination", "owner"
    ).defer("event__payload", "evidence")


def queue_customers(cases: list[ReviewCase], *, unmasked: bool) -> None:
    """Sets `case.customer` (name, email) on each queue row, masked unless `unmasked`:
    two JSON keys of the page's events, read by primary key in one query (the queue
    query itself never touches the payloads)."""
    contact = KeyTransform("contact", "payload")
    found = {
        pk: {"name": name or "", "email": email or ""}
        for pk, name, email in Event.objects.filter(
            pk__in={c.event_id for c in cases if c.event_id}
        ).values_list("pk", KeyTextTransform("name", contact), KeyTextTransform("email", contact))
    }
    for case in cases:
        details = {"contact": found.get(case.event_id, {})}
        case.customer = contact_for(details, unmasked=unmasked)  # type: ignore[attr-defined]


# A chip's count stops here ("1000+"): each count then reads at most this many rows
# of the open-case indexes, whatever the other filters, at 100k open cases as at 100.
CHIP_COUNT_CAP = 1000


def queue_chips(params: QueryDict, *, request: Any) -> dict[str, list[dict[str, Any]]]:
    """The queue's filter chips: links that set one filter, each with how many cases it
    would show given the other filters, counted up to CHIP_COUNT_CAP (`_capped_counts`).
    Status chips carry no count: counting every settled case ever costs more than it
    tells."""
    user = getattr(request, "user", None)
    by_kind = _without(params, "kind", request)
    kind_counts = _capped_counts(
        [(value, by_kind.filter(kind=value)) for value in ReviewCase.Kind.values]
    )
    by_owner = _without(params, "owner", request)
    owner_counts = _capped_counts(
        [
            ("mine", by_owner.filter(owner=user) if user else by_owner.none()),
            ("nobody", by_owner.filter(owner__isnull=True)),
        ]
    )
    owners = {k: owner_counts.get(k, 0) for k in ("mine", "nobody")}
    kinds, current_kinds = [], params.getlist("kind")
    for value in ReviewCase.Kind.values:
        if kind_counts.get(value) or value in current_kinds:
            kinds.append(_chip(params, "kind", value, kind_label(value), kind_counts.get(value, 0)))
    statuses = [
        _chip(params, "status", "", "Open and in progress", None),
        *(
            _chip(params, "status", value, label, None)
            for value, label in ReviewCase.Status.choices
            if value not in ReviewCase.OPEN_STATUSES
        ),
    ]
    return {
        "kind": [_all_kinds(params, kind_counts), *kinds],
        "owner": [
            _chip(params, "owner", "", "Anyone", None),
            _chip(params, "owner", "me", "Mine", owners["mine"]),
            _chip(params, "owner", "nobody", "No owner", owners["nobody"]),
        ],
        "status": statuses,
    }


def _all_kinds(params: QueryDict, kind_counts: dict[str, int]) -> dict[str, Any]:
    """The "All kinds" chip: the sum of the kinds' counts, "N+" when one was capped."""
    chip = _chip(params, "kind", "", "All kinds", None)
    chip["count"] = sum(min(n, CHIP_COUNT_CAP) for n in kind_counts.values())
    chip["capped"] = any(n > CHIP_COUNT_CAP for n in kind_counts.values())
    return chip


def _capped_counts(parts: list[tuple[str, QuerySet[ReviewCase]]]) -> dict[str, int]:
    """How many rows each queryset has, up to CHIP_COUNT_CAP + 1 (shown "1000+"): one
    UNION ALL of LIMITed selects counted by one GROUP BY: one round trip, at most that
    many index rows read per part."""
    selects = [
        qs.order_by()
        .annotate(chip=Value(name))
        .values_list("chip", flat=True)[: CHIP_COUNT_CAP + 1]
        for name, qs in parts
    ]
    if not selects:
        return {}
    union = selects[0].union(*selects[1:], all=True)
    if union.query.is_empty():
        return {}
    sql, params = union.query.sql_with_params()
    with connection.cursor() as cursor:
        # Counted in PostgreSQL: only one row per chip comes back, not 1,001.
        cursor.execute(f"SELECT chip, count(*) FROM ({sql}) AS capped GROUP BY chip", params)
        return dict(cursor.fetchall())


def _without(params: QueryDict, name: str, request: Any) -> QuerySet[ReviewCase]:
    """The queue's filtered cases with filter `name` left out, for counting."""
    rest = params.copy()
    rest.pop(name, None)
    filterset = case_filterset(rest, request=request)
    if not filterset.is_valid():
        return ReviewCase.objects.none()
    return filterset.qs.order_by()


def _chip(
    params: QueryDict, name: str, value: str, label: str, count: int | None
) -> dict[str, Any]:
    chosen = params.getlist(name)
    target = params.copy()
    for key in ("after", "before", name):
        target.pop(key, None)
    if value:
        target.setlist(name, [value])
    capped = count is not None and count > CHIP_COUNT_CAP
    return {
        "label": label,
        "count": CHIP_COUNT_CAP if capped else count,
        "capped": capped,
        "query": target.urlencode(),
        "active": chosen == [value] if value else not chosen,
    }


def next_case_candidates(user: Any = None) -> QuerySet[ReviewCase]:
    """The cases "Next case" may take (review/cases.py `case_take_next` keeps only the
    open ones nobody owns): not those a held cause keeps in its group (causes.py); with
    `user`, not those handed on to a group of others, and those routed to them first
    (routing.py)."""
    cases = without_held(ReviewCase.objects.all(), holds_in_force())
    return cases if user is None else routed_first(handed_elsewhere(cases, user), user)


def next_case_waiting(user: Any = None) -> QuerySet[ReviewCase]:
    """What "Next case" would give someone (`user`): the dashboard's "N cases wait"
    counts these."""
    Status = ReviewCase.Status
    return next_case_candidates(user).filter(status=Status.OPEN, owner__isnull=True)


def case_filterset(params: QueryDict, *, request: Any = None) -> CaseFilter:
    """The queue's FilterSet; with no status chosen it shows open work only."""
    params = params.copy()
    if not params.getlist("status"):
        params.setlist("status", list(ReviewCase.OPEN_STATUSES))
    return CaseFilter(params, queryset=case_queryset(), request=request)


# -- dashboard ----------------------------------------------------------------


# -- dashboard: trends, time to settle, reconciliation, my cases ------------------


# -- case page ----------------------------------------------------------------


def case_get(case_id: int) -> ReviewCase:
    return ReviewCase.objects.select_related(
        "event__source", "operation__destination", "owner"
    ).get(pk=case_id)


def related_cases(case: ReviewCase, audit: list[AuditEntry]) -> list[tuple[ReviewCase, str]]:
    """Cases linked to this one, each with how, both ways: the same submission; a
    merge this case asked for and the case its operation opened (and back); an email
    sent again and the case of the new send (and back)."""
    links: dict[int, str] = {}
    if case.event_id is not None:
        for pk in ReviewCase.objects.filter(event_id=case.event_id).values_list("pk", flat=True):
            links[pk] = "Same submission"
    # Operations this case's decisions created (a merge, a send again): their cases.
    spawned = {
        e.operation_id
        for e in audit
        if e.case_id == case.pk
        and e.operation_id is not None
        and e.operation_id != case.operation_id
    }
    for pk in ReviewCase.objects.filter(operation_id__in=spawned).values_list("pk", flat=True):
        links[pk] = "Opened by an action taken on this case (a merge, an email sent again)"
    # The case whose decision created this case's operation.
    arguments = (case.operation.arguments or {}) if case.operation is not None else {}
    parents = [arguments.get("case_id"), *(arguments.get("settles_case_ids") or [])]
    for pk in ReviewCase.objects.filter(pk__in=[p for p in parents if p]).values_list(
        "pk", flat=True
    ):
        links[pk] = "This case's step was asked for on that case"
    links.pop(case.pk, None)
    related = ReviewCase.objects.filter(pk__in=list(links)).order_by("created_at", "pk")
    return [(other, links[other.pk]) for other in related]


def case_audit(case: ReviewCase) -> list[AuditEntry]:
    condition = Q(case=case)
    if case.operation_id is not None:
        condition |= Q(operation_id=case.operation_id)
    return list(AuditEntry.objects.filter(condition).select_related("actor").order_by("at", "pk"))


# -- contact details revealed (review/contact.py) -------------------------------------


# The decisions that settle a case, as audited: who "decided" it, for the case page.
_SETTLING = frozenset(
    {
        "case_resolved",
        "case_closed",
        "not_duplicate",
        "duplicate_released",
        "duplicate_linked",
        "duplicate_rule_linked",
        "email_receipt_confirmed",
        "remapped",
        "case_settled_by_success",
        "merged",
    }
)


def settled_by(case: ReviewCase, audit: list[AuditEntry]) -> str:
    """Who settled the case: a person's name, "Onefold", or "" while it is open."""
    if case.status in ReviewCase.OPEN_STATUSES:
        return ""
    for index in range(len(audit) - 1, -1, -1):
        entry = audit[index]
        if entry.case_id == case.pk and entry.action in _SETTLING:
            # Onefold settles a case when what a person asked for works (a replay, a
            # merge, a send again): the decision was that person's.
            asker = entry.actor or _asked_by(case, audit[:index])
            if asker is None:
                return "Onefold"
            return asker.get_full_name().strip() or asker.get_username()
    return ""


def settled_note(case: ReviewCase, audit: list[AuditEntry]) -> str:
    """The settling person's note, shown beside who decided; "" when Onefold wrote it
    (its note is technical: under Technical details)."""
    for entry in reversed(audit):
        if entry.case_id == case.pk and entry.action in _SETTLING:
            return case.resolution_note if entry.actor is not None else ""
    return ""


_ASKED = frozenset(
    {"replay", "merge_requested", "email_send_again", "duplicate_rule_create_anyway"}
)


def _asked_by(case: ReviewCase, earlier: list[AuditEntry]) -> Any:
    """The person whose request (of `_ASKED`) last preceded Onefold's settling."""
    for entry in reversed(earlier):
        ours = entry.case_id == case.pk or (
            case.operation_id is not None and entry.operation_id == case.operation_id
        )
        if ours and entry.action in _ASKED and entry.actor is not None:
            return entry.actor
    return None


# -- duplicates -----------------------------------------------------------------


# -- replay ---------------------------------------------------------------------


def replay_preview(operation: Operation, *, destination_checked: bool = True) -> dict[str, Any]:
    """What the replay button would meet, in words, before anyone presses it.

    The same rule as the replay (`replay_refusal` over `replay_facts`), read
    without the row lock and from stored state only: the destination's
    capabilities come from its adapter's configuration, nothing is called.
    `operation_replay` checks again under the lock. `refusal` assumes the
    reviewer ticks "I checked the destination" where that is asked (`needs_check`).
    """
    destination = operation.destination
    # Read once for the page: for the sandbox each read is a request.
    capabilities = capabilities_of(destination)
    facts = replay_facts(operation, capabilities=capabilities)
    window = ""
    presented = operation.first_presented_at
    if capabilities.idempotency_keys and presented and capabilities.key_retention is not None:
        window = (
            f"{destination.name} remembers idempotency keys for {capabilities.key_retention}; "
            f"this key was first presented {presented:%Y-%m-%d %H:%M} UTC."
        )
    refusal = replay_refusal(facts, destination_checked=destination_checked)
    # What no step of the reviewer's on the case page (a lookup, the tick) can lift:
    # the case page disables its button only for this; the confirm page says `refusal`.
    blocked = replay_refusal(replace(facts, needs_check=False), destination_checked=True)
    return {
        "possible": refusal is None,
        "refusal": refusal or "",
        "blocked": blocked or "",
        "blocked_words": _blocked_words(facts) if blocked else "",
        "needs_check": facts.needs_check,
        "proven_safe": replay_proven_safe(facts),
        "can_lookup": facts.lookup_can_answer,
        "native_lookup": capabilities.lookup,
        "window": window,
    }


def _blocked_words(facts: Any) -> str:
    """Why trying again is not possible now, as the case page says it (the rule's own
    words, with the step's code and reference, are under Technical details)."""
    Status = Operation.Status
    by_status = {
        Status.SUCCEEDED: "it already worked.",
        Status.RUNNING: "it is running right now; wait a moment.",
        Status.PENDING: "it is already waiting to run.",
        Status.RETRY_SCHEDULED: "it is already waiting to run.",
        Status.CANCELLED: "it was cancelled.",
    }
    if facts.status in by_status:
        return by_status[facts.status]
    if facts.earlier_unfinished is not None:
        return "an earlier step has not worked yet; settle that one first."
    return "the details below say why."


def replay_steps(operation: Operation) -> list[dict[str, Any]]:
    """The replay page's preview: every step of the submission, in pipeline order, with
    what a replay of `operation` does to it (`replay_plan`, the engine's own rule) and
    the key it presents: each step's original operation key, never a new one."""
    return [
        {
            "step": planned.state.step,
            "key": planned.state.key,
            "effect": planned.effect,
            "replayed": planned.state.pk == operation.pk,
            "status": planned.state.status,
            "destination_ref": planned.state.destination_ref,
        }
        for planned in replay_plan_for(operation)
    ]
