"""The confirmation limit counts a mailbox, not a spelling of it: case, a `+tag`, an
internationalised domain written either way and, for Gmail (which ignores them), dots
all reach one inbox, so they share its three a day."""

from __future__ import annotations

import pytest

from idempotency_core.execution.confirmations import AllowanceAsk, mailbox_of
from idempotency_core.execution.engine import operation_execute
from tests.factories import ingest, op

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("unhurried_chain")]


@pytest.mark.parametrize(
    ("written", "mailbox"),
    [
        ("Victim+1@Example.com", "victim@example.com"),
        ("victim+a+b@example.com", "victim@example.com"),
        ("victim@bücher.example", "victim@xn--bcher-kva.example"),
        ("victim@XN--BCHER-KVA.example", "victim@xn--bcher-kva.example"),
        ("V.i.c.t.i.m+x@googlemail.com", "victim@gmail.com"),
        ("vic.tim@gmail.com", "victim@gmail.com"),
        ("vic.tim@example.com", "vic.tim@example.com"),
    ],
)
def test_each_spelling_names_its_mailbox(written: str, mailbox: str) -> None:
    assert mailbox_of(written) == mailbox
    assert AllowanceAsk.of(written).digest == AllowanceAsk.of(mailbox).digest


def test_plus_addressing_does_not_get_past_three_a_day(sandbox, settings) -> None:
    settings.ONEFOLD_CONFIRMATIONS_PER_RECIPIENT_PER_DAY = 3
    addresses = [f"victim+{n}@example.com" for n in range(1, 6)]
    for n, email in enumerate(addresses):
        event = ingest(f"plus-{n}", contact={"name": "Vic", "email": email}, message=f"m {n}")
        for operation in event.operations.order_by("position"):
            operation_execute(operation_id=operation.pk)
        held = op(event, "send_confirmation").status == "needs_review"
        assert held == (n >= 3), (n, email)
    assert sandbox.stats()["messages"] == 3
