"""Routing on the console: a routed case first in its people's Next case, the dashboard
counting what Next case would give, Hand on, each person's choice of notifications, the
review block's Settings page, and a notification that could not be sent shown on the
dashboard."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from idempotency_core import tasks
from idempotency_core.configuration.versions import config_apply, config_current
from idempotency_core.execution.engine import operation_execute
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import (
    AuditEntry,
    CaseRoute,
    Notification,
    NotificationChoice,
    ReviewCase,
)
from idempotency_core.review.cases import case_take_ownership
from tests.factories import ingest, make_user, op, permanent_case
from tests.support.case_kinds import waiting_case

pytestmark = pytest.mark.django_db


def client_as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def with_address(user, address: str):
    user.email = address
    user.save(update_fields=["email"])
    return user


def review(**block: object) -> None:
    source_get_or_create(name="website")
    config_apply(document={"review": block}, reason="who receives a case")


def test_a_case_routed_to_my_group_comes_first_in_my_next_case(users):
    Group.objects.create(name="Sales desk")
    sam = make_user("sam", groups=("Reviewers", "Sales desk"))
    older = permanent_case("first-older")
    review(routes=[{"match": {"kind": "permanent_failure"}, "to": "Sales desk"}])
    # Another cause than the older case's: Next case gives it alone, not their group.
    routed = waiting_case(ReviewCase.Kind.PERMANENT, "first-routed", {"http_status": 422})
    tasks.case_notify(routed.pk)
    assert CaseRoute.objects.get(case=routed).target == "Sales desk"
    # rita is not in Sales desk: she gets the oldest, as before.
    client_as(users["reviewer"]).post(reverse("console:case-next"))
    response = client_as(sam).post(reverse("console:case-next"))
    assert response["Location"] == reverse("console:case-detail", args=[routed.pk])
    older.refresh_from_db()
    assert older.owner == users["reviewer"]


def refused(sandbox, key: str) -> ReviewCase:
    event = ingest(key, contact_from_key=True, message=f"Message {key}")
    sandbox.fault("create_record", "http_400")
    assert operation_execute(operation_id=op(event, "create_enquiry").pk) == "permanent"
    return ReviewCase.objects.get(event=event, kind="permanent_failure")


def test_the_dashboard_counts_what_next_case_would_give(users, sandbox):
    first = [refused(sandbox, f"held-{i}") for i in range(2)]
    rita = client_as(users["reviewer"])
    html = rita.get(reverse("console:case-list")).content.decode()
    token = unquote(html.split('href="?cause=', 1)[1].split('"', 1)[0])
    rita.post(
        reverse("console:cause-settle"),
        {
            "cause": token,
            "seen_until": timezone.now().isoformat(),
            "preset": "spam_or_test",
            "hold_hours": "4",
        },
    )
    assert {c.status for c in ReviewCase.objects.filter(pk__in=[c.pk for c in first])} == {"closed"}
    refused(sandbox, "held-new")  # kept in its held group: Next case will not give it
    dashboard = rita.get(reverse("console:dashboard")).content.decode()
    assert "No case waits for someone right now." in dashboard
    response = rita.post(reverse("console:case-next"), follow=True)
    assert "Nothing waits for a person" in response.content.decode()
    permanent_case("held-unrelated")
    dashboard = rita.get(reverse("console:dashboard")).content.decode()
    assert "1 case waits for someone" in dashboard


def test_hand_on_releases_my_case_to_the_group_that_decides_it_notified_and_first(users):
    rita, rex = users["reviewer"], with_address(users["replay_admin"], "rex@staff.example")
    other_admin = make_user("ray", groups=("Replay admins",))
    older = permanent_case("hand-older")
    case = waiting_case(ReviewCase.Kind.PERMANENT, "hand-1", {"http_status": 422})
    case_take_ownership(case_ids=[case.pk], actor=rita)
    client = client_as(rita)
    page = client.get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert "Hand on to Replay admins" in page
    assert client.get(reverse("console:case-hand-on", args=[case.pk])).status_code == 405
    confirm = client.post(reverse("console:case-hand-on", args=[case.pk]))
    assert confirm.status_code == 200 and b"hand it on to Replay admins" in confirm.content
    # One click, as the page's button posts it, its reason preset and the note added.
    done = client.post(
        reverse("console:case-hand-on", args=[case.pk]),
        {"preset": "cannot_decide", "note": "A replay is needed; I may not replay."},
    )
    assert done.status_code == 302
    case.refresh_from_db()
    assert (case.owner, case.status) == (None, "open")
    assert CaseRoute.objects.get(case=case).target == "Replay admins"
    entry = AuditEntry.objects.get(action="case_handed_on")
    assert entry.actor == rita and entry.details["to"] == "Replay admins"
    assert entry.reason.endswith(
        "handed on to the group that can: A replay is needed; I may not replay."
    )
    tasks.case_notify(case.pk)  # the task queued with the hand on
    assert [m.to for m in mail.outbox] == [["rex@staff.example"]]
    assert "handed on" in mail.outbox[0].subject
    assert not Notification.objects.filter(user=other_admin, status="sent").exists()
    page = client_as(rex).get(reverse("console:case-detail", args=[case.pk])).content.decode()
    assert "Sent to</dt><dd>Replay admins" in page and "rex (handed on: sent)" in page
    response = client_as(rex).post(reverse("console:case-next"))
    assert response["Location"] == reverse("console:case-detail", args=[case.pk])
    older.refresh_from_db()
    assert older.owner is None


def test_a_settings_admin_s_next_case_is_the_oldest_handed_on_to_their_group(users):
    """Settings admins open cases and fix their cause, but take none: their dashboard's
    *Next case* is a link to the oldest open case handed on (or routed) to them, never
    to one of the Reviewers'."""
    rita, sia = users["reviewer"], make_user("sia", groups=("Settings admins",))
    dashboard = reverse("console:dashboard")
    permanent_case("sia-not-theirs")
    assert "Next case" not in client_as(sia).get(dashboard).content.decode()
    handed = []
    for key in ("sia-1", "sia-2"):
        case = waiting_case(ReviewCase.Kind.UNREADABLE, key, {})
        case_take_ownership(case_ids=[case.pk], actor=rita)
        client_as(rita).post(
            reverse("console:case-hand-on", args=[case.pk]), {"preset": "cannot_decide"}
        )
        assert CaseRoute.objects.get(case=case).target == "Settings admins"
        handed.append(case)
    page = client_as(sia).get(dashboard).content.decode()
    first = reverse("console:case-detail", args=[handed[0].pk])
    assert f'href="{first}" data-main-decision>Next case</a>' in page
    assert "2 cases sent to you or your group wait" in page


