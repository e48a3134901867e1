"""What a configured effect carries reaches the sandbox as docs/destinations.md says it shows it.

The SMTP adapter against the sandbox's sink (a multipart/alternative with the HTML
part, a Reply-To, the Message-ID still the operation key's) and the sandbox CRM's
adapter against its HTTP API (configured properties in `extra`, a task's `due_at`),
over loopback, through the sandbox process the suite starts.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from integrations.base import RecordContent
from integrations.sandbox.adapter import SandboxCrm
from integrations.smtp.adapter import SmtpSender, message_id_for
from tests.support.processes import Sandbox


def sender(sandbox: Sandbox) -> SmtpSender:
    return SmtpSender("127.0.0.1", sandbox.smtp_port, timeout=5, sender="from@onefold.invalid")


def test_an_html_confirmation_is_multipart_with_its_text_and_reply_to(sandbox: Sandbox) -> None:
    effect = sender(sandbox).send(
        operation_key="opk_html",
        to="ada@example.com",
        subject="We received your message, Ann",
        body="Hello Ann <b>&</b>,\n\nThanks.\n",
        html="<p>Hello Ann &lt;b&gt;&amp;&lt;/b&gt;</p>\n",
        reply_to="office@example.com",
    )
    (message,) = sandbox.messages()
    assert effect.ref == message_id_for("opk_html") == message["message_id"]
    assert message["subject"] == "We received your message, Ann"
    assert message["body"] == "Hello Ann <b>&</b>,\n\nThanks.\n"
    assert message["html"] == "<p>Hello Ann &lt;b&gt;&amp;&lt;/b&gt;</p>\n"
    assert message["headers"]["Reply-To"] == "office@example.com"
    assert message["headers"]["Content-Type"].startswith("multipart/alternative")


def test_a_text_only_confirmation_stays_plain_with_its_reply_to(sandbox: Sandbox) -> None:
    sender(sandbox).send(
        operation_key="opk_text",
        to="ada@example.com",
        subject="Received",
        body="Thanks.\n",
        reply_to="office@example.com",
    )
    (message,) = sandbox.messages()
    assert message["html"] is None
    assert message["body"] == "Thanks.\n"
    assert message["headers"]["Reply-To"] == "office@example.com"
    assert message["headers"]["Content-Type"].startswith("text/plain")


def test_a_non_ascii_html_part_travels_encoded(sandbox: Sandbox) -> None:
    sender(sandbox).send(
        operation_key="opk_utf8",
        to="ada@example.com",
        subject="Reçu",
        body="Merci, Zoë.\n",
        html="<p>Merci, Zoë.</p>\n",
    )
    (message,) = sandbox.messages()
    assert (message["subject"], message["html"]) == ("Reçu", "<p>Merci, Zoë.</p>\n")


def test_configured_properties_reach_the_sandbox_record_in_extra(sandbox: Sandbox) -> None:
    crm = SandboxCrm(sandbox.url, timeout=5)
    content = RecordContent(
        properties={"company": "Acme", "amount": "10k"},
        contact_properties={"company": "Acme"},
        pipeline="sales",
        stage="new",
    )
    ref = crm.create_record(
        external_ref="opk_rec", fields={"name": "Ada", "email": "a@example.com"}, content=content
    ).ref
    extra = crm.get_record(ref)["extra"]  # type: ignore[index]
    assert extra == {
        "company": "Acme",
        "amount": "10k",
        "contact": {"company": "Acme"},
        "pipeline": "sales",
        "stage": "new",
    }
    crm.update_record(
        record_id=ref, fields={"name": "Ada"}, content=RecordContent(properties={"amount": "20k"})
    )
    assert crm.get_record(ref)["extra"]["amount"] == "20k"  # type: ignore[index]


def test_a_task_carries_its_due_date_in_utc(sandbox: Sandbox) -> None:
    crm = SandboxCrm(sandbox.url, timeout=5)
    record = crm.create_record(external_ref="opk_r", fields={"name": "Ada"}).ref
    due = datetime(2026, 11, 30, 11, 15, tzinfo=timezone(timedelta(hours=1)))
    crm.create_task(
        record_id=record, external_ref="opk_t", title="Call", assignee="ana", due_at=due
    )
    crm.create_task(record_id=record, external_ref="opk_u", title="Call", assignee="ben")
    tasks = {t["external_ref"]: t for t in sandbox.tasks(record)}
    assert tasks["opk_t"]["due_at"] == due.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert tasks["opk_u"]["due_at"] is None
