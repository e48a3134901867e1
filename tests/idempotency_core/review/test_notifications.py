"""Routing, notifications and escalation, in process: who receives a case, one email per
person and reason whatever runs twice, escalation once, digests, a send that fails
visibly, and a send whose worker died sent again under its Message-ID.

The tasks are called as a worker calls them (idempotency_core.tasks); the delivery
through a real cluster and SMTP sink is test_notifications_cluster.py's.
"""

from __future__ import annotations

import smtplib
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from django.core import mail
from django.utils import timezone
from django_q.models import OrmQ
from prometheus_client.parser import text_string_to_metric_families

from idempotency_core import tasks
from idempotency_core.configuration.versions import config_apply
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import (
    AuditEntry,
    CaseRoute,
    Notification,
    NotificationChoice,
    ReviewCase,
)
from idempotency_core.review.notifications import case_route, notifications_sweep
from tests.factories import make_user, permanent_case

pytestmark = pytest.mark.django_db

CUSTOMER = ("Ada", "Lovelace", "ada@example.com", "7946")


def review(**block: object) -> None:
    source_get_or_create(name="website")
    config_apply(document={"review": block}, reason="who receives a case")


def person(username: str, *groups: str, email: bool = True) -> User:
    user = make_user(username, groups=groups)
    if email:
        user.email = f"{username}@staff.example"
        user.save(update_fields=["email"])
    return user


def notify_tasks() -> list[int]:
    return [
        row.task["args"][0]
        for row in OrmQ.objects.order_by("pk")
        if row.task.get("func") == "idempotency_core.tasks.case_notify"
    ]


def sent_to() -> list[str]:
    return sorted(address for message in mail.outbox for address in message.to)


@pytest.fixture
def staff() -> dict[str, User]:
    Group.objects.create(name="Sales desk")
    return {
        "rita": person("rita", "Reviewers"),
        "ron": person("ron", "Reviewers"),
        "quiet": person("quiet", "Reviewers", email=False),
        "sam": person("sam", "Sales desk"),
        "rex": person("rex", "Replay admins"),
        "outsider": person("olga"),
    }


def test_without_a_review_block_nobody_is_notified_and_nothing_is_queued(staff) -> None:
    case = permanent_case("quiet-1")
    assert notify_tasks() == []
    tasks.case_notify(case.pk)
    assert not CaseRoute.objects.exists() and mail.outbox == []


def test_a_case_notifies_its_group_once_per_person_naming_kind_source_form_and_link(
    staff, settings
) -> None:
    settings.ONEFOLD_CONSOLE_URL = "https://onefold.example"
    review(notify={"email": True})
    case = permanent_case("routed-1")
    assert notify_tasks() == [case.pk]  # queued with the case, in its transaction
    tasks.case_notify(case.pk)
    tasks.case_notify(case.pk)  # a redelivered task: nothing more
    notifications_sweep()
    assert sent_to() == ["rita@staff.example", "ron@staff.example"]
    message = mail.outbox[0]
    text = f"{message.subject}\n{message.body}"
    assert "Refused" in text  # the console's words for the kind
    assert "source website, form contact" in text
    assert f"https://onefold.example/console/cases/{case.pk}/" in text
    for personal in CUSTOMER:
        assert personal not in text
    assert message.extra_headers["Message-ID"].startswith("<ntf_")
    route = CaseRoute.objects.get(case=case)
    assert route.target == "Reviewers" and route.group.name == "Reviewers"
    assert AuditEntry.objects.filter(action="case_routed", case=case).count() == 1


def test_the_first_matching_route_wins_and_nobody_else_hears(staff) -> None:
    review(
        routes=[
            {"match": {"source": "website", "kind": "permanent_failure"}, "to": "Sales desk"},
            {"match": {"kind": "permanent_failure"}, "to": "rex"},
        ]
    )
    case = permanent_case("routed-2")
    tasks.case_notify(case.pk)
    assert sent_to() == ["sam@staff.example"]


