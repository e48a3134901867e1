"""Confirmation email over plain SMTP, which offers no idempotency.

The `Message-ID` is derived from the operation key so that receivers and mail
stores can recognise a repeat. Classification follows where the SMTP dialogue
broke: before DATA was accepted nothing was sent (retryable, or permanent on a
5xx); once the message body went out, a lost reply is ambiguous.
"""

from __future__ import annotations

import smtplib
from email.message import EmailMessage
from email.utils import format_datetime

from django.utils import timezone

from integrations.base import Capabilities, Classification, DestinationError, Effect, smtp_reply


def message_id_for(operation_key: str) -> str:
    return f"<{operation_key}@onefold>"


class SmtpSender:
    """`EmailAdapter` over plain SMTP: it can recognise nothing of a repeat."""

    capabilities = Capabilities()

    def __init__(self, host: str, port: int, *, timeout: float, sender: str) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout
        self.sender = sender

    def send(self, *, operation_key: str, to: str, subject: str, body: str) -> Effect:
        message = self._message(operation_key=operation_key, to=to, subject=subject, body=body)
        try:
            client = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
        except (OSError, smtplib.SMTPException) as exc:
            raise DestinationError(
                f"SMTP connect failed: {exc}", classification=Classification.RETRYABLE
            ) from exc
        with client:
            self._envelope(client, to)
            try:
                code, reply = client.data(message.as_bytes())
            except smtplib.SMTPDataError as exc:
                # DATA itself was refused (no 354): the body never went out.
                raise DestinationError(
                    f"SMTP DATA refused: {exc.smtp_code} {exc.smtp_error!r}",
                    classification=Classification.PERMANENT
                    if exc.smtp_code >= 500
                    else Classification.RETRYABLE,
                    reply=smtp_reply(exc.smtp_code),
                ) from exc
            except (OSError, smtplib.SMTPException) as exc:
                # The body went out and the reply never came: it may be delivered.
                raise DestinationError(
                    f"SMTP reply lost after DATA: {type(exc).__name__}: {exc}",
                    classification=Classification.AMBIGUOUS,
                ) from exc
        return self._accepted(code, reply, operation_key=operation_key)

    def _message(self, *, operation_key: str, to: str, subject: str, body: str) -> EmailMessage:
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = to
        message["Subject"] = subject
        message["Date"] = format_datetime(timezone.now())
        message["Message-ID"] = message_id_for(operation_key)
        message["X-Onefold-Operation"] = operation_key
        message.set_content(body)
        return message

    def _envelope(self, client: smtplib.SMTP, to: str) -> None:
        """MAIL FROM and RCPT TO: a failure here is before any of the body went out."""
        try:
            client.ehlo_or_helo_if_needed()
            code, reply = client.mail(self.sender)
            self._check_envelope(code, reply, "MAIL FROM")
            code, reply = client.rcpt(to)
            self._check_envelope(code, reply, "RCPT TO")
        except (OSError, smtplib.SMTPException) as exc:
            raise DestinationError(
                f"SMTP envelope failed: {exc}", classification=Classification.RETRYABLE
            ) from exc

    def _accepted(self, code: int, reply: bytes, *, operation_key: str) -> Effect:
        """The reply to the body: 2xx is the message's Effect, anything else an error."""
        if code >= 500:
            raise DestinationError(
                f"SMTP message rejected: {code} {reply.decode(errors='replace')}",
                classification=Classification.PERMANENT,
                reply=smtp_reply(code),
            )
        if code >= 400:
            # RFC 5321 says a 4xx here means "not accepted", but servers that
            # accept and then time out or answer 4xx are common. Email is
            # at-most-once by design, so a 4xx after the body went out is
            # treated as ambiguous: a person decides, nothing is resent blindly.
            raise DestinationError(
                f"SMTP temporary failure after the body was sent: {code} "
                f"{reply.decode(errors='replace')}",
                classification=Classification.AMBIGUOUS,
                reply=smtp_reply(code),
            )
        return Effect(ref=message_id_for(operation_key), reply=smtp_reply(code))

    @staticmethod
    def _check_envelope(code: int, reply: bytes, stage: str) -> None:
        if code < 400:
            return
        raise DestinationError(
            f"SMTP {stage} refused: {code} {reply.decode(errors='replace')}",
            classification=Classification.PERMANENT if code >= 500 else Classification.RETRYABLE,
            reply=smtp_reply(code),
        )
