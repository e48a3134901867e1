"""A Reviewer may try again where the engine proves it cannot make a second effect.

A refusal (nothing was applied), a destination that recognises a repeat, a lookup since
the last attempt that found nothing, a held confirmation whose address and source are
under their limits again: the same replay service, the same key, the same guards. What
could duplicate (an unclear outcome nobody looked up, a confirmation still over its
limit) stays with Replay admins, and the Reviewer's page offers *Hand on* instead.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import ConfirmationAllowance, Operation, ReviewCase
from idempotency_core.review.refusals import ReplayRefusedError
from idempotency_core.review.replay import ReplayFacts, operation_replay, replay_proven_safe
from tests.factories import ingest, op, permanent_case

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
FACTS = ReplayFacts(
    step="create_enquiry",
    status="needs_review",
    destination_ref="",
    earlier_unfinished=None,
    needs_check=False,
    lookup_can_answer=True,
    lookup_at=None,
    lookup_found=None,
    lookup_refs=(),
    last_attempt_started_at=T0,
)


def test_the_rule_proves_safe_only_what_cannot_make_a_second_effect():
    assert replay_proven_safe(FACTS)  # refused, or recognised by the destination
    unclear = replace(FACTS, needs_check=True)
    assert not replay_proven_safe(unclear)  # nobody looked
    looked = replace(unclear, lookup_at=T0 + timedelta(minutes=1), lookup_found=False)
    assert replay_proven_safe(looked)
    assert not replay_proven_safe(replace(looked, lookup_found=True))
    assert not replay_proven_safe(replace(looked, lookup_found=None))  # could not say
    assert not replay_proven_safe(replace(looked, lookup_at=T0 - timedelta(minutes=1)))
    assert not replay_proven_safe(replace(looked, lookup_can_answer=False))  # a word only
    assert not replay_proven_safe(replace(FACTS, limits_hold=True))


def test_a_reviewer_tries_a_refused_step_again_from_the_case_page(users, sandbox):
    case = permanent_case("rv-perm")
    client = Client()
    client.force_login(users["reviewer"])
    page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert "Try again…" in page
    assert "Trying again needs the Replay admins role" not in page
    url = reverse("console:case-replay", args=[case.pk])
    confirm = client.post(url, {"preset": "cause_fixed"})
    assert confirm.status_code == 200
    assert "I checked" not in confirm.content.decode()  # nothing to vouch for
    done = client.post(url, {"confirm": "yes", "reason": "The CRM field is fixed"})
    assert done.status_code == 302
    operation = Operation.objects.get(pk=case.operation_id)
    assert operation.status == "retry_scheduled" and operation.next_trigger == "replay"
    assert ReviewCase.objects.get(pk=case.pk).status == "in_progress"


def test_a_reviewer_may_not_try_again_what_could_duplicate(users, ambiguous_case):
    case = ambiguous_case("rv-amb")
    reviewer = users["reviewer"]
    with pytest.raises(ReplayRefusedError, match="Replay admin"):
        operation_replay(
            operation_id=case.operation_id,
            actor=reviewer,
            reason="looks absent",
            destination_checked=True,  # a Reviewer's word is not the engine's proof
        )
    client = Client()
    client.force_login(reviewer)
    page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert "Try again…" not in page
    refused = client.post(
        reverse("console:case-replay", args=[case.pk]), {"confirm": "yes", "reason": "x"}
    )
    assert refused.status_code == 403
    assert Operation.objects.get(pk=case.operation_id).status == "needs_review"


@pytest.fixture
def held_confirmation(sandbox, settings) -> ReviewCase:
    settings.ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY = 1
    for n in range(2):
        event = ingest(
            f"rv-held-{n}",
            contact={"name": "Grace", "email": "grace@example.com"},
            message=f"Enquiry {n}.",
        )
        for operation in event.operations.order_by("position"):
            operation_execute(operation_id=operation.pk)
    return ReviewCase.objects.get(
        operation=op(event, "send_confirmation"), kind="confirmation_held"
    )


def test_a_held_confirmation_is_a_reviewer_s_to_send_once_under_the_limit_again(
    users, held_confirmation
):
    reviewer = users["reviewer"]
    with pytest.raises(ReplayRefusedError, match="Replay admin"):
        operation_replay(operation_id=held_confirmation.operation_id, actor=reviewer, reason="real")
    ConfirmationAllowance.objects.update(granted_at=timezone.now() - timedelta(hours=25))
    operation = operation_replay(
        operation_id=held_confirmation.operation_id, actor=reviewer, reason="a real customer"
    )
    assert operation.status == "retry_scheduled"
