"""`SandboxServer`: the CRM over HTTP and the mail sink over SMTP, sharing one store."""

from __future__ import annotations

import threading
from types import TracebackType

from lab.sandbox.http import SandboxHTTPServer
from lab.sandbox.smtp import SinkController
from lab.sandbox.store import SandboxStore


class SandboxServer:
    """Runs both sandbox services in background threads.

    Port 0 picks a free port; after `start()`, `http_port` and `smtp_port`
    hold the ports actually bound. Usable as a context manager, which starts
    on enter and stops on exit.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        http_port: int = 8765,
        smtp_port: int = 8025,
        db_path: str | None = None,
        *,
        verbose: bool = False,
    ) -> None:
        self.host = host
        self.http_port = http_port
        self.smtp_port = smtp_port
        self.db_path = db_path
        self.verbose = verbose
        self.store: SandboxStore | None = None
        self._http: SandboxHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._smtp: SinkController | None = None

    @property
    def http_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.http_port}"

    def start(self) -> None:
        if self.store is not None:
            raise RuntimeError("the sandbox is already running")
        self.store = SandboxStore(self.db_path)
        try:
            self._http = SandboxHTTPServer(
                (self.host, self.http_port), self.store, verbose=self.verbose
            )
            self.http_port = self._http.server_port
            self._http_thread = self._http.serve_in_background("sandbox-http")
            self._smtp = SinkController(self.store, hostname=self.host, port=self.smtp_port)
            self._smtp.start()
            self.smtp_port = self._smtp.port
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops both services and closes the store; safe to call twice."""
        if self._smtp is not None:
            self._smtp.stop()
            self._smtp = None
        if self._http is not None:
            self._http.stop_serving(self._http_thread)
            self._http = self._http_thread = None
        if self.store is not None:
            self.store.close()
            self.store = None

    def __enter__(self) -> SandboxServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
