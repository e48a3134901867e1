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
