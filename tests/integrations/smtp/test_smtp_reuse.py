"""SMTP connections reused within a process, and never where reuse could blur an outcome.

The sender talks to the sandbox's real mail sink (aiosmtpd) through a relay that
counts connections and can cut them, as a server that drops idle clients does.
Email is at most once: a reused connection that died must end in a new
connection before MAIL FROM (the message then goes out once), and a failure
once the body went out stays ambiguous, is never retried on another connection,
and closes the connection for good.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from integrations.base import Classification, DestinationError
from integrations.smtp import adapter as smtp
from integrations.smtp.adapter import SmtpSender, message_id_for
from lab.sandbox import SandboxStore
from lab.sandbox.smtp import SinkController
from tests.support.counting_proxy import CountingProxy


@dataclass
class Relay:
    store: SandboxStore
    proxy: CountingProxy
    sender: SmtpSender

    def send(self, n: int) -> str:
        return self.sender.send(
            operation_key=f"opk_reuse_{n}", to=f"person{n}@example.com", subject="Hi", body="x"
        ).ref

    def message_ids(self) -> list[str]:
        return [message["message_id"] for message in self.store.messages()]


@pytest.fixture
def relay() -> Iterator[Relay]:
    store = SandboxStore()
    sink = SinkController(store, hostname="127.0.0.1", port=0)
    sink.start()
    proxy = CountingProxy(sink.port)
    smtp.smtp_pool_clear()
    sender = SmtpSender("127.0.0.1", proxy.port, timeout=5, sender="enquiries@onefold.invalid")
    yield Relay(store=store, proxy=proxy, sender=sender)
    smtp.smtp_pool_clear()
    proxy.close()
    sink.stop()


def test_messages_sent_one_after_another_share_one_connection(relay):
    refs = [relay.send(n) for n in range(3)]
    assert relay.proxy.accepted == 1
    assert relay.message_ids() == refs == [message_id_for(f"opk_reuse_{n}") for n in range(3)]


def test_a_connection_dropped_while_idle_is_replaced_before_mail_from(relay):
    relay.send(0)
    relay.proxy.cut()  # the server hung up on the idle client
    relay.send(1)  # no error: found closed, a new connection carried the message
    assert relay.proxy.accepted == 2
    assert relay.message_ids() == [message_id_for("opk_reuse_0"), message_id_for("opk_reuse_1")]


def test_a_reply_lost_after_the_body_is_ambiguous_and_the_message_is_not_resent(relay):
    relay.send(0)
    relay.store.add_fault(action="send_email", mode="drop_response_after_commit")
    with pytest.raises(DestinationError) as error:
        relay.send(1)  # on the reused connection
    assert error.value.classification == Classification.AMBIGUOUS
    relay.send(2)
    # The message whose reply was lost was stored once and never sent again; the
    # connection it died on was not taken back into the pool.
    assert relay.message_ids() == [message_id_for(f"opk_reuse_{n}") for n in range(3)]
    assert relay.proxy.accepted == 2


def test_a_refused_envelope_on_a_reused_connection_is_retryable_and_closes_it(relay):
    relay.send(0)
    relay.store.add_fault(action="send_email", mode="http_503")  # 421 to RCPT TO
    with pytest.raises(DestinationError) as error:
        relay.send(1)
    assert error.value.classification == Classification.RETRYABLE
    relay.send(2)
    assert relay.message_ids() == [message_id_for("opk_reuse_0"), message_id_for("opk_reuse_2")]
    assert relay.proxy.accepted == 2


def test_an_idle_connection_past_its_time_is_closed_not_reused(relay, monkeypatch):
    monkeypatch.setattr(smtp, "_IDLE_SECONDS", 0.0)
    relay.send(0)
    relay.send(1)
    assert relay.proxy.accepted == 2
    assert len(relay.message_ids()) == 2


def test_a_connection_is_closed_after_its_message_allowance(relay, monkeypatch):
    monkeypatch.setattr(smtp, "_MESSAGES_PER_CONNECTION", 2)
    for n in range(5):
        relay.send(n)
    assert relay.proxy.accepted == 3  # 2 + 2 + 1
    assert len(relay.message_ids()) == 5


def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents_alone(relay):
    relay.send(0)  # the parent now holds an idle connection
    pid = os.fork()
    if pid == 0:  # the child: only sockets, no database, then leave at once
        try:
            relay.send(1)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    relay.send(2)  # the parent's own connection still answers
    assert relay.proxy.accepted == 2
    assert sorted(relay.message_ids()) == sorted(message_id_for(f"opk_reuse_{n}") for n in range(3))
