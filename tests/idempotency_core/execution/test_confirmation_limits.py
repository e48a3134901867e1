"""Confirmations are limited per recipient address and per source, in any 24 hours.

A contact form's autoresponder is a known spam relay: whoever posts the form makes
Onefold write to any address. Over the limit a confirmation is held (its step waits
in review with a `confirmation_held` case), never sent. Against the sandbox's SMTP
sink over loopback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, User
from django.utils import timezone

from idempotency_core import tasks
from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.ingest import event_ingest
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import ConfirmationAllowance, Event, Operation, ReviewCase
from idempotency_core.review.cases import case_close
from idempotency_core.review.email_cases import email_may_have_gone
from idempotency_core.review.replay import operation_replay
from tests.factories import ingest, op, submission

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("unhurried_chain")]


@pytest.fixture(autouse=True)
def product_limits(settings) -> None:
    """The product's defaults (config/test_settings.py lifts them for the rest of the
    suite, whose factories write to one address all day)."""
    settings.ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY = 3
    settings.ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY = 500


def test_the_defaults_are_three_a_day_to_an_address_and_500_from_a_source():
    code = (
        "import config.settings as s; "
        "print(s.ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY, "
        "s.ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY)"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code],
        cwd=django_settings.BASE_DIR,
        env={"PATH": os.environ["PATH"]},  # none of the test settings' environment
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert shown.stdout.split() == ["3", "500"]


def submitted(key: str, email: str, *, name: str = "Ada Lovelace") -> Event:
    """A submission to `email`, each with its own message (no suspected duplicates)."""
    return ingest(key, contact={"name": name, "email": email}, message=f"Enquiry {key}.")


Run = Callable[[Event], list[str | None]]


@pytest.fixture(params=["each alone", "chained"])
def run(request) -> Run:
    """Runs an event's steps: each step's task alone (the confirmation decided in a
    statement of its own), or a worker's chain (decided by the statement that records
    the task's success and claims the confirmation). Answers each step's outcome."""
    if request.param == "each alone":
        return lambda event: [
            operation_execute(operation_id=o.pk) for o in event.operations.order_by("position")
        ]

    def chained(event: Event) -> list[str | None]:
        tasks.operation_run(op(event, "create_enquiry").pk)
        return [
            o.attempts.order_by("-number").values_list("outcome", flat=True).first()
            for o in event.operations.order_by("position")
        ]

    return chained


def test_a_fourth_confirmation_to_one_address_in_a_day_is_not_sent(sandbox, run):
    # One address, written four ways: the limit compares addresses normalised.
    addresses = ["ada@example.com", "Ada@Example.com", "ADA@EXAMPLE.COM", "ada@example.COM"]
    events = [submitted(f"limit-{n}", email) for n, email in enumerate(addresses)]

    outcomes = [run(event) for event in events]

    assert outcomes[:3] == [["succeeded"] * 3] * 3
    assert outcomes[3] == ["succeeded", "succeeded", "permanent"]
    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (4, 4, 3)
    held = op(events[3], "send_confirmation")
    assert held.status == "needs_review"
    (case,) = ReviewCase.objects.filter(operation=held)
    assert case.kind == "confirmation_held"


@pytest.fixture
def admin_user() -> User:
    user = User.objects.create_user("limit-admin", is_staff=True)
    user.groups.add(Group.objects.get(name="Replay admins"))
    return User.objects.get(pk=user.pk)


def four_to_one_address(prefix: str, run: Run) -> list[Event]:
    events = [submitted(f"{prefix}-{n}", "grace@example.com") for n in range(4)]
    for event in events:
        run(event)
    return events


def test_the_held_confirmation_case_says_why_and_offers_a_plain_replay(sandbox, run):
    held = op(four_to_one_address("why", run)[3], "send_confirmation")

    case = ReviewCase.objects.get(operation=held)
    assert "3 confirmations went to this address in the last 24 hours" in case.summary
    assert "Nothing reached the mail service" in case.summary
    (attempt,) = held.attempts.all()
    assert (attempt.outcome, attempt.error_class) == ("permanent", "ConfirmationHeldError")
    # Certainly not sent: not one of the "did the customer get it?" email cases.
    assert not email_may_have_gone(case)


def test_a_replay_sends_the_held_confirmation_and_settles_its_case(sandbox, admin_user, run):
    held = op(four_to_one_address("replayed", run)[3], "send_confirmation")

    operation_replay(operation_id=held.pk, actor=admin_user, reason="a real customer")
    assert operation_execute(operation_id=held.pk) == "succeeded"

    assert sandbox.stats()["messages"] == 4
    case = ReviewCase.objects.get(operation=held)
    assert case.status == "resolved"
    allowance = ConfirmationAllowance.objects.get(operation=held)
    assert allowance.by_person
    # The person's send counts: the next one to the address is held too.
    fifth = submitted("replayed-5", "grace@example.com")
    assert run(fifth)[-1] == "permanent"


def test_closing_the_case_means_it_is_never_sent(sandbox, admin_user, run):
    held = op(four_to_one_address("closed", run)[3], "send_confirmation")
    case = ReviewCase.objects.get(operation=held)

    case_close(case_id=case.pk, actor=admin_user, resolution_code="spam_or_test", reason="spam")

    held.refresh_from_db()
    assert held.status == "cancelled"
    assert sandbox.stats()["messages"] == 3


def test_a_retried_send_is_counted_once(sandbox, run):
    sandbox.fault("send_email", "fail_before_commit")  # SMTP 451: try later, once
    first = submitted("retry-0", "hedy@example.com")
    assert run(first) == ["succeeded", "succeeded", "retryable"]
    email = op(first, "send_confirmation")
    Operation.objects.filter(pk=email.pk).update(next_attempt_at=timezone.now())
    assert operation_execute(operation_id=email.pk) == "succeeded"

    # One allowance for the two attempts: two more fit under the limit of 3.
    assert ConfirmationAllowance.objects.filter(operation=email).count() == 1
    others = [submitted(f"retry-{n}", "hedy@example.com") for n in (1, 2, 3)]
    assert [run(event)[-1] for event in others] == ["succeeded", "succeeded", "permanent"]


def test_the_limit_is_per_address(sandbox, run):
    four_to_one_address("per-address", run)
    other = submitted("per-address-other", "katherine@example.com")
    assert run(other)[-1] == "succeeded"


def test_the_limit_counts_the_last_24_hours_only(sandbox, run):
    events = four_to_one_address("window", run)
    ConfirmationAllowance.objects.update(granted_at=timezone.now() - timedelta(hours=25))

    later = submitted("window-later", "grace@example.com")
    assert run(later)[-1] == "succeeded"
    assert op(events[3], "send_confirmation").status == "needs_review"  # stays held


def test_a_source_over_its_daily_limit_holds_the_next_confirmation(sandbox, settings, run):
    settings.ONEFOLD_CONFIRMATIONS_PER_SOURCE_PER_DAY = 2
    events = [submitted(f"source-{n}", f"person{n}@example.com") for n in range(3)]

    outcomes = [run(event)[-1] for event in events]

    assert outcomes == ["succeeded", "succeeded", "permanent"]
    case = ReviewCase.objects.get(operation=op(events[2], "send_confirmation"))
    assert case.kind == "confirmation_held"
    assert "this source sent 2 confirmations in the last 24 hours" in case.summary
    # Another source is not held by this one's limit.
    other, _ = source_get_or_create(name="other-site")
    elsewhere = event_ingest(
        source=other,
        key="elsewhere",
        payload=submission(contact={"name": "Ada", "email": "ada@example.org"}),
    ).event
    assert run(elsewhere)[-1] == "succeeded"


def test_a_spammers_greeting_reaches_the_mailbox_as_hello(sandbox, run):
    spam = "Claim your prize at https://evil.example/win"
    events = [
        submitted("greet-spam", "victim@example.com", name=spam),
        submitted("greet-name", "ada@example.com", name="Ada Lovelace-Byron"),
    ]
    for event in events:
        assert run(event) == ["succeeded"] * 3

    bodies = {m["rcpt_to"][0]: m["body"] for m in sandbox.messages()}
    assert bodies["victim@example.com"].startswith("Hello,\n")
    assert "evil" not in bodies["victim@example.com"]
    assert "prize" not in bodies["victim@example.com"]
    assert bodies["ada@example.com"].startswith("Hello Ada Lovelace-Byron,\n")
