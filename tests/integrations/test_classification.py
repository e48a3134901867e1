"""The adapters' one vocabulary, answer by answer, over real sockets on loopback.

The CRM client talks to a small scripted HTTP server (each test says what it
answers), so every status the sandbox cannot produce is covered too: 401, 403,
404, 422, 409 with and without the existing record, a read timeout after the
request went out, a connection closed before the answer, and a port nobody
listens on. The SMTP sender talks to the sandbox's sink with its faults.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from integrations.base import Classification, DestinationError, Reply
from integrations.sandbox.adapter import SandboxCrm
from integrations.smtp.adapter import SmtpSender, message_id_for
from lab.sandbox import SandboxStore
from lab.sandbox.smtp import SinkController
from tests.support.processes import free_port


@dataclass
class Script:
    """What the server does with the next request: answer, hang, or hang up."""

    status: int = 201
    body: dict = field(default_factory=lambda: {"id": "rec_1"})
    headers: dict[str, str] = field(default_factory=dict)
    sleep: float = 0.0
    hang_up: bool = False
    requests: int = 0


@pytest.fixture
def scripted() -> Iterator[tuple[Script, str]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            script.requests += 1
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if script.sleep:
                time.sleep(script.sleep)
            if script.hang_up:
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            payload = json.dumps(script.body).encode()
            self.send_response(script.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in script.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield script, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def create(crm: SandboxCrm) -> Callable[[], object]:
    return lambda: crm.create_record(external_ref="opk_x", fields={"name": "Ada"})


def classify(call: Callable[[], object]) -> DestinationError:
    with pytest.raises(DestinationError) as info:
        call()
    return info.value


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_refusals_that_need_correction_are_permanent(scripted, status):
    script, url = scripted
    script.status, script.body = status, {"detail": "no"}
    error = classify(create(SandboxCrm(url, timeout=5)))
    assert (error.classification, error.reply) == (Classification.PERMANENT, Reply("http", status))


@pytest.mark.parametrize("status", [429, 503])
def test_refusals_before_processing_are_retryable_and_carry_retry_after(scripted, status):
    script, url = scripted
    script.status, script.headers = status, {"Retry-After": "7"}
    error = classify(create(SandboxCrm(url, timeout=5)))
    assert (error.classification, error.reply) == (Classification.RETRYABLE, Reply("http", status))
    assert error.retry_after == 7


def test_a_500_on_a_create_is_ambiguous_but_on_a_lookup_retryable(scripted):
    script, url = scripted
    script.status = 500
    crm = SandboxCrm(url, timeout=5)
    assert classify(create(crm)).classification == Classification.AMBIGUOUS
    assert classify(lambda: crm.find_record(external_ref="opk_x")).classification == (
        Classification.RETRYABLE
    )


def test_a_409_naming_the_existing_record_is_adopted_as_success(scripted):
    script, url = scripted
    script.status, script.body = 409, {"detail": "exists", "existing_id": "rec_41"}
    effect = create(SandboxCrm(url, timeout=5))()
    assert (effect.ref, effect.adopted, effect.reply) == ("rec_41", True, Reply("http", 409))


def test_a_409_without_the_existing_record_is_permanent(scripted):
    script, url = scripted
    script.status, script.body = 409, {"detail": "exists"}
    assert classify(create(SandboxCrm(url, timeout=5))).classification == Classification.PERMANENT


def test_a_read_timeout_after_the_request_went_out_is_ambiguous(scripted):
    script, url = scripted
    script.sleep = 2.0
    error = classify(create(SandboxCrm(url, timeout=0.5)))
    assert error.classification == Classification.AMBIGUOUS
    assert script.requests == 1  # it did reach the server


def test_a_connection_closed_before_the_answer_is_ambiguous(scripted):
    script, url = scripted
    script.hang_up = True
    error = classify(create(SandboxCrm(url, timeout=5)))
    assert error.classification == Classification.AMBIGUOUS
    assert script.requests == 1


def test_a_refused_connection_is_retryable():
    error = classify(create(SandboxCrm(f"http://127.0.0.1:{free_port()}", timeout=5)))
    assert error.classification == Classification.RETRYABLE


# -- SMTP, against the sandbox's sink ---------------------------------------------


def send(sandbox, key: str = "opk_mail") -> object:
    sender = SmtpSender("127.0.0.1", sandbox.smtp_port, timeout=5, sender="from@onefold.invalid")
    return sender.send(operation_key=key, to="ada@example.com", subject="Thanks", body="Hello")


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("http_503", Classification.RETRYABLE),  # 421 at RCPT: the body never went out
        ("fail_before_commit", Classification.RETRYABLE),  # 451 at RCPT
        ("http_400", Classification.PERMANENT),  # 550 mailbox unavailable
        ("drop_response_after_commit", Classification.AMBIGUOUS),  # accepted, reply lost
        ("http_500_after_commit", Classification.AMBIGUOUS),  # 451 after the body went out
    ],
)
def test_smtp_answers_are_classified_by_whether_the_body_went_out(sandbox, mode, expected):
    sandbox.fault("send_email", mode)
    error = classify(lambda: send(sandbox))
    assert error.classification == expected
    assert error.reply is None or error.reply.protocol == "smtp"
    stored = sandbox.stats()["messages"]
    # Ambiguous means the sink may well hold it; the others mean it certainly does not.
    assert stored == (1 if expected == Classification.AMBIGUOUS else 0)


def test_smtp_success_names_the_message_by_its_operation_key(sandbox):
    effect = send(sandbox, key="opk_ok")
    assert effect.ref == message_id_for("opk_ok")
    # A mail relay's answer is an SMTP reply code, never mistaken for an HTTP status.
    assert effect.reply == Reply("smtp", 250)
    assert sandbox.stats()["messages_by_message_id"] == {message_id_for("opk_ok"): 1}


def test_smtp_with_nobody_listening_is_retryable():
    sender = SmtpSender("127.0.0.1", free_port(), timeout=5, sender="from@onefold.invalid")
    error = classify(lambda: sender.send(operation_key="k", to="a@b.c", subject="s", body="b"))
    assert error.classification == Classification.RETRYABLE


# -- SMTP: internationalised addresses, and failures before the body -------------------


@pytest.fixture
def sink_without_smtputf8() -> Iterator[tuple[SinkController, SandboxStore]]:
    """The sandbox's sink as a relay that does not offer SMTPUTF8, in process."""
    store = SandboxStore()
    sink = SinkController(store, hostname="127.0.0.1", port=0, smtputf8=False)
    sink.start()
    yield sink, store
    sink.stop()


