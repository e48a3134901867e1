"""The safe action first: on an ambiguous case the lookup and
"resolve with the record found" lead, and resolving with the record the lookup
found is one button (its reason preset, a note optional), against the real
sandbox CRM.

The reference a resolution uses is the one the lookup stored in the audit trail,
read again on the server: anything posted alongside is ignored.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from idempotency_core.execution.destinations import LiveSandboxCrm
from idempotency_core.models import AuditEntry, Operation, ReviewCase
from idempotency_core.review.replay import PlannedStep, StepState, replay_plan

pytestmark = pytest.mark.django_db

BUTTON = re.compile(r'<button class="btn([^"]*)"[^>]*>([^<]*)</button>')


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _buttons(html: str) -> list[tuple[bool, str]]:
    """The case page's action buttons in page order: (primary?, text)."""
    actions = html.split('<div class="actions main-actions"', 1)[1].split("</div>", 1)[0]
    return [("btn-primary" in cls, text.strip()) for cls, text in BUTTON.findall(actions)]


def test_the_lookup_leads_then_one_click_resolves_with_the_record_it_found(
    users, ambiguous_case, sandbox
):
    case = ambiguous_case("safe-found", mode="drop_response_after_commit")
    client = _client(users["replay_admin"])
    page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    buttons = _buttons(page)
    assert buttons[0] == (True, "Look it up in the CRM")
    assert (False, "Try again…") in buttons  # a replay is the second choice
    assert [text for primary, text in buttons if primary] == ["Look it up in the CRM"]

    client.post(reverse("console:case-lookup", args=[case.pk]))
    lookup = AuditEntry.objects.get(action="destination_lookup", case=case)
    (ref,) = lookup.details["refs"]
    page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert _buttons(page)[0] == (True, "It is there: resolve")
    assert f'name="lookup" value="{lookup.pk}"' in page

    # Without a preset, the confirmation page asks for the reason (never autofocused:
    # on a phone that opens the keyboard; its button has the focus).
    confirm = client.post(reverse("console:case-resolve-found", args=[case.pk]))
    html = confirm.content.decode()
    assert 'name="reason"' in html
    assert not re.search(r'<(?:input|textarea)[^>]*name="reason"[^>]*autofocus', html)
    assert f'name="lookup" value="{lookup.pk}"' in html
    assert 'name="destination_ref"' not in html  # nothing to type but the reason

    done = client.post(
        reverse("console:case-resolve-found", args=[case.pk]),
        # A posted reference is not what the resolution uses: the lookup's is.
        {
            "confirm": "yes",
            "reason": "Lookup found it",
            "lookup": lookup.pk,
            "destination_ref": "rec_9",
        },
    )
    assert done.status_code == 302
    case.refresh_from_db()
    operation = Operation.objects.get(pk=case.operation_id)
    assert (case.status, case.resolution_code) == ("resolved", "verified_in_destination")
    assert (operation.status, operation.destination_ref) == ("succeeded", ref)
    entry = AuditEntry.objects.get(case=case, action="case_resolved")
    assert entry.details["destination_ref"] == ref
    assert entry.details["from_lookup"] == lookup.pk
    assert entry.details["verification"] == "external_ref_matches"
    assert (entry.actor_label, entry.reason) == ("user:rex", "Lookup found it")
    assert sandbox.stats()["records"] == 1


@pytest.mark.parametrize("looked", [True, False])
def test_resolving_with_the_record_found_is_refused_when_the_lookup_found_nothing(
    users, ambiguous_case, sandbox, looked
):
    case = ambiguous_case(f"safe-absent-{looked}", mode="fail_before_commit")
    client = _client(users["reviewer"])
    if looked:
        client.post(reverse("console:case-lookup", args=[case.pk]))
        assert AuditEntry.objects.get(action="destination_lookup").details["found"] is False
    page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert "Resolve with record" not in page
    answer = client.post(
        reverse("console:case-resolve-found", args=[case.pk]),
        {"confirm": "yes", "reason": "sure", "lookup": "1", "destination_ref": "rec_1"},
        follow=True,
    )
    expected = "did not find the record" if looked else "No lookup yet"
    assert expected in answer.content.decode()
    case.refresh_from_db()
    assert case.status == ReviewCase.Status.OPEN
    assert not AuditEntry.objects.filter(action="case_resolved").exists()
    assert Operation.objects.get(pk=case.operation_id).status == "needs_review"


