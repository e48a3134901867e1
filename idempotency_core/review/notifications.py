"""Who receives a case, and telling them: routing, notifications, escalation, hand on.

The configuration's `review` block (configuration/review_block.py) routes each case to
a group or a user (first matching route; else the group Reviewers). Routing is done
once per case, by its notification task (queued in the transaction that opened it,
audit/notice_queue.py) or, should that task be lost, by the sweeper's pass; the route
is a `CaseRoute` row, and *Next case* gives a routed case first to its people.

A notification is an effect like the others here: one `Notification` row per case,
person and reason (opened, escalated, handed on), unique in the database, with a key
that is its email's Message-ID. Rows are written in the transaction that routes,
escalates or hands on the case, so a crash leaves either the rows or nothing. A row is
sent by a task that first claims it (a conditional UPDATE to `sending` with a fresh
token and a lease, committed before the send) and then records the outcome under that
token: a retried or duplicated task finds nothing to claim. A worker that dies in the
send leaves the row `sending`; when its lease has expired the sweeper gives it back to
be sent again, under the same Message-ID (the sink or mailbox sees one id). A row that
cannot be sent (nobody in the group has an address, the server refuses, the attempts
are spent) becomes `failed` and shows on the console's dashboard.

What a notification says is notice_content.py's: no customer's address, phone number
or name, ever.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import smtplib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.base import BaseEmailBackend
from django.db import IntegrityError, transaction
from django.db.models import F, Max, Q, QuerySet
from django.utils import timezone

from idempotency_core.audit.entries import audit_record
from idempotency_core.audit.notice_queue import case_notify_enqueue, review_configured
from idempotency_core.configuration.review_block import ReviewSettings
from idempotency_core.configuration.versions import config_current
from idempotency_core.models import (
    CaseRoute,
    Notification,
    NotificationChoice,
    ReviewCase,
)
from idempotency_core.review.notice_content import (
    NoticeError,
    digest_email,
    notice_email,
    webhook_send,
)

logger = logging.getLogger(__name__)

SYSTEM = "notifications"
DIGEST_TASK = "idempotency_core.tasks.notices_digest"
# Tries of one notification before it is `failed` (on the dashboard): a server down for
# longer is an operator's matter, and the row says why.
MAX_ATTEMPTS = 5
RETRY_SECONDS = 30
# A case opened this long ago and not routed lost its task (or was opened by a
# set-based statement, reconciliation's): the sweeper routes it. Older cases are not
# routed by the sweeper at all: a review block applied today does not email last
# month's backlog.
ROUTE_GRACE = timedelta(seconds=20)
ROUTE_BACKLOG = timedelta(hours=1)
# A pending row due this long ago and not sent lost its task.
SEND_GRACE = timedelta(seconds=60)
# Who can decide a case handed on: the group whose role covers every action its kind
# needs (README.md, "Roles").
HAND_ON_GROUPS = {"unreadable_submission": "Settings admins"}
HAND_ON_DEFAULT = "Replay admins"


def review_settings() -> ReviewSettings:
    return ReviewSettings.of(config_current().document)


def review_minute() -> timedelta:
    """A minute of the review block's times (tests shorten it)."""
    return timedelta(seconds=settings.ONEFOLD_REVIEW_MINUTE_SECONDS)


# -- routing -------------------------------------------------------------------------


def _target(name: str) -> tuple[Group | None, User | None]:
    """The group named `name`, else the user; a group wins when both exist."""
    group = Group.objects.filter(name=name).first()
    if group is not None:
        return group, None
    return None, User.objects.filter(username=name).first()