def sender_to(port: int) -> SmtpSender:
    return SmtpSender("127.0.0.1", port, timeout=5, sender="from@onefold.invalid")


def test_an_idn_domain_travels_in_its_ascii_form(sandbox):
    effect = sender_to(sandbox.smtp_port).send(
        operation_key="opk_idn", to="idn@exämple.com", subject="Thanks", body="Hello"
    )
    assert effect.ref == message_id_for("opk_idn")
    (message,) = sandbox.messages()
    assert message["rcpt_to"] == ["idn@xn--exmple-cua.com"]
    assert message["headers"]["To"] == "idn@xn--exmple-cua.com"


def test_a_non_ascii_local_part_is_sent_over_smtputf8_when_the_server_offers_it(sandbox):
    # The sandbox's sink offers SMTPUTF8 (aiosmtpd's controller default).
    sender_to(sandbox.smtp_port).send(
        operation_key="opk_utf8", to="jörg@bücher.example", subject="Danke", body="Grüße"
    )
    (message,) = sandbox.messages()
    assert message["rcpt_to"] == ["jörg@xn--bcher-kva.example"]
    assert message["body"].strip() == "Grüße"


def test_a_non_ascii_local_part_without_smtputf8_is_refused_before_anything_is_sent(
    sink_without_smtputf8,
):
    sink, store = sink_without_smtputf8
    sender = sender_to(sink.port)
    error = classify(
        lambda: sender.send(operation_key="k", to="jörg@example.com", subject="s", body="b")
    )
    assert error.classification == Classification.PERMANENT
    assert "cannot deliver to a non-ASCII address" in error.message
    assert store.stats()["calls"].get("send_email", 0) == 0  # not even RCPT TO
    # The same relay takes an internationalised domain: it travels as ASCII.
    sender.send(operation_key="k2", to="idn@exämple.com", subject="s", body="b")
    assert store.stats()["messages"] == 1


@pytest.mark.parametrize(
    "to",
    [
        "no-at-sign.example.com",
        "@example.com",
        "ada@",
        "ada@exa mple.çom",  # IDNA refuses a space
        "ada@example.com\r\nBcc: eve@example.com",  # a header cannot carry a line break
    ],
)
def test_an_address_that_cannot_be_written_is_permanent_and_nothing_is_sent(sandbox, to):
    error = classify(
        lambda: sender_to(sandbox.smtp_port).send(operation_key="k", to=to, subject="s", body="b")
    )
    assert error.classification == Classification.PERMANENT
    assert sandbox.stats()["calls"].get("send_email", 0) == 0
    assert sandbox.stats()["messages"] == 0