def test_an_untaken_case_is_escalated_once_and_a_taken_one_never(staff, settings) -> None:
    settings.ONEFOLD_REVIEW_MINUTE_SECONDS = 1
    review(escalate={"after_minutes": 2, "to": "Replay admins"})
    waiting, taken = permanent_case("esc-1"), permanent_case("esc-2")
    for case in (waiting, taken):
        tasks.case_notify(case.pk)
    taken.owner = staff["rita"]
    taken.save(update_fields=["owner"])
    mail.outbox.clear()
    assert notifications_sweep()["escalated"] == 0  # not yet: two "minutes" of a second
    opened = timezone.now() - timedelta(seconds=3)
    ReviewCase.objects.filter(pk__in=[waiting.pk, taken.pk]).update(created_at=opened)
    assert notifications_sweep()["escalated"] == 1
    assert notifications_sweep()["escalated"] == 0
    tasks.case_notify(waiting.pk)
    tasks.case_notify(waiting.pk)
    assert sent_to() == ["rex@staff.example"]
    assert "Nobody has taken case" in mail.outbox[0].subject
    assert AuditEntry.objects.filter(action="case_escalated").count() == 1


def test_each_person_chooses_every_case_a_digest_or_none(staff) -> None:
    review(notify={"digest_minutes": 0})
    NotificationChoice.objects.create(user=staff["ron"], choice="none")
    NotificationChoice.objects.create(user=staff["quiet"], choice="every")  # no address
    first, second = permanent_case("dig-1"), permanent_case("dig-2")
    NotificationChoice.objects.create(user=staff["rita"], choice="digest")
    tasks.case_notify(first.pk)
    tasks.case_notify(second.pk)
    # rita's first digest goes at once (her first turn), listing what was due then.
    assert sent_to() == ["rita@staff.example"]
    assert Notification.objects.get(user=staff["ron"], case=first).status == "skipped"
    pending = Notification.objects.filter(user=staff["rita"], status="pending")
    assert pending.count() == 1  # the second waits for her next turn
    # An hour later (her turn: the block sends every case, so her digest is hourly).
    Notification.objects.filter(user=staff["rita"], status="sent").update(
        sent_at=timezone.now() - timedelta(hours=1)
    )
    pending.update(due_at=timezone.now())
    notifications_sweep()
    (row,) = [r for r in OrmQ.objects.all() if r.task["func"].endswith("notices_digest")]
    tasks.notices_digest(row.task["args"][0])
    assert len(mail.outbox) == 2 and f"Case {second.pk}" in mail.outbox[1].body


def test_a_route_that_reaches_nobody_is_a_failure_on_record(staff) -> None:
    Group.objects.create(name="Empty desk")
    review(routes=[{"match": {"kind": "permanent_failure"}, "to": "Empty desk"}])
    case = permanent_case("nobody-1")
    tasks.case_notify(case.pk)
    failed = Notification.objects.get(case=case)
    assert failed.status == "failed" and "Nobody in Empty desk" in failed.error


def test_a_notification_that_cannot_be_sent_is_counted_on_metrics(staff, client, settings) -> None:
    """Beside the dashboard, an operator's alert: the failed notifications by channel on
    /metrics (every channel present before the first failure), and the age of the
    oldest one due and unsent, which grows when no worker sends them."""
    settings.ONEFOLD_METRICS_TOKEN, settings.ONEFOLD_METRICS_ALLOW_IPS = "t0ken", []

    def scraped() -> dict[tuple[str, tuple], float]:
        answer = client.get("/metrics", headers={"Authorization": "Bearer t0ken"})
        assert answer.status_code == 200
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(answer.content.decode())
            for sample in family.samples
        }

    failed = "onefold_notifications_failed"
    waiting = ("onefold_oldest_due_notification_age_seconds", ())
    before = scraped()
    assert before[(failed, (("channel", "email"),))] == 0
    assert before[(failed, (("channel", "webhook"),))] == 0
    assert before[waiting] == 0
    Group.objects.create(name="Empty desk")
    review(routes=[{"match": {"kind": "permanent_failure"}, "to": "Empty desk"}])
    tasks.case_notify(permanent_case("nobody-2").pk)
    review(routes=[{"match": {"kind": "permanent_failure"}, "to": "sam"}])
    stuck = permanent_case("no-worker-1")  # its task never runs: nobody sends it
    case_route(case_id=stuck.pk)
    Notification.objects.filter(case=stuck).update(due_at=timezone.now() - timedelta(minutes=3))
    after = scraped()
    assert after[(failed, (("channel", "email"),))] == 1
    assert after[(failed, (("channel", "webhook"),))] == 0
    assert after[waiting] >= 180


