"""Who receives a case, from outside: a `review` block applied with `manage.py config
apply`, submissions posted to gunicorn, a real django-q2 cluster and sweeper loop, and
the sandbox's SMTP sink receiving the staff notifications.

- A refused enquiry notifies Reviewers, and a held duplicate of a routed source notifies
  its group: each within 60 s of the case opening, one email per person per case,
  linking the case at ONEFOLD_CONSOLE_URL, with no customer's address, phone or full
  name; nobody else is notified. After one (shortened) minute untaken, each case is
  escalated once; nothing repeats.
- A worker killed while it sends notifications: each is still sent once.

Real processes and commits (`transaction=True`): the cluster and the sweeper read the
cases from the test database through their own connections.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.models import Group, User
from django_q.models import OrmQ

from idempotency_core.intake.sources import source_create_with_key, source_duplicates_set
from idempotency_core.models import AuditEntry, Notification, ReviewCase
from tests.factories import make_user, permanent_case, submission
from tests.support.processes import manage, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

CONSOLE = "https://onefold.example"
# A "minute" of the review block lasts this many seconds here (ONEFOLD_REVIEW_MINUTE_SECONDS).
MINUTE = 8
ENV = {"ONEFOLD_REVIEW_MINUTE_SECONDS": str(MINUTE), "ONEFOLD_CONSOLE_URL": CONSOLE}
REVIEW = """\
review:
  routes:
    - match: {source: shop, kind: [suspected_duplicate, duplicate_held]}
      to: Sales desk
  notify:
    email: true
    digest_minutes: 0
    webhook: ""
  escalate:
    after_minutes: 1
    to: Replay admins
