"""The replay preview (console) and the replay itself agree on every refusal.

Both read `replay_facts` and apply `replay_refusal`: the preview without a lock,
the replay under the row lock. Property-based over operation states: the
operation's status and recovery rule, the earlier step's status, what the
destination can do (lookup or not), the last recorded lookup (none, found,
not found; before or after the last attempt), and the reviewer's tick.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idempotency_core.audit.entries import audit_record
from idempotency_core.intake.ingest import event_ingest
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Attempt, Operation
from idempotency_core.review.refusals import ReplayRefusedError
from idempotency_core.review.replay import operation_replay
from review_console.cases.selectors import replay_preview
from tests.support.processes import Sandbox

pytestmark = pytest.mark.django_db

Status = Operation.Status
Recovery = Operation.Recovery

# Weighted towards the states a replay is asked for (in review, earlier step done,
# no recognition left), where the interesting refusals live; every state stays possible.
states = st.fixed_dictionaries(
    {
        "status": st.one_of(st.just(Status.NEEDS_REVIEW), st.sampled_from(list(Status))),
        "earlier": st.one_of(st.just(Status.SUCCEEDED), st.sampled_from(list(Status))),
        "step": st.sampled_from(["create_enquiry", "assign_task"]),
        "recovery": st.one_of(
            st.just(Recovery.REVIEW),
            st.sampled_from([Recovery.NONE, Recovery.REVIEW, Recovery.LOOKUP_FIRST]),
        ),
        "lookup": st.booleans(),
        "last_lookup": st.sampled_from([None, "found", "absent"]),
        "lookup_after_attempt": st.booleans(),
        "attempted": st.booleans(),
        "checked": st.booleans(),
    }
)


def _as(status: object) -> dict[str, object]:
    """The columns a row in `status` carries (a running one holds a claim)."""
    if status == Status.RUNNING:
        return {
            "status": status,
            "claim_token": uuid.uuid4(),
            "lease_expires_at": timezone.now() + timedelta(minutes=5),
        }
    return {"status": status}


def _arrange(state: dict[str, object], n: int, sandbox: Sandbox) -> Operation:
    """One event in the given state; returns the operation to replay. Whether the
    destination offers lookup is what the sandbox reports (read when asked)."""
    sandbox.capabilities(lookup=bool(state["lookup"]))
    source, _ = source_get_or_create(name="rule")
    event = event_ingest(source=source, key=f"rule-{n}", payload={"form": "contact"}).event
    target = event.operations.get(step=state["step"])
    if state["step"] == "assign_task":
        event.operations.filter(step="create_enquiry").update(**_as(state["earlier"]))
    Operation.objects.filter(pk=target.pk).update(
        **_as(state["status"]), recovery=state["recovery"]
    )
    now = timezone.now()
    if state["attempted"]:
        offset = timedelta(hours=-1 if state["lookup_after_attempt"] else 1)
        Attempt.objects.create(
            operation=target,
            number=1,
            claim_token="00000000-0000-0000-0000-000000000001",
            started_at=now + offset,
            finished_at=now + offset,
            outcome=Attempt.Outcome.AMBIGUOUS,
        )
    if state["last_lookup"] is not None:
        found = state["last_lookup"] == "found"
        audit_record(
            action="destination_lookup",
            system="test",
            operation=target,
            details={"found": found, "refs": ["rec_1"] if found else []},
        )
    return Operation.objects.select_related("event", "destination").get(pk=target.pk)


def _replay_refusal(operation: Operation, actor: User, *, checked: bool) -> str:
    try:
        operation_replay(
            operation_id=operation.pk, actor=actor, reason="rule", destination_checked=checked
        )
    except ReplayRefusedError as exc:
        return str(exc)
    return ""


@pytest.fixture
def replayer(db: None) -> User:
    user = User.objects.create_user("rule-replayer", is_staff=True)
    user.groups.add(Group.objects.get(name="Replay admins"))
    return User.objects.get(pk=user.pk)


def test_preview_and_replay_agree_on_every_refusal(replayer: User, sandbox: Sandbox) -> None:
    counter = iter(range(10**6))
    seen: set[bool] = set()

    @settings(
        max_examples=400,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(state=states)
    def agree(state: dict[str, object]) -> None:
        with transaction.atomic():
            operation = _arrange(state, next(counter), sandbox)
            checked = bool(state["checked"])
            preview = replay_preview(operation, destination_checked=checked)
            refused = _replay_refusal(operation, replayer, checked=checked)
            assert preview["refusal"] == refused
            assert preview["possible"] is (refused == "")
            seen.add(preview["possible"])
            transaction.set_rollback(True)

    agree()
    # Both answers occurred: the property was not vacuous.
    assert seen == {True, False}
