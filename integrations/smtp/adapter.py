"""Confirmation email over plain SMTP, which offers no idempotency.

The `Message-ID` is derived from the operation key so that receivers and mail
stores can recognise a repeat. Classification follows where the SMTP dialogue
broke: until the first byte of the message body went out nothing can have been
delivered, so a failure there is retryable (connection refused, a 4xx, a
dropped connection) or permanent (a 5xx, an address or message that cannot be
written at all); once the body went out, a lost or unclear reply is ambiguous.

Addresses: the domain of an internationalised address is written in ASCII
(IDNA 2008 with UTS 46 mapping, `idn@exämple.com` -> `idn@xn--exmple-cua.com`),
which every server accepts. A local part outside ASCII can only travel over
SMTPUTF8 (RFC 6531): the message is sent with it when the server offers it,
and refused as permanent, before MAIL FROM, when it does not.

Connections are reused within a process (a worker sends many confirmations),
never across a fork, and only where reuse cannot blur an outcome. A connection
goes back to the pool only after a message it carried was accepted (2xx after
the body), which ends the mail transaction and clears its state (RFC 5321,
4.1.1.4), so the next MAIL FROM needs no RSET. Taken from the pool, it must be
quiet: a server that closed it while idle, or announced 421 before closing
(RFC 5321, 3.8), has left something to read, the end of the stream or the reply,
which a poll of the socket finds without a round trip. It is then closed and a
new connection is opened, before this message's MAIL FROM. (Until 2026-11 an
RSET asked the same, at one round trip per message.) Nothing is ever
reconnected or repeated once MAIL FROM is sent: a connection that dies later,
even just after the poll, fails the message exactly as a new one would
(retryable before the body, ambiguous after it). Idle connections are dropped
after `_IDLE_SECONDS`, well inside the five minutes a server waits for a command
(RFC 5321, 4.5.3.2.7).
"""

from __future__ import annotations

import email.errors
import email.policy
import os
import re
import select
import smtplib
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.utils import format_datetime, parsedate_to_datetime
from functools import lru_cache
from typing import Unpack

import idna
from django.utils import timezone

from integrations.capabilities import Capabilities, CapabilityCheck
from integrations.limits import RequestBudget
from integrations.outcomes import Classification, DestinationError, Effect, smtp_reply
from integrations.writes import MailMessage

# What a server's reply may quote of an address (`550 5.1.1 <ada@example.com>:
# unknown user`): kept out of error messages, which reach review cases and logs.
_QUOTED_ADDRESS = re.compile(r"[^\s<>@]+@[^\s<>@]+")
# Lines that start with a dot are doubled on the wire (RFC 5321, 4.5.2).
_LEADING_DOT = re.compile(rb"(?m)^\.")
# Headers stay ASCII, the body is 7-bit (quoted-printable or base64 when needed):
# a server that offers no 8BITMIME takes it as it is.
_COMPOSE_POLICY = email.policy.SMTP.clone(cte_type="7bit")
# What `plain_message_bytes` writes itself. Unstructured headers: printable ASCII
# words, single-spaced, none that a header parser reads as an encoded word (`=?`).
# The structured ones only in the one form each is written in here: a bare address,
# `format_datetime`'s date, `message_id_for`'s id. Body lines of at most `_MAX_LINE`
# characters, no control characters but the tab and line ends. Anything else is the
# email package's.
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9.,:@_+\-'!?&/]+(?: [A-Za-z0-9.,:@_+\-'!?&/]+)*")
_PLAIN_ADDRESS = re.compile(
    r"[A-Za-z0-9_+\-]+(?:\.[A-Za-z0-9_+\-]+)*@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+"
)
_PLAIN = {
    "From": _PLAIN_ADDRESS,
    "To": _PLAIN_ADDRESS,
    "Date": re.compile(
        r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), (0[1-9]|[12][0-9]|3[01]) "
        r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [0-9]{4} "
        r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9] \+0000"
    ),
    "Message-ID": re.compile(r"<[A-Za-z0-9_\-]+@onefold>"),
    "Reply-To": _PLAIN_ADDRESS,
}
_BODY_UNSAFE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|=\?")
_MAX_LINE = 78  # the policy's max_line_length: longer lines are folded or encoded
# A pooled connection idle longer than this is closed, not reused.
_IDLE_SECONDS = 30.0
# Messages one connection carries before it is closed: bounds what a long-lived
# session accumulates on either side (a relay that limits messages per session
# answers MAIL FROM with a 4xx, which is retryable, but costs a retry).
_MESSAGES_PER_CONNECTION = 100
# Idle connections kept per server (a worker process sends one message at a time).
_IDLE_PER_SERVER = 4