"""
CUSTOMER = {"name": "Grace Hopper", "email": "grace.hopper@example.com", "phone": "+1 202 555 0142"}
PERSONAL = ("Grace Hopper", "grace.hopper", "555 0142", "5550142", "Hopper")


def staff(username: str, *groups: str, email: bool = True) -> User:
    user = make_user(username, groups=groups)
    if email:
        user.email = f"{username}@staff.example"
        user.save(update_fields=["email"])
    return user


def notices(sandbox) -> list[dict]:
    """The staff notifications the sink received (customers' confirmations set aside)."""
    return [m for m in sandbox.messages() if "@staff.example" in " ".join(m["rcpt_to"])]


def notify_tasks_queued() -> int:
    return sum(row.task.get("func", "").endswith("case_notify") for row in OrmQ.objects.all())


def linked_case(message: dict) -> int:
    link = f"{CONSOLE}/console/cases/"
    return int(message["body"].split(link, 1)[1].split("/", 1)[0])


def received(sandbox) -> Counter[tuple[str, int]]:
    """(recipient, case) -> how many emails."""
    return Counter((m["rcpt_to"][0], linked_case(m)) for m in notices(sandbox))


def apply_review(tmp_path: Path, sandbox, text: str = REVIEW) -> None:
    path = tmp_path / "review.yaml"
    path.write_text(text)
    applied = manage("config", "apply", str(path), sandbox=sandbox)
    assert applied.returncode == 0, applied.stderr


def post(url: str, key: str, idem: str, **body: object) -> None:
    headers = {"Authorization": f"Api-Key {key}", "Idempotency-Key": idem}
    answer = httpx.post(url, json=submission(**body), headers=headers, timeout=60)
    assert answer.status_code == 202, answer.text


def opened(kind: str) -> ReviewCase:
    return wait_for(
        lambda: ReviewCase.objects.filter(kind=kind).first(), timeout=60, what=f"a {kind} case"
    )


def test_each_case_reaches_its_people_once_then_escalates_once(
    sandbox, web_server, qcluster_factory, tmp_path
):
    _website, _, website_key = source_create_with_key(name="website")
    shop, _, shop_key = source_create_with_key(name="shop")
    source_duplicates_set(source=shop, policy="hold")
    Group.objects.create(name="Sales desk")
    staff("rita", "Reviewers"), staff("ron", "Reviewers"), staff("quiet", "Reviewers", email=False)
    staff("sam", "Sales desk"), staff("sue", "Sales desk"), staff("rex", "Replay admins")
    staff("olga")
    apply_review(tmp_path, sandbox)
    qcluster_factory(**ENV)
    qcluster_factory.sweeper(**ENV)
    url = f"{web_server.url}/api/v1/submissions/"

    sandbox.fault("create_record", "http_400")
    post(url, website_key, "refused-1", contact=CUSTOMER)
    refused = opened("permanent_failure")
    post(url, shop_key, "shop-1", contact=CUSTOMER, message="A quote for a roof, please.")
    post(url, shop_key, "shop-2", contact=CUSTOMER, message="a quote for a ROOF, please.")
    held = opened("duplicate_held")

    expected = {
        ("rita@staff.example", refused.pk): 1,
        ("ron@staff.example", refused.pk): 1,
        ("sam@staff.example", held.pk): 1,
        ("sue@staff.example", held.pk): 1,
    }
    for case, count in ((refused, 2), (held, 2)):
        wait_for(
            lambda case=case, count=count: (
                sum(n for (_to, pk), n in received(sandbox).items() if pk == case.pk) >= count
            ),
            timeout=max(1, 60 - (time.time() - case.created_at.timestamp())),
            interval=0.5,
            what=f"case {case.pk}'s notifications within 60 s of its opening",
        )
    assert received(sandbox) == expected  # one per person and case; nobody else
    for message in notices(sandbox):
        text = message["subject"] + message["body"]
        assert not [word for word in PERSONAL if word in text], text
        assert message["message_id"].startswith("<ntf_")
    assert "Possible duplicate, held before the CRM" in str(
        [m["subject"] for m in notices(sandbox)]
    )

    # One minute untaken: each case escalated to Replay admins, once.
    wait_for(
        lambda: sum(n for (to, _pk), n in received(sandbox).items() if to.startswith("rex")) >= 2,
        timeout=MINUTE + 30,
        interval=0.5,
        what="the escalations",
    )
    time.sleep(3 * MINUTE)  # sweeps keep running: nothing repeats
    expected |= {("rex@staff.example", refused.pk): 1, ("rex@staff.example", held.pk): 1}
    assert received(sandbox) == expected
    assert AuditEntry.objects.filter(action="case_escalated").count() == 2
    assert set(Notification.objects.values_list("status", flat=True)) == {"sent"}


def test_a_worker_killed_while_sending_notifications_sends_each_once(
    sandbox, qcluster_factory, tmp_path
):
    source_create_with_key(name="website")
    names = [f"r{i}" for i in range(4)]
    for name in names:
        staff(name, "Reviewers")
    apply_review(tmp_path, sandbox, "review:\n  notify: {email: true}\n")
    # The first notification's SMTP DATA waits 6 s at the sink, within the doomed
    # cluster's SMTP timeout (half its 20 s lease) and task timeout: the kill lands in
    # it, before the sink accepts the message.
    sandbox.fault("send_email", "slow", times=1, seconds=6)
    doomed = {**ENV, "ONEFOLD_LEASE_SECONDS": "20", "ONEFOLD_Q_TIMEOUT": "12"}
    cluster = qcluster_factory(name="doomed", **doomed)
    case = permanent_case("killed-mid-send")
    wait_for(
        lambda: Notification.objects.filter(case=case, status="sending").exists(),
        timeout=60,
        what="a notification being sent",
    )
    cluster.stop(signal.SIGKILL)
    assert notices(sandbox) == []  # nothing was accepted: the sink was still reading
    qcluster_factory(name="survivor", **ENV)
    qcluster_factory.sweeper(**ENV)  # gives back the sends whose lease expired
    wait_for(
        lambda: len(notices(sandbox)) >= len(names),
        timeout=120,
        interval=0.5,
        what="every notification, once the lease expired",
    )
    # Past the broker's redelivery of the killed task (its lock, the doomed cluster's
    # `retry`, 41 s after it was taken): nothing more arrives.
    wait_for(lambda: not notify_tasks_queued(), timeout=90, interval=1, what="the redelivery")
    time.sleep(3)
    assert received(sandbox) == {(f"{name}@staff.example", case.pk): 1 for name in names}
    assert set(Notification.objects.values_list("status", flat=True)) == {"sent"}
