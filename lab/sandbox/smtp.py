"""The sandbox mail sink: an aiosmtpd server that stores every message it accepts.

Faults for `send_email` are taken once per message. Refusals that store nothing
(`fail_before_commit`, `http_429`, `http_503`, `http_400`) answer the RCPT
command, before the body is sent, so the client can know nothing was delivered.
The others act at the end of DATA, the moment a real relay commits to delivery.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any
from weakref import WeakKeyDictionary

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from lab.sandbox.store import Fault, SandboxStore

# Answers for the faults that do not store the message, or spoil the answer after storing.
_REFUSALS = {
    "fail_before_commit": "451 4.3.0 injected failure before commit",
    "http_429": "421 4.7.0 try again later",
    "http_503": "421 4.7.0 try again later",
    "http_400": "550 5.1.1 mailbox unavailable",
}
# A fixed name, because aiosmtpd's default (socket.getfqdn) can stall on a
# machine without DNS.
SERVER_HOSTNAME = "sandbox.onefold.invalid"


class SinkHandler:
    """aiosmtpd handler: counts, applies the next fault, stores the message."""

    def __init__(self, store: SandboxStore) -> None:
        self.store = store
        # One fault per message, taken at its first recipient and kept for DATA
        # when it is not a refusal; aiosmtpd starts a new envelope per message.
        self._faults: WeakKeyDictionary[Envelope, Fault | None] = WeakKeyDictionary()

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        options: list[str],
    ) -> str:
        if envelope not in self._faults:
            self._faults[envelope] = self.store.take_fault("send_email")
        fault = self._faults[envelope]
        if fault is not None and fault.mode in _REFUSALS:
            self.store.count_call("send_email")
            return _REFUSALS[fault.mode]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.store.count_call("send_email")
        fault = self._faults.get(envelope)
        mode = fault.mode if fault is not None else None
        if fault is not None and mode == "slow":
            await asyncio.sleep(fault.seconds)
        content = envelope.original_content or envelope.content or b""
        if isinstance(content, str):
            content = content.encode("utf-8")
        self.store.store_message(
            mail_from=envelope.mail_from or "",
            rcpt_to=list(envelope.rcpt_tos),
            content=content,
        )
        if mode == "drop_response_after_commit":
            # Stored, now vanish without a reply: the client reads EOF where it
            # expects "250" (smtplib raises SMTPServerDisconnected). Closing
            # the transport makes aiosmtpd cancel this coroutine, so the sleep
            # never ends and no reply is written.
            if server.transport is not None:
                server.transport.close()
            await asyncio.sleep(3600)
        if mode in ("http_500_after_commit", "http_502_after_commit"):
            return "451 4.3.0 injected failure after commit"
        return "250 OK"


class SinkController(Controller):
    """aiosmtpd `Controller` that binds its socket up front, so port 0 works.

    The stock controller passes host and port to `create_server` and then
    connects to `self.port` to check it is up, which fails for port 0.

    `smtputf8` says whether EHLO offers SMTPUTF8 (RFC 6531), aiosmtpd's
    controller default, on: with it off, a client that sends a non-ASCII
    address anyway is answered 500 (strict ASCII), as by a relay without it.
    """

    def __init__(
        self, store: SandboxStore, *, hostname: str, port: int, smtputf8: bool = True
    ) -> None:
        super().__init__(
            SinkHandler(store),
            hostname=hostname,
            port=port,
            server_hostname=SERVER_HOSTNAME,
            enable_SMTPUTF8=smtputf8,
        )
        self._socket: socket.socket | None = None

    def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.hostname else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.hostname, self.port))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        self._socket = sock
        self.port = sock.getsockname()[1]
        super().start()

    def stop(self, no_assert: bool = False) -> None:
        if self._thread is None:
            # start() failed before the loop ran: nothing to cancel, only to free.
            if self._socket is not None:
                self._socket.close()
            self.loop.close()
            return
        super().stop(no_assert=no_assert)

    def _create_server(self) -> Any:
        return self.loop.create_server(self._factory_invoker, sock=self._socket)