@dataclass
class _Session:
    """A connected SMTP client, after EHLO when it has carried a message."""

    client: smtplib.SMTP
    sent: int = 0
    idle_since: float = 0.0


_PoolKey = tuple[str, int, float]
_pool_lock = threading.Lock()
_pool: dict[_PoolKey, list[_Session]] = {}
_pool_pid: int | None = None


def _pool_take(key: _PoolKey) -> _Session | None:
    """An idle session to `key` opened by this process, or None."""
    global _pool_pid
    expired: list[_Session] = []
    taken = None
    with _pool_lock:
        if _pool_pid != os.getpid():
            # Inherited over fork: the parent's sockets. Dropped unclosed (a QUIT
            # from here would end the parent's session).
            _pool.clear()
            _pool_pid = os.getpid()
        idle = _pool.get(key, [])
        while idle:
            session = idle.pop()
            if time.monotonic() - session.idle_since < _IDLE_SECONDS:
                taken = session
                break
            expired.append(session)
    for session in expired:
        _quit_quietly(session.client)
    return taken


def _pool_return(key: _PoolKey, session: _Session) -> None:
    """Keeps a session whose last message was accepted, if there is room."""
    session.idle_since = time.monotonic()
    with _pool_lock:
        idle = _pool.setdefault(key, [])
        keep = (
            _pool_pid == os.getpid()
            and session.sent < _MESSAGES_PER_CONNECTION
            and len(idle) < _IDLE_PER_SERVER
        )
        if keep:
            idle.append(session)
    if not keep:
        _quit_quietly(session.client)


def smtp_pool_clear() -> None:
    """Closes every idle connection of this process (tests; a changed relay)."""
    with _pool_lock:
        sessions = [session for idle in _pool.values() for session in idle]
        _pool.clear()
    for session in sessions:
        _quit_quietly(session.client)


def _quiet(client: smtplib.SMTP) -> bool:
    """Whether an idle connection has nothing waiting to be read: between transactions
    a server speaks only to say it is leaving (421) or by closing the connection. (Were
    that reply already in smtplib's buffer, MAIL FROM would read it: a 421, retryable.)"""
    sock = client.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):  # closed on this side: fileno() is -1
        return False
    return not readable


def composed_message_bytes(
    headers: Iterable[tuple[str, str]], body: str, *, utf8: bool, html: str | None = None
) -> bytes:
    """The message written by the email package: headers folded and encoded as needed,
    the body 7-bit (quoted-printable or base64 when it must be). With `html`, a
    multipart/alternative of the text and then the HTML (RFC 2046, 5.1.4: the last
    part is the one preferred)."""
    message = EmailMessage(policy=_COMPOSE_POLICY)
    for name, value in headers:
        message[name] = value
    message.set_content(body)
    if html is not None:
        message.add_alternative(html, subtype="html")
    # SMTPUTF8 carries headers as UTF-8; otherwise they must be ASCII.
    return message.as_bytes(policy=email.policy.SMTPUTF8 if utf8 else _COMPOSE_POLICY)


# Each message's Date is the time of its writing: messages written within the same
# second share it, and the email package's parse is a share of a message's CPU.
@lru_cache(maxsize=64)
def _is_date(value: str) -> bool:
    """A date the email package reads as one ("31 Feb" has the shape and is none: the
    package then writes the header empty)."""
    try:
        parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return False
    return True


