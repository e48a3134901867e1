"""The first screen of a case page never contradicts itself, for every case kind in
every state: open, taken, under way (a merge or a try asked for), settled, reopened.

- It never invites a reopen it then refuses ("reopen it" above "cannot be reopened").
- While what a person asked for is under way, it offers no decision that would
  compete with it (no *Merge into one*, *Keep both*, *Try again…* or close buttons).
- A case Onefold settled because a person's merge, replay or send again worked is
  "decided by" that person, never "by Onefold".
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import ReviewCase
from idempotency_core.review.cases import case_close, case_reopen, case_take_ownership
from idempotency_core.review.merge import duplicate_merge_request
from idempotency_core.review.replay import operation_replay
from review_console import glossary
from tests.factories import duplicate_case, merge_operation, permanent_case
from tests.support.console_pages import seed
from tests.support.jargon import main_text

pytestmark = pytest.mark.django_db

DECISIONS = ("Merge into one", "Not a duplicate: keep both", "Try again…", "Customer withdrew")


def contradictions(text: str) -> list[str]:
    found = []
    if "What to do:" not in text:
        found.append("no 'What to do'")
    if "reopen it" in text and "cannot be reopened" in text:
        found.append("invites a reopen it refuses")
    if " now. The case settles by itself" in text:
        found += [f"offers {d} while under way" for d in DECISIONS if d in text]
    if "Resolved:" in text or "Closed:" in text:
        found += [f"offers {d} once settled" for d in DECISIONS if d in text]
    return found


def page_text(client: Client, case: ReviewCase) -> str:
    response = client.get(reverse("console:case-detail", args=[case.pk]))
    assert response.status_code == 200
    return main_text(response.content.decode())


def test_no_case_page_contradicts_itself_in_any_kind_or_state(sandbox, ambiguous_case, users):
    seeded = seed(sandbox, ambiguous_case, users)
    rex, rita = users["replay_admin"], users["reviewer"]
    cases = seeded["cases"]
    assert set(cases) == set(glossary.CASE_KINDS)
    clients = {}
    for role in ("reviewer", "replay_admin", "superuser"):
        clients[role] = Client()
        clients[role].force_login(users[role])
    found: dict[str, list[str]] = {}

    def check(state: str) -> None:
        for kind, case in cases.items():
            for role, client in clients.items():
                problems = contradictions(page_text(client, case))
                if problems:
                    found[f"{kind} {state} ({role})"] = problems

    check("open")
    for case in cases.values():
        case_take_ownership(case_ids=[case.pk], actor=rita)
    check("taken")
    # Under way: the duplicate's merge, and a try of each refused step.
    duplicate = cases["suspected_duplicate"]
    first, second = duplicate.record_ids
    duplicate_merge_request(
        case_id=duplicate.pk, survivor_ref=first, duplicate_ref=second, actor=rex, reason="same"
    )
    operation_replay(operation_id=cases["permanent_failure"].operation_id, actor=rex, reason="x")
    check("under way")
    for case in cases.values():
        case.refresh_from_db()
        under_way = case.kind in ("suspected_duplicate", "permanent_failure")
        if case.status in ReviewCase.OPEN_STATUSES and not under_way:
            case_close(case_id=case.pk, actor=rex, resolution_code="spam_or_test", reason="x")
    check("settled")
    for case in cases.values():
        case.refresh_from_db()
        if case.status == "closed":
            case_reopen(case_id=case.pk, actor=rex, reason="decided too soon")
    check("reopened")
    assert not found, "\n".join(f"{k}: {v}" for k, v in found.items())


def test_a_case_settled_by_a_person_s_merge_or_replay_is_decided_by_that_person(sandbox, users):
    rex = users["replay_admin"]
    rex.first_name, rex.last_name = "Rex", "Admin"
    rex.save()
    client = Client()
    client.force_login(users["reviewer"])
    refused = permanent_case("ft-replayed")
    operation_replay(operation_id=refused.operation_id, actor=rex, reason="CRM fixed")
    assert operation_execute(operation_id=refused.operation_id) == "succeeded"
    duplicate = duplicate_case(sandbox, key_a="ft-a", key_b="ft-b")
    first, second = duplicate.record_ids
    duplicate_merge_request(
        case_id=duplicate.pk, survivor_ref=first, duplicate_ref=second, actor=rex, reason="same"
    )
    merging = page_text(client, duplicate)
    assert "being merged into one now" in merging and "being tried again" not in merging
    assert not any(d in merging for d in DECISIONS), merging
    assert operation_execute(operation_id=merge_operation(duplicate).pk) == "succeeded"
    for case in (refused, duplicate):
        case.refresh_from_db()
        assert case.status == "resolved"
        text = page_text(client, case)
        assert "by Rex Admin" in text and "by Onefold" not in text, text
        if case is duplicate:  # a merge cannot be undone: no invitation to reopen
            assert "reopen it" not in text and "cannot be reopened" in text
