"""A reviewer's day: the next case, one-click decisions with preset reasons,
several cases settled from the queue, reopening, and contact details when needed.

Server-side, through the console's own URLs; the browser test
(test_reviewer_day_browser.py) counts the actions of the same tasks in Chromium. The
race between two reviewers pressing "Next case" at once runs in real threads on
PostgreSQL (test_next_case_race.py).
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import AuditEntry, Operation, ReviewCase
from idempotency_core.review.cases import case_close, case_take_ownership
from idempotency_core.review.lookup import operation_destination_lookup
from idempotency_core.review.merge import duplicate_merge_request
from idempotency_core.review.replay import operation_replay
from review_console.cases.presets import CLOSE
from tests.factories import duplicate_case, ingest, permanent_case
from tests.support.case_kinds import waiting_case
from tests.support.console_pages import interrupted_email
from tests.support.jargon import main_text

pytestmark = pytest.mark.django_db


def client_as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def page_text(client: Client, case: ReviewCase) -> str:
    html = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    return main_text(html)


# -- Next case ------------------------------------------------------------------------


def test_next_case_takes_the_oldest_open_case_nobody_owns_and_opens_it(users):
    rita, rex = users["reviewer"], users["replay_admin"]
    # Three causes: none is one of a group, which Next case would give instead
    # (test_cause_groups_browser.py).
    owned, oldest, younger = (
        waiting_case(ReviewCase.Kind.PERMANENT, f"next-{i}", {"http_status": status})
        for i, status in enumerate((400, 409, 422))
    )
    case_take_ownership(case_ids=[owned.pk], actor=rex)
    response = client_as(rita).post(reverse("console:case-next"))
    assert response.status_code == 302
    assert response["Location"] == reverse("console:case-detail", args=[oldest.pk])
    oldest.refresh_from_db()
    assert (oldest.owner, oldest.status) == (rita, "in_progress")
    entry = AuditEntry.objects.get(case=oldest, action="case_taken")
    assert entry.actor == rita and entry.details["next_case"] is True
    # The next press takes the next one; then nothing is left for anyone.
    client_as(rex).post(reverse("console:case-next"))
    younger.refresh_from_db()
    assert younger.owner == rex
    nothing = client_as(rita).post(reverse("console:case-next"), follow=True)
    assert "Nothing waits for a person" in nothing.content.decode()
    owned.refresh_from_db()
    assert owned.owner == rex  # never taken from the one who owns it


def test_the_dashboard_s_first_link_is_next_case(users):
    permanent_case("next-dash")
    html = client_as(users["reviewer"]).get(reverse("console:dashboard")).content.decode()
    main = html.split('<main id="main"', 1)[1]
    first = main.split("<form", 1)[1].split("</form>", 1)[0]
    assert f'action="{reverse("console:case-next")}"' in first and ">Next case</button>" in first
    assert "<a " not in main.split("<form", 1)[0]  # nothing to click before it
    assert "autofocus" not in html  # the search box no longer takes the focus


# -- one click, a preset reason, an optional note ------------------------------------


def test_closing_is_one_click_with_its_category_as_the_reason_and_a_note(users, sandbox):
    case = permanent_case("one-click-close")
    client = client_as(users["reviewer"])
    response = client.post(
        reverse("console:case-close", args=[case.pk]),
        {"preset": "spam_or_test", "note": "a test by the web agency"},
    )
    assert response.status_code == 302
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("closed", "spam_or_test")
    entry = AuditEntry.objects.get(case=case, action="case_closed")
    assert entry.reason == f"{CLOSE['spam_or_test'].reason}: a test by the web agency"
    assert Operation.objects.get(pk=case.operation_id).status == "cancelled"
    # The page it lands on says it is done, offers the next case and a way back.
    text = page_text(client, case)
    assert "Closed: spam or test." in text and "Next case" in text and "Reopen" in text


def test_an_unknown_preset_decides_nothing_and_asks_for_a_reason(users):
    case = permanent_case("bad-preset")
    response = client_as(users["reviewer"]).post(
        reverse("console:case-close", args=[case.pk]), {"preset": "because-i-say-so"}
    )
    assert response.status_code == 200 and 'name="reason"' in response.content.decode()
    case.refresh_from_db()
    assert case.status == "open"


def test_what_cannot_be_undone_asks_for_a_confirmation_first(users):
    case = permanent_case("confirm-replay")
    client = client_as(users["replay_admin"])
    ask = client.post(reverse("console:case-replay", args=[case.pk]), {"preset": "cause_fixed"})
    html = ask.content.decode()
    assert ask.status_code == 200
    assert 'value="The cause is fixed; trying again"' in html  # the reason filled in
    assert Operation.objects.get(pk=case.operation_id).status == "needs_review"  # nothing yet
    client.post(
        reverse("console:case-replay", args=[case.pk]),
        {"confirm": "yes", "reason": "The cause is fixed; trying again"},
    )
    assert Operation.objects.get(pk=case.operation_id).status == "retry_scheduled"


def test_an_email_case_is_settled_on_the_customer_s_word_in_one_click(users, sandbox):
    case = interrupted_email(sandbox, "one-click-mail")
    client = client_as(users["reviewer"])
    client.post(reverse("console:case-email", args=[case.pk]), {"preset": "customer_has_it"})
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "customer_confirmed_receipt")
    # Sending again cannot be undone: it asks first.
    other = interrupted_email(sandbox, "one-click-mail-2")
    ask = client.post(reverse("console:case-email", args=[other.pk]), {"preset": "not_received"})
    assert ask.status_code == 200 and "The customer did not receive it" in ask.content.decode()
    other.refresh_from_db()
    assert other.status == "open"


def test_not_a_duplicate_is_one_click(users, sandbox):
    case = duplicate_case(sandbox, key_a="nd1-a", key_b="nd1-b")
    client_as(users["reviewer"]).post(
        reverse("console:case-not-duplicate", args=[case.pk]), {"preset": "separate_requests"}
    )
    case.refresh_from_db()
    assert (case.status, case.resolution_code) == ("resolved", "not_duplicate")


# -- several from the queue -------------------------------------------------------------


def test_several_cases_are_closed_from_the_queue_each_with_its_own_audit_entry(users):
    cases = [permanent_case(f"many-{i}") for i in range(4)]
    rex = users["replay_admin"]
    case_close(case_id=cases[3].pk, actor=rex, resolution_code="other", reason="done")
    response = client_as(users["reviewer"]).post(
        reverse("console:cases-settle"),
        {"case": [c.pk for c in cases], "preset": "handled_elsewhere", "next": "/console/cases/"},
        follow=True,
    )
    html = response.content.decode()
    assert "Closed 3 cases." in html and f"Case {cases[3].pk} left as it was" in html
    for case in cases[:3]:
        case.refresh_from_db()
        assert (case.status, case.resolution_code) == ("closed", "handled_elsewhere")
        assert AuditEntry.objects.filter(case=case, action="case_closed").count() == 1
    assert AuditEntry.objects.filter(case=cases[3], action="case_closed").count() == 1  # not 2


def test_several_duplicates_are_kept_apart_from_the_queue(users, sandbox):
    first = duplicate_case(sandbox, key_a="mnd-a", key_b="mnd-b")
    second = duplicate_case(sandbox, key_a="mnd-c", key_b="mnd-d", evidence="records")
    refused = permanent_case("mnd-perm")  # not a duplicate: the guard refuses it
    client_as(users["reviewer"]).post(
        reverse("console:cases-settle"),
        {"case": [first.pk, second.pk, refused.pk], "preset": "separate_requests"},
    )
    for case in (first, second):
        case.refresh_from_db()
        assert case.resolution_code == "not_duplicate"
    refused.refresh_from_db()
    assert refused.status == "open"


def test_settle_several_with_nothing_ticked_decides_nothing(users):
    permanent_case("many-none")
    response = client_as(users["reviewer"]).post(
        reverse("console:cases-settle"), {"preset": "spam_or_test"}, follow=True
    )
    assert "Tick at least one case" in response.content.decode()
    assert not AuditEntry.objects.filter(action="case_closed").exists()


# -- reopen -------------------------------------------------------------------------------


def test_a_closed_case_reopens_with_its_steps_waiting_again(users):
    case = permanent_case("reopen-closed")
    rita = users["reviewer"]
    case_close(case_id=case.pk, actor=rita, resolution_code="spam_or_test", reason="looked fake")
    steps = Operation.objects.filter(event_id=case.event_id).order_by("position")
    assert set(steps.values_list("status", flat=True)) == {"cancelled"}
    client = client_as(rita)
    response = client.post(
        reverse("console:case-reopen", args=[case.pk]),
        {"preset": "decided_too_soon", "note": "she phoned: it is real"},
    )
    assert response.status_code == 302
    case.refresh_from_db()
    assert (case.status, case.owner, case.resolution_code) == ("in_progress", rita, "")
    first, *later = steps
    assert (first.status, first.held_by_id) == ("needs_review", None)
    assert all((s.status, s.held_by_id) == ("needs_review", first.pk) for s in later)
    entry = AuditEntry.objects.get(case=case, action="case_reopened")
    assert entry.reason == "Decided too soon: it needs another look: she phoned: it is real"
    assert entry.details["previous_status"] == "closed"
    assert entry.details["restored_operations"] == [s.pk for s in steps]
    # The reopened case can be decided again, as any open case.
    users["reviewer"].user_permissions.add(Permission.objects.get(codename="replay_operation"))
    assert (
        "Try again…" in client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    )


def test_a_merged_duplicate_cannot_be_reopened_and_the_page_says_why(users, sandbox):
    case = duplicate_case(sandbox, key_a="rm-a", key_b="rm-b")
    rita = users["reviewer"]
    survivor, duplicate = case.record_ids
    duplicate_merge_request(
        case_id=case.pk, survivor_ref=survivor, duplicate_ref=duplicate, actor=rita, reason="same"
    )
    ReviewCase.objects.filter(pk=case.pk).update(status="resolved", resolution_code="merged")
    client = client_as(rita)
    text = page_text(client, case)
    assert "It cannot be reopened: A merge in the CRM cannot be undone" in text
    response = client.post(
        reverse("console:case-reopen", args=[case.pk]), {"preset": "decided_too_soon"}
    )
    assert response.status_code == 200
    assert "A merge in the CRM cannot be undone" in response.content.decode()
    case.refresh_from_db()
    assert case.status == "resolved"
    assert not AuditEntry.objects.filter(case=case, action="case_reopened").exists()


def test_a_resolved_duplicate_reopens(users, sandbox):
    case = duplicate_case(sandbox, key_a="rn-a", key_b="rn-b")
    client = client_as(users["reviewer"])
    client.post(
        reverse("console:case-not-duplicate", args=[case.pk]), {"preset": "separate_requests"}
    )
    client.post(reverse("console:case-reopen", args=[case.pk]), {"preset": "decided_too_soon"})
    case.refresh_from_db()
    assert case.status == "in_progress"
    assert "Merge into one" in page_text(client, case)


def test_reopening_is_refused_while_another_case_is_open_about_the_same_thing(users):
    case = permanent_case("reopen-twin")
    rita = users["reviewer"]
    case_close(case_id=case.pk, actor=rita, resolution_code="other", reason="x")
    ReviewCase.objects.create(
        kind=case.kind, subject=case.subject, summary="again", event=case.event, operation=None
    )
    response = client_as(rita).post(
        reverse("console:case-reopen", args=[case.pk]), {"preset": "decided_too_soon"}
    )
    assert "is open about the same thing" in response.content.decode()
    case.refresh_from_db()
    assert case.status == "closed"


def test_a_failed_replay_puts_its_case_back_in_the_queue_saying_so(users, sandbox):
    case = permanent_case("requeue")
    rex = users["replay_admin"]
    operation_replay(operation_id=case.operation_id, actor=rex, reason="CRM fixed")
    case.refresh_from_db()
    assert (case.status, case.owner) == ("in_progress", rex)
    sandbox.fault("create_record", "http_400")
    assert operation_execute(operation_id=case.operation_id) == "permanent"
    case.refresh_from_db()
    assert (case.status, case.owner_id) == ("open", None)
    entry = AuditEntry.objects.get(case=case, action="replay_failed")
    assert entry.details["previous_owner"] == rex.username and entry.actor is None
    text = page_text(client_as(users["reviewer"]), case)
    assert "It was tried again, and that failed too, so it is back in the queue." in text
    # Anyone may take it now, with "Next case".
    client_as(users["reviewer"]).post(reverse("console:case-next"))
    case.refresh_from_db()
    assert case.owner == users["reviewer"]


def test_a_replay_that_fails_another_way_replaces_its_case(users, sandbox, ambiguous_case):
    case = ambiguous_case("supersede", mode="fail_before_commit")
    rex = users["replay_admin"]
    operation_destination_lookup(operation_id=case.operation_id, actor=rex, case=case)
    operation_replay(
        operation_id=case.operation_id, actor=rex, reason="absent", destination_checked=True
    )
    sandbox.fault("create_record", "http_400")
    assert operation_execute(operation_id=case.operation_id) == "permanent"
    case.refresh_from_db()
    newer = ReviewCase.objects.get(operation_id=case.operation_id, status="open")
    assert newer.kind == "permanent_failure" and newer.pk != case.pk
    assert (case.status, case.resolution_code) == ("closed", "superseded")
    assert AuditEntry.objects.get(case=case, action="case_superseded").details == {
        "superseded_by": newer.pk
    }


# -- contact details when needed -----------------------------------------------------------


def test_a_reviewer_reveals_one_submission_s_contact_with_a_reason(users, sandbox):
    case = interrupted_email(sandbox, "reveal-mail")
    other = permanent_case("reveal-other")
    rita, rex = users["reviewer"], users["replay_admin"]
    client = client_as(rita)
    before = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert "ada@example.com" not in before and "Show their email address and phone" in before
    response = client.post(
        reverse("console:case-reveal", args=[case.pk]),
        {"preset": "contact_customer", "note": "to ask about the email"},
    )
    assert response.status_code == 302
    after = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert 'href="mailto:ada@example.com' in after and "Ada Lovelace" in after
    entry = AuditEntry.objects.get(action="contact_revealed")
    assert (entry.actor, entry.case_id, entry.event_id) == (rita, case.pk, case.event_id)
    assert entry.reason == "To contact the customer about this case: to ask about the email"
    assert "ada@example.com" not in str(entry.details) + entry.reason
    # That submission only, that reviewer only.
    assert "ada@example.com" not in page_text(client, other)
    assert "ada@example.com" not in page_text(client_as(rex), case)
    # Shown to the administrators on their dashboard, not to other reviewers.
    admin = client_as(rex).get(reverse("console:dashboard")).content.decode()
    assert "Contact details revealed" in admin and "to ask about the email" in admin
    assert (
        "Contact details revealed" not in client.get(reverse("console:dashboard")).content.decode()
    )


def test_a_masked_reviewer_finds_by_name_only_what_was_revealed_to_them(users, sandbox):
    grace = ingest("name-1", contact={"name": "Grace Hopper", "email": "grace@example.com"})
    ingest("name-2", contact={"name": "Grace Kelly", "email": "kelly@example.com"})
    case = permanent_case("name-case")
    ReviewCase.objects.filter(pk=case.pk).update(event=grace)
    client = client_as(users["reviewer"])
    refused = client.get(reverse("console:search"), {"q": "Grace"}).content.decode()
    assert "Grace Kelly" not in refused and "Grace Hopper" not in refused
    client.post(reverse("console:case-reveal", args=[case.pk]), {"preset": "contact_customer"})
    found = client.get(reverse("console:search"), {"q": "grace"})
    # Only the revealed submission matches: exactly one, so its page opens.
    assert found.status_code == 302
    assert found["Location"] == reverse("console:submission-detail", args=[grace.pk])