def test_a_newer_lookup_than_the_one_confirmed_is_shown_before_resolving(
    users, ambiguous_case, sandbox
):
    case = ambiguous_case("safe-newer", mode="drop_response_after_commit")
    client = _client(users["reviewer"])
    client.post(reverse("console:case-lookup", args=[case.pk]))
    seen = AuditEntry.objects.get(action="destination_lookup").pk
    client.post(reverse("console:case-lookup", args=[case.pk]))
    answer = client.post(
        reverse("console:case-resolve-found", args=[case.pk]),
        {"confirm": "yes", "reason": "found", "lookup": seen},
    )
    assert answer.status_code == 200 and "A newer lookup came in" in answer.content.decode()
    case.refresh_from_db()
    assert case.status == ReviewCase.Status.OPEN


def _state(pk: int, position: int, status: str, **kw) -> StepState:
    return StepState(
        pk=pk,
        step=f"s{pk}",
        key=f"k{pk}",
        position=position,
        status=status,
        held_by_id=kw.get("held_by"),
        due=kw.get("due", False),
        destination_ref=kw.get("ref", ""),
    )


def _effects(plan: list[PlannedStep]) -> list[tuple[int, str]]:
    return [(p.state.pk, p.effect) for p in plan]


def test_the_replay_plan_runs_the_unbroken_run_of_waiting_steps_after_the_replayed_one():
    replayed = _state(2, 1, "needs_review")
    steps = [
        _state(1, 0, "succeeded", ref="rec_1"),
        replayed,
        _state(3, 2, "needs_review", held_by=2),
        _state(4, 3, "pending"),
        _state(5, 5, "pending"),  # a gap in positions: nothing releases it
    ]
    assert _effects(replay_plan(replayed, steps)) == [
        (1, "done"),
        (2, "run"),
        (3, "run"),
        (4, "run"),
        (5, "not_run"),
    ]
    # A step held by another case, or already due, stops the run; a done one is skipped.
    steps = [
        replayed,
        _state(3, 2, "needs_review", held_by=9),
        _state(4, 3, "pending"),
    ]
    assert _effects(replay_plan(replayed, steps)) == [(2, "run"), (3, "not_run"), (4, "not_run")]
    steps = [replayed, _state(3, 2, "succeeded"), _state(4, 3, "pending", due=True)]
    assert _effects(replay_plan(replayed, steps)) == [(2, "run"), (3, "done"), (4, "not_run")]


def test_a_lookup_by_htmx_that_found_the_record_offers_resolving_with_it_in_place(
    users, ambiguous_case, sandbox
):
    case = ambiguous_case("safe-htmx", mode="drop_response_after_commit")
    client = _client(users["reviewer"])
    answer = client.post(reverse("console:case-lookup", args=[case.pk]), HTTP_HX_REQUEST="true")
    html = answer.content.decode()
    (ref,) = AuditEntry.objects.get(action="destination_lookup").details["refs"]
    # The decision in place: one button, its reason preset, posted with the lookup it
    # answers; the record's number is under Technical details.
    assert "It is there: resolve</button>" in html and ref in html
    assert reverse("console:case-resolve-found", args=[case.pk]) in html
    assert 'name="preset" value="found"' in html and "autofocus" not in html
    lookup = AuditEntry.objects.get(action="destination_lookup")
    assert f'name="lookup" value="{lookup.pk}"' in html
    # One click: the preset is the reason, the optional note is added to it.
    done = client.post(
        reverse("console:case-resolve-found", args=[case.pk]),
        {"preset": "found", "lookup": lookup.pk, "note": "she confirmed by phone"},
    )
    assert done.status_code == 302
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "verified_in_destination")
    entry = AuditEntry.objects.get(case=case, action="case_resolved")
    assert entry.reason == "Found in the CRM by the lookup, checked again: she confirmed by phone"
    assert entry.details["destination_ref"] == ref


def test_the_case_page_asks_the_sandbox_for_its_capabilities_once(
    users, ambiguous_case, sandbox, monkeypatch
):
    """The page's replay preview and its lookup offer share one read of what the
    destination offers: for the sandbox each read is a request (`/_sandbox/capabilities`),
    and a slow sandbox would hold the page for each."""
    case = ambiguous_case("one-read", mode="drop_response_after_commit")
    reads = []
    report = LiveSandboxCrm._report

    def counted(self, seconds):
        reads.append(seconds)
        return report(self, seconds)

    monkeypatch.setattr(LiveSandboxCrm, "_report", counted)
    page = _client(users["replay_admin"]).get(reverse("console:case-detail", args=[case.pk]))
    assert page.status_code == 200
    assert "Look it up in the CRM" in page.content.decode()  # the lookup is offered
    assert len(reads) == 1
