"""The business configuration on real parts: the contract's black-box check.

`manage.py config apply` run as an operator runs it, submissions posted to gunicorn
through the JSON API, real django-q2 clusters, and the sandbox over HTTP and SMTP,
whose `/_sandbox/stats`, records, tasks and messages are what is asserted
(docs/configuration.md and docs/destinations.md, "The sandbox and SMTP").

Real commits (`transaction=True`): gunicorn and the clusters are other processes.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.utils import timezone

from idempotency_core.intake.sources import source_create_with_key, source_get_or_create
from idempotency_core.models import AssigneeTurn, Attempt, Operation, ReviewCase
from tests.factories import ingest, submission
from tests.support.processes import Sandbox, manage, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

CONFIG = """\
sources:
  {source}:
    forms:
      "*":
        enquiry:
          fields:
            company: "{{{{ fields.company }}}}"
            amount: "{{{{ fields.budget }}}}"
          stage: "new"
        contact:
          fields:
            company: "{{{{ fields.company }}}}"
        task:
          title: "Call {{{{ contact.name }}}} about {{{{ fields.service|default:'an enquiry' }}}}"
          assignee: {{round_robin: [ana, ben]}}
          due_in_hours: 24
        confirmation:
          subject: "{subject}, {{{{ contact.first_name|default:'there' }}}}"
          text: |
            Hello {{{{ contact.name }}}},
            your reference is {{{{ reference }}}}.
          html: "<p>Hello {{{{ contact.name }}}}</p>"
          reply_to: "office@example.com"
