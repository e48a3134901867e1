"""What every vendor emulator is built from: the sandbox's server, faults and controls.

A vendor emulator (HubSpot, Salesforce, ...) is a real HTTP server on loopback
that answers the vendor's documented paths, status codes and bodies. It is
made of two parts, each a subclass of the sandbox's:

- a store, subclass of `SandboxStore`: the sandbox's fault queue, chaos and
  call counts come with it (`add_fault`, `take_fault`, `count_call`); the
  vendor's objects are the subclass's own, and it overrides `reset()` (call
  super) and `stats()` (same keys as the sandbox's: records, tasks, messages,
  records_by_external_ref, tasks_by_external_ref, messages_by_recipient,
  calls) so that drills and tests count every destination the same way;
- a handler, subclass of `SandboxRequestHandler`, whose `routes` are the
  vendor's paths plus `CONTROL_ROUTES` (`/_sandbox/reset`, `/_sandbox/faults`,
  `/_sandbox/chaos`, `/_sandbox/stats`, with the sandbox's bodies). Vendor
  calls that create something run under `self._faulted(action, work)`, so
  the sandbox's fault modes apply to them unchanged; the handler overrides
  `fault_reply_before_commit` to word a 429/503/400 as its vendor does.

`EmulatorServer` runs one in a background thread::

    with HubSpotEmulator() as hubspot:      # port 0: a free port
        httpx.get(f"{hubspot.http_url}/crm/v3/objects/deals/1")
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import ClassVar

from lab.sandbox.http import SandboxHTTPServer, SandboxRequestHandler
from lab.sandbox.store import SandboxStore


class EmulatorServer:
    """A vendor emulator's HTTP server in a background thread; `store` while running."""

    # Set by each vendor's subclass.
    vendor: ClassVar[str] = ""
    handler_class: ClassVar[type[SandboxRequestHandler]] = SandboxRequestHandler
    store_class: ClassVar[type[SandboxStore]] = SandboxStore

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, verbose: bool = False) -> None:
        self.host = host
        self.port = port
        self.verbose = verbose
        self.store: SandboxStore | None = None
        self._http: SandboxHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def http_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        if self.store is not None:
            raise RuntimeError(f"the {self.vendor} emulator is already running")
        self.store = self.store_class()
        try:
            self._http = SandboxHTTPServer(
                (self.host, self.port), self.store, verbose=self.verbose, handler=self.handler_class
            )
            self.port = self._http.server_port
            self._thread = self._http.serve_in_background(f"{self.vendor}-emulator")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stops the server and closes the store; safe to call twice."""
        if self._http is not None:
            self._http.stop_serving(self._thread)
            self._http = self._thread = None
        if self.store is not None:
            self.store.close()
            self.store = None

    def __enter__(self) -> EmulatorServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