def case_route(*, case_id: int, now: datetime | None = None) -> CaseRoute | None:
    """Routes an open case once, writing its "opened" notifications with the route in one
    transaction; the existing route when it was routed before; None when there is no
    review block or the case is no longer open."""
    existing = CaseRoute.objects.filter(case_id=case_id).first()
    if existing is not None:
        return existing
    config = review_settings()
    if not config.configured:
        return None
    case = ReviewCase.objects.select_related("event__source").get(pk=case_id)
    if case.status not in ReviewCase.OPEN_STATUSES:
        return None
    event = case.event
    source = event.source.name if event is not None else ""
    form = event.form if event is not None else ""
    name = config.route_for(source=source, form=form, kind=case.kind)
    group, user = _target(name)
    now = now or timezone.now()
    try:
        with transaction.atomic():
            route = CaseRoute.objects.create(
                case=case, target=name, group=group, user=user, routed_at=now
            )
            audit_record(
                action="case_routed",
                system=SYSTEM,
                case=case,
                event=event,
                reason=f"Routed to {name}.",
                details={"to": name, "source": source, "form": form, "kind": case.kind},
            )
            if case.owner_id is None:  # someone already took it: nobody need be told
                people = people_of(group, user)
                _plan(case, config, people, name, Notification.Reason.OPENED, now)
    except IntegrityError:  # another task routed it first: theirs stands
        return CaseRoute.objects.get(case_id=case_id)
    return route


def people_of(group: Group | None, user: User | None) -> list[User]:
    """Who a route reaches: active staff (the console is theirs alone)."""
    if group is not None:
        people: QuerySet[User] = group.user_set.all()
    elif user is not None:
        people = User.objects.filter(pk=user.pk)
    else:
        return []
    return list(people.filter(is_active=True, is_staff=True).order_by("pk"))


# -- what is to be sent --------------------------------------------------------------


def notification_key(case_id: int, user_id: int | None, reason: str, channel: str) -> str:
    """Opaque and stable: the same case, person, reason and channel give the same key."""
    text = f"{case_id}\x1f{user_id or '-'}\x1f{reason}\x1f{channel}"
    return "ntf_" + hashlib.sha256(text.encode()).hexdigest()[:40]


def _choice_of(user: User, config: ReviewSettings) -> str:
    chosen = NotificationChoice.objects.filter(user=user).values_list("choice", flat=True).first()
    if chosen:
        return chosen
    return "digest" if config.digest_minutes > 0 else "every"


def digest_interval(config: ReviewSettings) -> timedelta:
    """A digest's period: the block's, or an hour for someone who chose a digest while
    the block sends every case alone."""
    return review_minute() * (config.digest_minutes or 60)


def _digest_due(user: User, config: ReviewSettings, now: datetime) -> datetime:
    """At most one digest per person per period: the next turn after the last one sent."""
    last = Notification.objects.filter(user=user, digest=True, status="sent").aggregate(
        last=Max("sent_at")
    )["last"]
    return now if last is None else max(now, last + digest_interval(config))


def _plan(
    case: ReviewCase,
    config: ReviewSettings,
    people: Sequence[User],
    target: str,
    reason: str,
    now: datetime,
) -> None:
    """The rows of one case's notice to `people` (and the webhook), unique per case,
    person and reason: a second plan of the same notice writes nothing."""
    rows: list[Notification] = []
    email = Notification.Channel.EMAIL
    if config.email:
        reachable = [person for person in people if person.email.strip()]
        for person in reachable:
            choice = _choice_of(person, config)
            digest = choice == "digest"
            rows.append(
                Notification(
                    case=case,
                    user=person,
                    reason=reason,
                    channel=email,
                    status="skipped" if choice == "none" else "pending",
                    digest=digest,
                    due_at=_digest_due(person, config, now) if digest else now,
                    key=notification_key(case.pk, person.pk, reason, email),
                )
            )
        if not reachable:
            rows.append(_unreachable(case, target, reason, now))
    if config.webhook:
        hook = Notification.Channel.WEBHOOK
        rows.append(
            Notification(
                case=case,
                reason=reason,
                channel=hook,
                due_at=now,
                key=notification_key(case.pk, None, reason, hook),
            )
        )
    Notification.objects.bulk_create(rows, ignore_conflicts=True)


def _unreachable(case: ReviewCase, target: str, reason: str, now: datetime) -> Notification:
    email = Notification.Channel.EMAIL
    return Notification(
        case=case,
        reason=reason,
        channel=email,
        status="failed",
        due_at=now,
        key=notification_key(case.pk, None, reason, email),
        error=f"Nobody in {target} can receive it: no active staff member with an email address.",
    )