@dataclass
class SmtpScript:
    """A one-connection SMTP server that answers each command from a list."""

    # Command verb -> reply line, or None to close the connection without one.
    replies: dict[str, str | None]
    received: list[bytes] = field(default_factory=list)
    body_bytes: int = 0


@pytest.fixture
def smtp_scripted() -> Iterator[tuple[SmtpScript, int]]:
    script = SmtpScript(replies={})
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        with connection, connection.makefile("rb") as lines:
            if not _say(connection, script.replies.get("greeting", "220 scripted")):
                return
            in_body = False
            for line in lines:
                if in_body:
                    script.body_bytes += len(line)
                    if line != b".\r\n":
                        continue
                    in_body, verb = False, "END"
                else:
                    script.received.append(line)
                    verb = line.split()[0].decode().upper() if line.split() else ""
                reply = script.replies.get(verb, _SMTP_DEFAULTS.get(verb, "250 OK"))
                if verb == "EHLO" and reply == "250 OK":
                    reply = "250-scripted\r\n250 8BITMIME"
                if not _say(connection, reply):
                    return
                in_body = verb == "DATA" and reply is not None and reply.startswith("354")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield script, listener.getsockname()[1]
    listener.close()
    thread.join(timeout=5)


_SMTP_DEFAULTS = {"DATA": "354 end with <CRLF>.<CRLF>", "QUIT": "221 bye"}


def _say(connection: socket.socket, reply: str | None) -> bool:
    if reply is None:
        connection.shutdown(socket.SHUT_RDWR)
        return False
    connection.sendall(reply.encode() + b"\r\n")
    return True


@pytest.mark.parametrize(
    ("replies", "expected"),
    [
        ({"greeting": "554 no service"}, Classification.RETRYABLE),
        ({"greeting": None}, Classification.RETRYABLE),  # hung up before the greeting
        ({"EHLO": None, "HELO": None}, Classification.RETRYABLE),  # dropped at EHLO
        ({"MAIL": "451 4.3.0 busy"}, Classification.RETRYABLE),
        ({"MAIL": "553 5.1.8 sender refused"}, Classification.PERMANENT),
        ({"MAIL": None}, Classification.RETRYABLE),  # dropped at MAIL FROM
        ({"RCPT": None}, Classification.RETRYABLE),  # dropped at RCPT TO
        ({"RCPT": "what?"}, Classification.RETRYABLE),  # unreadable (smtplib: -1), no body
        ({"DATA": "451 4.3.0 not now"}, Classification.RETRYABLE),
        ({"DATA": "554 5.5.0 no"}, Classification.PERMANENT),
        ({"DATA": None}, Classification.RETRYABLE),  # dropped at DATA, before any body
        ({"END": None}, Classification.AMBIGUOUS),  # the body went out, no reply
        ({"END": "451 4.3.0 later"}, Classification.AMBIGUOUS),
        ({"END": "552 5.3.4 too big"}, Classification.PERMANENT),
    ],
)
def test_only_a_failure_after_the_body_went_out_is_ambiguous(smtp_scripted, replies, expected):
    script, port = smtp_scripted
    script.replies = replies
    error = classify(
        lambda: sender_to(port).send(operation_key="k", to="ada@example.com", subject="s", body="b")
    )
    assert error.classification == expected
    assert (script.body_bytes > 0) == ("END" in replies)  # the body went out only then


def test_a_server_reply_quoting_the_address_is_kept_out_of_the_error(smtp_scripted):
    script, port = smtp_scripted
    script.replies = {"RCPT": "550 5.1.1 <ada.lovelace@example.com>: unknown user"}
    error = classify(
        lambda: sender_to(port).send(
            operation_key="k", to="ada.lovelace@example.com", subject="s", body="b"
        )
    )
    assert error.classification == Classification.PERMANENT
    assert "ada.lovelace" not in error.message
    assert "unknown user" in error.message


def test_an_odd_answer_to_quit_does_not_undo_a_delivered_message(smtp_scripted):
    script, port = smtp_scripted
    script.replies = {"QUIT": "500 what"}
    effect = sender_to(port).send(operation_key="k", to="ada@example.com", subject="s", body="b")
    assert effect.ref == message_id_for("k")
