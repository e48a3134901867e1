"""A confirmation sent as a test to the Settings admin who is editing it."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User

from idempotency_core.audit.entries import audit_record
from idempotency_core.configuration.document import is_address
from idempotency_core.execution.budget import BudgetGate, BudgetSettingError, budget_for
from idempotency_core.execution.destinations import (
    AdapterUnavailableError,
    destination_for,
    email_adapter_for,
)
from idempotency_core.models import Source
from integrations.base import DestinationError
from integrations.http import request_gate

SYSTEM = "config test"


class ConfigTestRefusedError(Exception):
    """Nothing was sent: the reason is for the person who asked."""


def _fresh_key() -> str:
    """A fresh key in the shape of an operation key (`keys.operation_key`)."""
    return "opk_" + secrets.token_hex(24)


def config_test_send(*, source: Source, form: str, content: Mapping[str, Any], actor: User) -> str:
    """Sends `content` (a confirmation as rendering makes it: subject, text, html,
    reply_to) to `actor`'s own address through `source`'s mail destination; the
    destination's reference. Raises ConfigTestRefusedError when the account has no
    address or the form's confirmation is turned off, DestinationError when the mail
    service refused or could not be reached (audited too)."""
    to = (actor.email or "").strip()
    if not to or not is_address(to):
        raise ConfigTestRefusedError(
            "Your account has no email address to send the test to: add one to your "
            "user (Django admin, Users) first."
        )
    if not content.get("send", True):
        raise ConfigTestRefusedError(
            "This form's confirmation is turned off (Send: no): customers get none, so "
            "there is nothing to test. Turn it on to send a test."
        )
    destination = destination_for(source, "email")
    key = _fresh_key()
    details: dict[str, Any] = {
        "source": source.name,
        "form": form,
        "destination": destination.name,
        "key": key,
        "version": content.get("version"),
        "language": content.get("language") or "",
    }
    try:
        adapter = email_adapter_for(destination)
        budget = budget_for(destination, adapter.request_budget)
    except (TypeError, BudgetSettingError) as exc:
        raise AdapterUnavailableError(str(exc)) from exc
    gate = request_gate.set(BudgetGate(destination, budget))
    try:
        effect = adapter.send(
            operation_key=key,
            to=to,
            subject=str(content.get("subject") or ""),
            body=str(content.get("text") or ""),
            html=content.get("html") or None,
            reply_to=content.get("reply_to") or None,
        )
    except DestinationError as exc:
        _audited(actor, details, outcome="failed", error=exc.message[:500])
        raise
    finally:
        request_gate.reset(gate)
    _audited(actor, details, outcome="sent", destination_ref=effect.ref)
    return effect.ref


def _audited(actor: User, details: dict[str, Any], **outcome: str) -> None:
    audit_record(
        action="config_test_sent",
        actor=actor,
        system=SYSTEM,
        reason=f"A test of {details['source']}/{details['form']}'s confirmation, to "
        "their own address",
        details={**details, **outcome},
    )