# -- sending -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Claim:
    ids: tuple[int, ...]
    token: uuid.UUID


def _claim(rows: QuerySet[Notification], now: datetime) -> _Claim | None:
    """Takes the pending rows among `rows` for this task: committed before the send, so
    a second task (a redelivery, a sweep) finds them taken."""
    token = uuid.uuid4()
    lease = now + timedelta(seconds=settings.ONEFOLD_LEASE_SECONDS)
    with transaction.atomic():
        ids = list(
            rows.select_for_update(skip_locked=True)
            .filter(status="pending", due_at__lte=now)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        if not ids:
            return None
        Notification.objects.filter(pk__in=ids, status="pending").update(
            status="sending",
            claim_token=token,
            lease_expires_at=lease,
            attempts=F("attempts") + 1,
        )
    return _Claim(tuple(ids), token)


def _finish(claim: _Claim, *, error: str = "", permanent: bool = False) -> None:
    """Records the outcome under the claim: a row whose lease was taken over is left
    to its new holder. A failure is tried again later, with a longer wait each time,
    until MAX_ATTEMPTS; a permanent one at once becomes `failed`."""
    now = timezone.now()
    rows = Notification.objects.filter(pk__in=claim.ids, claim_token=claim.token, status="sending")
    if not error:
        rows.update(status="sent", sent_at=now, lease_expires_at=None, error="")
        return
    spent = rows if permanent else rows.filter(attempts__gte=MAX_ATTEMPTS)
    spent.update(status="failed", lease_expires_at=None, error=error)
    attempts = max(rows.values_list("attempts", flat=True), default=1)
    rows.update(
        status="pending",
        lease_expires_at=None,
        due_at=now + timedelta(seconds=RETRY_SECONDS * 2 ** max(attempts - 1, 0)),
        error=error,
    )


def case_notices_send(*, case_id: int) -> int:
    """Sends the case's due notifications that go alone (not in a digest), each under
    its own claim, the emails over one connection to the mail server. Returns how many
    were sent."""
    sent = 0
    outstanding = Notification.objects.filter(case_id=case_id, digest=False)
    with _Mailer() as mailer:
        for row_id in outstanding.filter(status="pending").values_list("pk", flat=True):
            claim = _claim(Notification.objects.filter(pk=row_id), timezone.now())
            if claim is None:
                continue
            row = Notification.objects.select_related("case__event__source", "user").get(pk=row_id)
            try:
                if row.channel == Notification.Channel.WEBHOOK:
                    webhook_send(row, review_settings().webhook)
                else:
                    mailer.send(notice_email(row))
            except NoticeError as exc:
                _finish(claim, error=str(exc), permanent=exc.permanent)
                continue
            _finish(claim)
            sent += 1
    return sent


class _Mailer:
    """One connection to the mail server (Django's email settings) for a task's emails,
    opened at the first and closed at the end: a group of ten is one SMTP session, not
    ten. A failed send closes it, so that the next opens a fresh one rather than write
    into a session the server may have dropped."""

    def __init__(self) -> None:
        self.connection: BaseEmailBackend | None = None

    def __enter__(self) -> _Mailer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def send(self, message: EmailMessage) -> None:
        try:
            if self.connection is None:
                timeout = max(1.0, min(30.0, settings.ONEFOLD_LEASE_SECONDS / 2))
                self.connection = get_connection(timeout=timeout)
                self.connection.open()
            self.connection.send_messages([message])
        except (OSError, smtplib.SMTPException) as exc:
            self.close()
            raise _mail_error(exc) from exc

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            # The session is gone either way; what was sent is recorded.
            with contextlib.suppress(OSError, smtplib.SMTPException):
                connection.close()


def _mail_error(exc: Exception) -> NoticeError:
    """The error kept names the failure's kind and code, never the server's words
    (which can quote an address)."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        # A 4xx (421: the server closes the session; 450, 451, 452) is for later.
        codes = [code for code, _words in exc.recipients.values()]
        permanent = bool(codes) and all(500 <= code < 600 for code in codes)
        return NoticeError(
            f"The mail server refused the address: it answered {', '.join(map(str, codes))}.",
            permanent=permanent,
        )
    if isinstance(exc, smtplib.SMTPResponseException):
        permanent = 500 <= exc.smtp_code < 600
        return NoticeError(f"The mail server answered {exc.smtp_code}.", permanent=permanent)
    return NoticeError(f"The mail server could not be reached ({type(exc).__name__}).")


def notices_digest_send(*, user_id: int) -> int:
    """Sends one person's due digest rows as one email, under one claim."""
    rows = Notification.objects.filter(user_id=user_id, digest=True)
    claim = _claim(rows, timezone.now())
    if claim is None:
        return 0
    claimed = list(
        Notification.objects.filter(pk__in=claim.ids)
        .select_related("case__event__source", "user")
        .order_by("case_id")
    )
    try:
        with _Mailer() as mailer:
            mailer.send(digest_email(claimed))
    except NoticeError as exc:
        _finish(claim, error=str(exc), permanent=exc.permanent)
        return 0
    _finish(claim)
    return len(claimed)


def case_notify(*, case_id: int) -> int:
    """The task of a case: route it (once) and send what is due for it now."""
    case_route(case_id=case_id)
    sent = case_notices_send(case_id=case_id)
    for user_id in _due_digest_people(Q(case_id=case_id)):
        sent += notices_digest_send(user_id=user_id)
    return sent


def _due_digest_people(condition: Q) -> list[int]:
    return list(
        Notification.objects.filter(condition, digest=True, status="pending")
        .filter(due_at__lte=timezone.now())
        .values_list("user_id", flat=True)
        .distinct()
    )


# -- escalation and hand on ----------------------------------------------------------


def case_escalate(*, route: CaseRoute, config: ReviewSettings, now: datetime) -> bool:
    """Escalates one untaken case, once: the conditional UPDATE decides between two
    sweepers; the rows and the audit entry go in its transaction."""
    name = config.escalate_to
    with transaction.atomic():
        won = CaseRoute.objects.filter(pk=route.pk, escalated_at__isnull=True).update(
            escalated_at=now, escalated_to=name
        )
        if not won:
            return False
        case = ReviewCase.objects.select_related("event").get(pk=route.case_id)
        group, user = _target(name)
        _plan(case, config, people_of(group, user), name, Notification.Reason.ESCALATED, now)
        minutes = config.escalate_after_minutes
        audit_record(
            action="case_escalated",
            system=SYSTEM,
            case=case,
            event=case.event,
            reason=f"Nobody took it within {minutes} minutes: {name} notified.",
            details={"to": name, "after_minutes": minutes},
        )
        case_notify_enqueue(case.pk, force=True)
    return True


def hand_on_group(case: ReviewCase) -> str:
    """The group that can decide a case of this kind."""
    return HAND_ON_GROUPS.get(case.kind, HAND_ON_DEFAULT)


def case_hand_on_route(*, case: ReviewCase, actor: User, group_name: str, now: datetime) -> None:
    """The route and notifications of a hand on (review/cases.py `case_hand_on` releases
    the case and audits it; call in its transaction): the case is the group's now,
    first in their Next case; its people, but the one handing on, are notified."""
    group = Group.objects.filter(name=group_name).first()
    CaseRoute.objects.update_or_create(
        case=case,
        defaults={
            "target": group_name,
            "group": group,
            "user": None,
            "handed_on_at": now,
        },
        create_defaults={
            "target": group_name,
            "group": group,
            "routed_at": now,
            "handed_on_at": now,
        },
    )
    config = review_settings()
    people = [person for person in people_of(group, None) if person.pk != actor.pk]
    if people or config.configured:
        _plan(case, config, people, group_name, Notification.Reason.HANDED_ON, now)
    case_notify_enqueue(case.pk, force=True)


# -- the sweeper's pass --------------------------------------------------------------


def notifications_sweep(*, now: datetime | None = None, batch: int = 200) -> dict[str, int]:
    """One pass: routes cases whose task was lost, escalates untaken cases, gives back
    sends whose worker died, and queues what is due and not queued."""
    now = now or timezone.now()
    report = {"routed": 0, "escalated": 0, "recovered": 0, "queued": 0}
    config = review_settings() if review_configured() else ReviewSettings()
    if config.configured:
        report["routed"] = _route_lost(now, batch)
        report["escalated"] = _escalate_due(config, now, batch)
    report["recovered"] = _recover_leases(now, batch)
    # Due digests and retries, and first sends due a while (their task is lost), not
    # queued lately.
    waiting = (
        Q(status="pending", due_at__lte=now)
        & (Q(digest=True) | Q(attempts__gt=0) | Q(due_at__lte=now - SEND_GRACE))
        & (Q(enqueued_at__isnull=True) | Q(enqueued_at__lte=now - SEND_GRACE))
    )
    report["queued"] = _queue_rows(waiting, now, batch)
    return report


def _queue_rows(condition: Q, now: datetime, batch: int) -> int:
    """Queues the task of each case (single sends) and person (digests) among the rows
    `condition` selects, and stamps them queued; a second sweeper skips locked rows."""
    from django_q.tasks import async_task

    with transaction.atomic():
        due = list(
            Notification.objects.select_for_update(skip_locked=True)
            .filter(condition)
            .values_list("pk", "case_id", "user_id", "digest")[:batch]
        )
        cases = {case_id for _pk, case_id, _user, digest in due if not digest}
        people = {user_id for _pk, _case, user_id, digest in due if digest}
        Notification.objects.filter(pk__in=[row[0] for row in due]).update(enqueued_at=now)
        for case_id in sorted(cases):
            case_notify_enqueue(case_id, force=True)
        for user_id in sorted(people):
            async_task(DIGEST_TASK, user_id, task_name=f"notices-digest-{user_id}")
    return len(cases) + len(people)


def _route_lost(now: datetime, batch: int) -> int:
    lost = list(
        ReviewCase.objects.filter(
            status__in=ReviewCase.OPEN_STATUSES,
            created_at__gte=now - ROUTE_BACKLOG,
            created_at__lte=now - ROUTE_GRACE,
            route__isnull=True,
        )
        .order_by("created_at", "id")
        .values_list("pk", flat=True)[:batch]
    )
    for case_id in lost:
        if case_route(case_id=case_id, now=now) is not None:
            case_notify_enqueue(case_id, force=True)  # its sends, now
    return len(lost)


def _escalate_due(config: ReviewSettings, now: datetime, batch: int) -> int:
    if not config.escalate_after_minutes or not config.escalate_to:
        return 0
    cutoff = now - review_minute() * config.escalate_after_minutes
    routes = list(
        CaseRoute.objects.filter(
            escalated_at__isnull=True,
            case__status=ReviewCase.Status.OPEN,
            case__owner__isnull=True,
            case__created_at__lte=cutoff,
        ).order_by("routed_at")[:batch]
    )
    return sum(case_escalate(route=route, config=config, now=now) for route in routes)


def _recover_leases(now: datetime, batch: int) -> int:
    """A send whose worker died (its lease expired, still `sending`) is sent again under
    the same Message-ID, queued at once; its tries are counted, so a send that kills its
    worker every time ends `failed`, on the dashboard."""
    expired = Q(status="sending", lease_expires_at__lt=now)
    ids = list(
        Notification.objects.filter(expired).order_by("pk").values_list("pk", flat=True)[:batch]
    )
    rows = Notification.objects.filter(expired, pk__in=ids)
    interrupted = "The sending worker stopped before it recorded the outcome."
    rows.filter(attempts__gte=MAX_ATTEMPTS).update(
        status="failed", lease_expires_at=None, error=interrupted
    )
    recovered = rows.update(
        status="pending", lease_expires_at=None, due_at=now, enqueued_at=None, error=interrupted
    )
    if recovered:
        _queue_rows(Q(pk__in=ids, status="pending", enqueued_at__isnull=True), now, batch)
    return recovered


def notification_failures(*, since: datetime) -> QuerySet[Notification]:
    """The notifications that could not be sent since `since`, newest first."""
    return (
        Notification.objects.filter(status="failed", created_at__gte=since)
        .select_related("user")
        .order_by("-created_at", "-pk")
    )