def test_only_whoever_holds_a_case_may_hand_it_on(users):
    case = permanent_case("hand-2")
    case_take_ownership(case_ids=[case.pk], actor=users["replay_admin"])
    response = client_as(users["reviewer"]).post(
        reverse("console:case-hand-on", args=[case.pk]),
        {"confirm": "yes", "reason": "not mine"},
    )
    assert "Only whoever holds a case can hand it on" in response.content.decode()
    case.refresh_from_db()
    assert case.owner == users["replay_admin"]


def test_each_person_chooses_what_they_receive(users):
    rita = users["reviewer"]
    client = client_as(rita)
    page = client.get(reverse("console:notifications")).content.decode()
    assert "no email address" in page
    client.post(reverse("console:notifications"), {"choice": "digest"})
    assert NotificationChoice.objects.get(user=rita).choice == "digest"
    client.post(reverse("console:notifications"), {"choice": ""})
    assert not NotificationChoice.objects.filter(user=rita).exists()


def test_settings_admins_edit_the_review_block_with_each_problem_named(users):
    source_get_or_create(name="website")
    admin = make_user("sia", groups=("Settings admins",))
    client = client_as(admin)
    url = reverse("console:settings-review")
    assert client_as(users["reviewer"]).get(url).status_code == 403
    assert client.get(url).status_code == 200
    bad = client.post(url, {"text": "review:\n  escalate: {after_minutes: 0}\n", "reason": "x"})
    text = bad.content.decode()
    assert "Nothing was saved" in text and "line 2" in text
    assert "review" not in config_current().document
    good = "review:\n  routes:\n    - match: {kind: permanent_failure}\n      to: Replay admins\n"
    saved = client.post(url, {"text": good, "reason": "refusals to the admins"})
    assert saved.status_code == 302
    assert config_current().document["review"]["routes"][0]["to"] == "Replay admins"
    entry = AuditEntry.objects.filter(action="config_applied").latest("at")
    assert entry.actor == admin and entry.reason == "refusals to the admins"
    page = client.get(url).content.decode()
    assert "to: Replay admins" in page


def test_a_notification_that_cannot_be_sent_shows_on_the_dashboard(users):
    Group.objects.create(name="Empty desk")
    review(routes=[{"match": {"kind": "permanent_failure"}, "to": "Empty desk"}])
    case = permanent_case("unsent-1")
    tasks.case_notify(case.pk)
    html = client_as(users["reviewer"]).get(reverse("console:dashboard")).content.decode()
    assert "1 notification could not be sent" in html
    assert f"Case #{case.pk}" in html and "Nobody in Empty desk can receive it" in html


def test_a_case_handed_on_never_comes_back_to_next_case_nor_to_its_count(users):
    """Handed on because its group decides it: Next case no longer gives it to Reviewers
    (it would come back to whoever could not decide it), and their dashboard does not
    count it; the group's people get it and count it."""
    case = permanent_case("hand-back")
    rita = client_as(users["reviewer"])
    rita.post(reverse("console:case-next"))
    rita.post(reverse("console:case-hand-on", args=[case.pk]), {"preset": "cannot_decide"})
    case.refresh_from_db()
    assert (case.owner, case.status) == (None, "open")
    assert "No case waits for someone right now." in rita.get(reverse("console:dashboard")).text
    assert "Nothing waits for a person" in rita.post(reverse("console:case-next"), follow=True).text
    rex = client_as(users["replay_admin"])
    assert "1 case waits for someone" in rex.get(reverse("console:dashboard")).text
    rex.post(reverse("console:case-next"))
    case.refresh_from_db()
    assert case.owner == users["replay_admin"]
