"""The page of an enquiry the CRM's duplicate rule matched offers what its services allow.

Besides linking to the matched record (and, where the rule only alerts, creating
anyway), a Reviewer may close it with a category (spam the rule caught) and try it
again where the replay rule proves that safe (once the rule is fixed), as on any case.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from idempotency_core.models import AuditEntry, Operation, ReviewCase
from tests.support.case_kinds import waiting_case

pytestmark = pytest.mark.django_db


def rule_case(key: str) -> ReviewCase:
    return waiting_case(
        ReviewCase.Kind.DUPLICATE_RULE,
        key,
        {"matched_records": ["00Q1"], "create_anyway": False},
        summary="create_enquiry was refused as a suspected duplicate of 00Q1.",
    )


def signed_in(users, role: str) -> Client:
    client = Client()
    client.force_login(users[role])
    return client


def page_of(client: Client, case: ReviewCase) -> str:
    return client.get(reverse("console:case-detail", args=[case.pk])).content.decode()


def test_a_reviewer_is_offered_link_and_every_close_but_no_lookup(users, sandbox):
    case = rule_case("rule-offers")
    page = page_of(signed_in(users, "reviewer"), case)
    assert reverse("console:case-duplicate-rule-link", args=[case.pk]) in page
    close = reverse("console:case-close", args=[case.pk])
    for code in ("handled_elsewhere", "spam_or_test", "customer_withdrew", "not_fixable"):
        assert f'value="{code}" formaction="{close}"' in page, code
    assert "Close for another reason…" in page
    # Nothing was created: nothing to look up or resolve by a reference typed in.
    assert reverse("console:case-lookup", args=[case.pk]) not in page
    assert reverse("console:case-resolve", args=[case.pk]) not in page


def test_a_reviewer_closes_spam_the_rule_caught_from_its_page(users, sandbox):
    case = rule_case("rule-spam")
    client = signed_in(users, "reviewer")
    close = reverse("console:case-close", args=[case.pk])
    assert f'value="spam_or_test" formaction="{close}"' in page_of(client, case)
    done = client.post(close, {"preset": "spam_or_test", "note": "A bot"})
    assert done.status_code == 302
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("closed", "spam_or_test")
    entry = AuditEntry.objects.get(case=case, action="case_closed")
    assert entry.actor == users["reviewer"]
    # The task and the email waiting behind it are never sent.
    assert set(case.operation.event.operations.values_list("status", flat=True)) == {"cancelled"}


def test_a_reviewer_tries_it_again_once_the_rule_is_fixed(users, sandbox):
    case = rule_case("rule-fixed")
    client = signed_in(users, "reviewer")
    replay = reverse("console:case-replay", args=[case.pk])
    page = page_of(client, case)
    assert f'formaction="{replay}">Try again…' in page
    assert "Trying again needs the Replay admins role" not in page
    done = client.post(replay, {"confirm": "yes", "reason": "The CRM's duplicate rule is fixed"})
    assert done.status_code == 302
    assert Operation.objects.get(pk=case.operation_id).status == "retry_scheduled"
    assert ReviewCase.objects.get(pk=case.pk).status == "in_progress"
    assert AuditEntry.objects.get(case=case, action="replay").actor == users["reviewer"]


def test_a_rule_that_only_alerts_offers_create_anyway_not_a_plain_try(users, sandbox):
    case = waiting_case(
        ReviewCase.Kind.DUPLICATE_RULE,
        "rule-alerts",
        {"matched_records": ["00Q1"], "create_anyway": True},
        summary="create_enquiry was matched to 00Q1 by an alerting rule.",
    )
    page = page_of(signed_in(users, "replay_admin"), case)
    assert reverse("console:case-duplicate-rule-create", args=[case.pk]) in page
    assert reverse("console:case-replay", args=[case.pk]) not in page
    assert reverse("console:case-close", args=[case.pk]) in page


def test_try_again_follows_the_replay_rule_for_each_role(users, sandbox):
    case = rule_case("rule-unproven")
    # An earlier try may have created it, and nothing recognises a repeat: not proven safe.
    Operation.objects.filter(pk=case.operation_id).update(recovery=Operation.Recovery.REVIEW)
    replay = reverse("console:case-replay", args=[case.pk])
    reviewer = signed_in(users, "reviewer")
    assert replay not in page_of(reviewer, case)
    assert reviewer.post(replay, {"confirm": "yes", "reason": "r"}).status_code == 403
    assert replay in page_of(signed_in(users, "replay_admin"), case)