def plain_message_bytes(headers: Iterable[tuple[str, str]], body: str) -> bytes | None:
    """`composed_message_bytes` of a message that needs no folding and no encoding,
    written directly (the email package parses every header it is given, a large share
    of a worker's CPU under load); None for any other message.
    Plain means: each header a short line in the form `_PLAIN` allows for its name
    (plain ASCII words, `_PLAIN_TEXT`, for the others), and the body ASCII text in lines
    of at most 78 characters. The two agree byte for byte where this answers
    (tests/integrations/smtp/test_smtp_message.py)."""
    lines = []
    for name, value in headers:
        line = f"{name}: {value}"
        # A blank value, or one with space at either end, is left to the email package:
        # how it writes those changed between Python releases ("Date:" or "Date: ").
        if (
            not value
            or value != value.strip()
            or len(line) > _MAX_LINE
            or not _PLAIN.get(name, _PLAIN_TEXT).fullmatch(value)
            or (name == "Date" and not _is_date(value))
        ):
            return None
        lines.append(line)
    if not body.isascii() or _BODY_UNSAFE.search(body):
        return None
    text = body.splitlines() or [""]  # an empty body is still one (empty) line
    if any(len(line) > _MAX_LINE for line in text):
        return None
    lines += [
        'Content-Type: text/plain; charset="utf-8"',
        "Content-Transfer-Encoding: 7bit",
        "MIME-Version: 1.0",
        "",
        *text,
        "",
    ]
    return "\r\n".join(lines).encode("ascii")


_DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def date_header(moment: datetime) -> str:
    """`email.utils.format_datetime(moment)`, written directly for a moment at UTC's
    offset (the email package's goes through a time tuple and `strftime`, several times
    the cost); any other moment through it."""
    if moment.utcoffset() != timedelta(0):  # naive, or another offset
        return format_datetime(moment)
    return (
        f"{_DAY_NAMES[moment.weekday()]}, {moment.day:02d} {_MONTH_NAMES[moment.month - 1]} "
        f"{moment.year:04d} {moment.hour:02d}:{moment.minute:02d}:{moment.second:02d} +0000"
    )


def message_id_for(operation_key: str) -> str:
    return f"<{operation_key}@onefold>"