def test_a_case_s_emails_go_over_one_smtp_session_and_a_dropped_one_is_reopened(
    staff, sandbox, settings, monkeypatch
) -> None:
    """Through the sandbox's real SMTP sink: a group of three is one session, not three;
    a session the server drops is closed, and the next email opens another."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    for name in ("rhea", "rory"):
        person(name, "Reviewers")
    sessions: list[smtplib.SMTP] = []
    real_init = smtplib.SMTP.__init__

    def counted(self: smtplib.SMTP, *args: object, **kwargs: object) -> None:
        sessions.append(self)
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(smtplib.SMTP, "__init__", counted)
    review(notify={"email": True})
    case = permanent_case("one-session")
    tasks.case_notify(case.pk)
    staff_mail = [m for m in sandbox.messages() if "@staff.example" in m["rcpt_to"][0]]
    assert sorted(m["rcpt_to"][0] for m in staff_mail) == [
        "rhea@staff.example",
        "rita@staff.example",
        "ron@staff.example",
        "rory@staff.example",
    ]
    assert len(sessions) == 1
    # The server answers the first message 503 (as it can after dropping a session):
    # that one is kept to try again, the others still go, over a new session.
    sandbox.fault("send_email", "http_503", times=1)
    second = permanent_case("one-session-2")
    sessions.clear()
    tasks.case_notify(second.pk)
    rows = Notification.objects.filter(case=second)
    assert sorted(rows.values_list("status", flat=True)) == ["pending", "sent", "sent", "sent"]
    assert len(sessions) == 2


def test_a_refusing_mail_server_is_retried_then_failed_on_record(staff, settings) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9  # nothing listens there
    review(routes=[{"match": {"kind": "permanent_failure"}, "to": "sam"}])
    case = permanent_case("down-1")
    tasks.case_notify(case.pk)
    row = Notification.objects.get(case=case)
    assert (row.status, row.attempts) == ("pending", 1) and "could not be reached" in row.error
    assert notifications_sweep()["queued"] == 0  # its next try is not due yet
    Notification.objects.filter(pk=row.pk).update(due_at=timezone.now())
    assert notifications_sweep()["queued"] == 1  # due: queued at once, as a retry
    for _ in range(4):
        Notification.objects.filter(pk=row.pk).update(due_at=timezone.now())
        tasks.case_notify(case.pk)
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("failed", 5)


def test_a_send_whose_worker_died_is_sent_again_once_its_lease_expired(staff) -> None:
    review(routes=[{"match": {"kind": "permanent_failure"}, "to": "sam"}])
    case = permanent_case("died-1")
    case_route(case_id=case.pk)
    row = Notification.objects.get(case=case)
    # As a worker leaves it when killed mid-send: claimed, its lease running.
    Notification.objects.filter(pk=row.pk).update(
        status="sending",
        claim_token="00000000-0000-0000-0000-000000000001",
        lease_expires_at=timezone.now() + timedelta(seconds=60),
        attempts=1,
    )
    tasks.case_notify(case.pk)  # a redelivered task while the lease runs: no second send
    assert mail.outbox == []
    Notification.objects.filter(pk=row.pk).update(lease_expires_at=timezone.now())
    report = notifications_sweep()
    assert report["recovered"] == 1
    tasks.case_notify(case.pk)
    tasks.case_notify(case.pk)
    assert sent_to() == ["sam@staff.example"]
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("sent", 2)


def test_a_digest_block_sends_one_email_per_person_per_period(staff) -> None:
    review(notify={"digest_minutes": 30})
    first, second = permanent_case("period-1"), permanent_case("period-2")
    tasks.case_notify(first.pk)
    tasks.case_notify(second.pk)
    # The first digest goes at once; the second case waits for the next turn, 30 min on.
    assert sent_to() == ["rita@staff.example", "ron@staff.example"]
    waiting = Notification.objects.filter(case=second, status="pending", digest=True)
    assert waiting.count() == 2
    turn = min(waiting.values_list("due_at", flat=True))
    assert timedelta(minutes=29) < turn - timezone.now() <= timedelta(minutes=30)
    assert notifications_sweep()["queued"] == 0  # not its turn yet


def test_a_case_whose_task_was_lost_is_routed_and_sent_by_the_sweeper(staff) -> None:
    review(routes=[{"match": {"kind": "permanent_failure"}, "to": "sam"}])
    case = permanent_case("lost-1")
    OrmQ.objects.all().delete()  # the task is lost
    assert notifications_sweep()["routed"] == 0  # it may still be on its way
    ReviewCase.objects.filter(pk=case.pk).update(created_at=timezone.now() - timedelta(seconds=30))
    assert notifications_sweep()["routed"] == 1
    assert notify_tasks() == [case.pk]
    tasks.case_notify(case.pk)
    assert sent_to() == ["sam@staff.example"]