"""
ANN = "Ann <b>&</b>"


def apply(tmp_path: Path, *, source: str, subject: str) -> None:
    source_get_or_create(name=source)  # a configuration names sources that exist
    path = tmp_path / f"onefold-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(CONFIG.format(source=source, subject=subject))
    done = manage("config", "apply", str(path), "--reason", "a test")
    assert done.returncode == 0, done.stderr


def settled(operations: Any) -> bool:
    return not operations.exclude(status__in=Operation.DONE).exists()


def post(web_url: str, key: str, body: dict[str, Any], idempotency_key: str) -> None:
    response = httpx.post(
        f"{web_url}/api/v1/submissions/",
        json=body,
        headers={"Authorization": f"Api-Key {key}", "Idempotency-Key": idempotency_key},
        timeout=30,
    )
    assert response.status_code == 202, response.text


def test_two_submissions_carry_what_the_configuration_says(
    sandbox: Sandbox, web_server: Any, qcluster_factory: Any, tmp_path: Path
) -> None:
    _, _, key = source_create_with_key(name="website")
    broken = tmp_path / "broken.yaml"
    text = CONFIG.format(source="website", subject="Hi")
    broken.write_text(text.replace("|default:'an enquiry'", "|nosuchfilter"))
    refused = manage("config", "apply", str(broken))
    assert refused.returncode == 1, refused.stderr
    assert "line 14: sources.website.forms.*.task.title" in refused.stderr, refused.stderr
    assert "Invalid filter: 'nosuchfilter'" in refused.stderr
    apply(tmp_path, source="website", subject="We received your message")
    qcluster_factory()
    started = timezone.now()
    people = [
        (ANN, "ann@example.com", {"company": "Acme", "budget": "10k", "service": "a kitchen"}),
        ("Ben Jones", "ben@example.com", {"company": "Bolt", "budget": "2k"}),
    ]
    for number, (name, email, fields) in enumerate(people):
        body = submission(contact={"name": name, "email": email}, fields=fields)
        post(web_server.url, key, body, f"bb-{number}")
    wait_for(lambda: settled(Operation.objects.all()), timeout=120, what="both to finish")

    stats = sandbox.stats()
    assert (stats["records"], stats["tasks"], stats["messages"]) == (2, 2, 2), stats
    records = {r["name"]: r for r in sandbox.records()}
    assert records[ANN]["extra"]["company"] == "Acme" and records[ANN]["extra"]["amount"] == "10k"
    assert records[ANN]["extra"]["contact"] == {"company": "Acme"}
    assert records["Ben Jones"]["extra"]["stage"] == "new"
    tasks = {name: sandbox.tasks(records[name]["id"]) for name in records}
    assert [t["title"] for t in tasks[ANN]] == [f"Call {ANN} about a kitchen"]
    assert [t["title"] for t in tasks["Ben Jones"]] == ["Call Ben Jones about an enquiry"]
    assert sorted(t["assignee"] for ts in tasks.values() for t in ts) == ["ana", "ben"]
    for (task,) in tasks.values():
        due = datetime.fromisoformat(task["due_at"].replace("Z", "+00:00"))
        assert started + timedelta(hours=24) <= due <= timezone.now() + timedelta(hours=24)
    messages = {m["rcpt_to"][0]: m for m in sandbox.messages()}
    ann = messages["ann@example.com"]
    assert ann["subject"] == "We received your message, Ann"
    assert ann["body"] == f"Hello {ANN},\nyour reference is {records[ANN]['id']}.\n"
    assert ann["html"].strip() == "<p>Hello Ann &lt;b&gt;&amp;&lt;/b&gt;</p>"
    assert ann["headers"]["Reply-To"] == "office@example.com"
    assert messages["ben@example.com"]["subject"] == "We received your message, Ben"
    assert not ReviewCase.objects.exists()


def test_a_retry_sends_its_original_subject_after_a_change_and_a_new_one_the_new(
    sandbox: Sandbox, qcluster_factory: Any, tmp_path: Path
) -> None:
    # Attempts enough to outlast the change (the suite's four would end in a case).
    qcluster_factory(ONEFOLD_MAX_ATTEMPTS="200", ONEFOLD_RETRY_MAX_SECONDS="0.5")
    apply(tmp_path, source="website", subject="Original")
    sandbox.fault("send_email", "http_503", times=10_000)  # SMTP 421: not sent, retried
    first = ingest("retry-1", contact={"name": "Ada Lovelace", "email": "ada@example.com"})
    confirmation = first.operations.get(step="send_confirmation")
    wait_for(
        lambda: confirmation.attempts.filter(outcome=Attempt.Outcome.RETRYABLE).exists(),
        timeout=60,
        what="the confirmation's first try to fail",
    )
    apply(tmp_path, source="website", subject="Changed")
    sandbox.client.delete("/_sandbox/faults").raise_for_status()
    wait_for(lambda: settled(first.operations), timeout=60, what="the retry to succeed")
    second = ingest("retry-2", contact={"name": "Bob Stone", "email": "bob@example.com"})
    wait_for(lambda: settled(second.operations), timeout=60, what="the second to finish")

    subjects = {m["rcpt_to"][0]: m["subject"] for m in sandbox.messages()}
    assert subjects == {"ada@example.com": "Original, Ada", "bob@example.com": "Changed, Bob"}
    assert Operation.objects.get(pk=confirmation.pk).attempts.count() >= 2
    assert sandbox.stats()["messages_by_recipient"] == {"ada@example.com": 1, "bob@example.com": 1}


SUBMISSIONS = 40


def test_round_robin_alternates_exactly_across_two_clusters(
    sandbox: Sandbox, qcluster_factory: Any, tmp_path: Path
) -> None:
    """Concurrency is the point: two clusters of four workers each take tasks at once, and
    each task's turn is one atomic UPDATE in the transaction that stores its content."""
    apply(tmp_path, source="website", subject="Hello")
    for name in ("rr-a", "rr-b"):
        qcluster_factory(name, ONEFOLD_Q_WORKERS="4")
    events = [ingest(f"rr-{n}", contact_from_key=True) for n in range(SUBMISSIONS)]
    wait_for(
        lambda: settled(Operation.objects.filter(event__in=events)),
        timeout=240,
        interval=0.5,
        what="every submission to finish",
    )
    stats = sandbox.stats()
    assert stats["tasks"] == SUBMISSIONS
    assert set(stats["tasks_by_external_ref"].values()) == {1}  # each task once
    assignees = [t["assignee"] for r in sandbox.records() for t in sandbox.tasks(r["id"])]
    counts = {name: assignees.count(name) for name in ("ana", "ben")}
    assert sum(counts.values()) == SUBMISSIONS and abs(counts["ana"] - counts["ben"]) <= 1, counts
    assert AssigneeTurn.objects.get(scope="website/*").turns == SUBMISSIONS
    stored = Operation.objects.filter(event__in=events, step="assign_task")
    turns = sorted(o.content["assignee"] for o in stored)
    assert turns == sorted(assignees)  # what was stored is what was sent