def envelope_address(address: str) -> str:
    """`address` as it goes on the wire: its domain in ASCII (IDNA), its local part as is.

    Raises DestinationError (permanent) when it cannot be written: no `@`, an
    empty part, or a domain IDNA refuses. An ASCII domain is left alone (IDNA
    would refuse names that are valid in mail, such as ones with underscores).
    """
    local, at, domain = address.strip().rpartition("@")
    if not at or not local or not domain:
        raise DestinationError(
            "the recipient's address has no local part or no domain",
            classification=Classification.PERMANENT,
        )
    if not domain.isascii():
        try:
            domain = idna.encode(domain, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise DestinationError(
                "the recipient's domain cannot be written in ASCII (IDNA refuses it)",
                classification=Classification.PERMANENT,
            ) from exc
    return f"{local}@{domain}"


def quoted_address(address: str) -> str | None:
    """`address` as smtplib's `quoteaddr` writes it in MAIL FROM and RCPT TO, `<address>`,
    for a plain one (`_PLAIN_ADDRESS`); None for any other, left to smtplib. `quoteaddr`
    parses each address with the email package's parser, a share of a worker's CPU for
    an answer known in advance (tests/integrations/smtp/test_smtp_message.py)."""
    return f"<{address}>" if _PLAIN_ADDRESS.fullmatch(address) else None


class SmtpSender:
    """`EmailAdapter` over plain SMTP: it can recognise nothing of a repeat."""

    # A relay limits by its own rules, answered in SMTP replies (421, 451): no budget.
    request_budget: RequestBudget | None = None

    capabilities = Capabilities()

    def verify(self) -> list[CapabilityCheck]:
        """SMTP claims no way to recognise a repeat, so there is nothing to verify."""
        return []

    def __init__(self, host: str, port: int, *, timeout: float, sender: str) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.sender = sender

    def send(self, **message: Unpack[MailMessage]) -> Effect:
        reply_to = message.get("reply_to")
        sender, recipient = envelope_address(self.sender), envelope_address(message["to"])
        utf8 = not (sender.isascii() and recipient.isascii())
        extra = (("Reply-To", envelope_address(reply_to)),) if reply_to else ()
        data = self._message_bytes(
            message,
            sender=sender,
            to=recipient,
            utf8=utf8 or not all(value.isascii() for _, value in extra),
            extra=extra,
        )
        key = (self.host, self.port, self.timeout)
        session = self._session(key)
        try:
            self._envelope(session.client, sender, recipient, utf8=utf8)
            code, reply = self._data(session.client, data)
            effect = self._accepted(code, reply, operation_key=message["operation_key"])
        except BaseException:
            # Whatever state the dialogue is in, this connection carries nothing more.
            _quit_quietly(session.client)
            raise
        session.sent += 1
        _pool_return(key, session)
        return effect

    def _session(self, key: _PoolKey) -> _Session:
        """A pooled connection with nothing to read, else a new one: before MAIL FROM."""
        session = _pool_take(key)
        if session is not None:
            if _quiet(session.client):
                return session
            session.client.close()  # died or refused while idle: nothing of this message sent
        try:
            return _Session(smtplib.SMTP(self.host, self.port, timeout=self.timeout))
        except (OSError, smtplib.SMTPException) as exc:
            raise DestinationError(
                f"SMTP connect failed: {exc}", classification=Classification.RETRYABLE
            ) from exc

    def _message_bytes(
        self,
        message: MailMessage,
        *,
        sender: str,
        to: str,
        utf8: bool,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> bytes:
        """The message as it will be sent (from `sender` to `to`, the envelope's addresses),
        written before connecting: what the email package cannot write is a permanent
        failure, and nothing was sent. `extra` headers (a Reply-To) come after the fixed
        ones; `html` makes it multipart."""
        operation_key, body, html = message["operation_key"], message["body"], message.get("html")
        headers = (
            ("From", sender),
            ("To", to),
            ("Subject", message["subject"]),
            ("Date", date_header(timezone.now())),
            ("Message-ID", message_id_for(operation_key)),
            ("X-Onefold-Operation", operation_key),
            *extra,
        )
        plain = plain_message_bytes(headers, body) if html is None else None
        if plain is not None:
            return plain
        try:
            return composed_message_bytes(headers, body, utf8=utf8, html=html)
        except (ValueError, TypeError, email.errors.MessageError) as exc:
            # UnicodeError is a ValueError: an address or header that cannot be encoded.
            raise DestinationError(
                f"the message could not be written ({type(exc).__name__}); nothing was sent",
                classification=Classification.PERMANENT,
            ) from exc

    def _envelope(self, client: smtplib.SMTP, sender: str, to: str, *, utf8: bool) -> None:
        """EHLO, MAIL FROM and RCPT TO: a failure here is before any of the body went out."""
        try:
            client.ehlo_or_helo_if_needed()
            if utf8 and not client.has_extn("smtputf8"):
                raise DestinationError(
                    "the mail server cannot deliver to a non-ASCII address "
                    "(it does not offer SMTPUTF8); nothing was sent",
                    classification=Classification.PERMANENT,
                )
            mail_from, rcpt_to = quoted_address(sender), quoted_address(to)
            if utf8 or mail_from is None:
                # With SMTPUTF8 smtplib writes the following commands in UTF-8.
                code, reply = client.mail(sender, ["SMTPUTF8"] if utf8 else [])
            else:  # the command `mail()` sends, without its parse of the address
                code, reply = client.docmd("mail", f"FROM:{mail_from}")
            self._check_envelope(code, reply, "MAIL FROM")
            if rcpt_to is None:
                code, reply = client.rcpt(to)
            else:
                code, reply = client.docmd("rcpt", f"TO:{rcpt_to}")
            self._check_envelope(code, reply, "RCPT TO")
        except UnicodeError as exc:
            raise DestinationError(
                f"SMTP envelope could not be encoded ({type(exc).__name__}); nothing was sent",
                classification=Classification.PERMANENT,
            ) from exc
        except (OSError, smtplib.SMTPException) as exc:
            raise DestinationError(
                f"SMTP envelope failed: {exc}", classification=Classification.RETRYABLE
            ) from exc

    def _data(self, client: smtplib.SMTP, data: bytes) -> tuple[int, bytes]:
        """DATA, then the body. smtplib's `data()` does both in one call, which would hide
        whether a failure came before the first byte of the body or after it."""
        try:
            code, reply = client.docmd("data")
        except (OSError, smtplib.SMTPException) as exc:
            raise DestinationError(
                f"SMTP DATA command failed, the body was not sent: {exc}",
                classification=Classification.RETRYABLE,
            ) from exc
        if code != 354:
            # DATA itself was refused: the body never went out.
            raise DestinationError(
                f"SMTP DATA refused: {code} {_reply_text(reply)}",
                classification=reply_classification(code, body_sent=False),
                reply=smtp_reply(code),
            )
        wire = _LEADING_DOT.sub(b"..", data)
        if not wire.endswith(b"\r\n"):
            wire += b"\r\n"
        try:
            client.send(wire + b".\r\n")
            return client.getreply()
        except (OSError, smtplib.SMTPException) as exc:
            # The body went out and the reply never came: it may be delivered.
            raise DestinationError(
                f"SMTP reply lost after DATA: {type(exc).__name__}: {exc}",
                classification=Classification.AMBIGUOUS,
            ) from exc

    def _accepted(self, code: int, reply: bytes, *, operation_key: str) -> Effect:
        """The reply to the body: 2xx is the message's Effect, anything else an error."""
        if not 200 <= code < 300:
            classification = reply_classification(code, body_sent=True)
            what = (
                "message rejected"
                if classification == Classification.PERMANENT
                else "temporary failure after the body was sent"
            )
            raise DestinationError(
                f"SMTP {what}: {code} {_reply_text(reply)}",
                classification=classification,
                reply=smtp_reply(code),
            )
        return Effect(ref=message_id_for(operation_key), reply=smtp_reply(code))

    @staticmethod
    def _check_envelope(code: int, reply: bytes, stage: str) -> None:
        if 200 <= code < 300:
            return
        raise DestinationError(
            f"SMTP {stage} refused: {code} {_reply_text(reply)}",
            classification=reply_classification(code, body_sent=False),
            reply=smtp_reply(code),
        )


def reply_classification(code: int, *, body_sent: bool) -> Classification:
    """The one rule from an SMTP reply that is not the one a command asked for (a 2xx
    to MAIL FROM, RCPT TO and the body; 354 to DATA) to the engine's vocabulary.

    5xx: refused, and it would be refused again, PERMANENT. Anything else (a 4xx, a
    reply smtplib could not read, which it reports as -1) before the first byte of the
    body: nothing can have been delivered, RETRYABLE. After it, AMBIGUOUS: RFC 5321
    says a 4xx there means "not accepted", but servers that accept and then time out
    or answer 4xx are common, and email is at-most-once by design: a person decides,
    nothing is resent blindly.
    """
    if code >= 500:
        return Classification.PERMANENT
    return Classification.AMBIGUOUS if body_sent else Classification.RETRYABLE


def _reply_text(reply: bytes) -> str:
    """A server's reply for an error message, without any address it quotes."""
    return _QUOTED_ADDRESS.sub("[address]", reply.decode(errors="replace"))


def _quit_quietly(client: smtplib.SMTP) -> None:
    """Ends the session. Whatever QUIT meets (a closed connection, an odd reply)
    changes nothing about the message, so it never replaces the outcome."""
    try:
        client.quit()
    except (OSError, smtplib.SMTPException):
        client.close()
