"""The sandbox CRM over HTTP/1.1: a stdlib threading server speaking JSON.

Faults are applied here, around the store call, because they are about the
conversation (a lost answer, a 429) rather than the data: "after commit" modes
let the store commit first and then spoil the answer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from lab.sandbox.store import (
    ACTIONS,
    Conflict,
    Fault,
    InvalidInput,
    LookupDisabled,
    NotFound,
    SandboxError,
    SandboxStore,
    clean_record_fields,
    clean_task_fields,
)

logger = logging.getLogger(__name__)

# Generous for a fake CRM; it only guards the process against a runaway client.
MAX_BODY_BYTES = 10 * 1024 * 1024


@dataclass
class Reply:
    """An answer to write, or (`drop`) a connection to close without one."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False


def _error(status: int, detail: str, **extra: Any) -> Reply:
    return Reply(status, {"detail": detail, **extra})


class SandboxHTTPServer(ThreadingHTTPServer):
    """Threading HTTP server that tracks open connections so `stop` can cut them."""

    daemon_threads = True
    # Twenty clients connecting at once must not wait on SYN retransmits.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        store: SandboxStore,
        *,
        verbose: bool = False,
        handler: type[BaseHTTPRequestHandler] | None = None,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.store = store
        self.verbose = verbose
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler or SandboxRequestHandler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (getfqdn), which can
        # stall for seconds on a machine without DNS; the name is never used.
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def serve_in_background(self, name: str) -> threading.Thread:
        """Serves from a daemon thread until `stop_serving`."""
        thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.2}, name=name, daemon=True
        )
        thread.start()
        return thread

    def stop_serving(self, thread: threading.Thread | None) -> None:
        """Stops serving (when `thread` serves), cuts open connections, frees the port."""
        if thread is not None:
            self.shutdown()
            thread.join()
        self.close_connections()
        self.server_close()

    def close_connections(self) -> None:
        """Cuts idle keep-alive connections so their handler threads end."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


Route = tuple[re.Pattern[str], dict[str, str]]
_ROUTES: list[Route] = [
    (re.compile(r"/crm/records"), {"GET": "records_get", "POST": "records_post"}),
    (
        re.compile(r"/crm/records/(?P<record_id>[^/]+)"),
        {"GET": "record_get", "PATCH": "record_patch", "DELETE": "record_delete"},
    ),
    (
        re.compile(r"/crm/records/(?P<record_id>[^/]+)/tasks"),
        {"GET": "tasks_get", "POST": "tasks_post"},
    ),
    (re.compile(r"/crm/records/(?P<record_id>[^/]+)/merge"), {"POST": "merge_post"}),
    (
        re.compile(r"/_sandbox/capabilities"),
        {"GET": "capabilities_get", "POST": "capabilities_post"},
    ),
    (re.compile(r"/_sandbox/messages"), {"GET": "messages_get"}),
    (re.compile(r"/_sandbox/seed"), {"POST": "seed_post"}),
]
# Tests' and drills' controls; every vendor emulator answers them the same way.
CONTROL_ROUTES: list[Route] = [
    (re.compile(r"/_sandbox/reset"), {"POST": "reset_post"}),
    (
        re.compile(r"/_sandbox/faults"),
        {"GET": "faults_get", "POST": "faults_post", "DELETE": "faults_delete"},
    ),
    (
        re.compile(r"/_sandbox/chaos"),
        {"GET": "chaos_get", "POST": "chaos_post", "DELETE": "chaos_delete"},
    ),
    (re.compile(r"/_sandbox/stats"), {"GET": "stats_get"}),
]
_ROUTES += CONTROL_ROUTES


class SandboxRequestHandler(BaseHTTPRequestHandler):
    """Routes one request to a `<route>_<method>` method that returns a `Reply`."""

    server: SandboxHTTPServer
    # Set per request by _dispatch.
    query: dict[str, list[str]]
    raw_body: bytes
    protocol_version = "HTTP/1.1"
    server_version = "OnefoldSandbox/1"
    # (path pattern, {method: handler name}); vendor emulators extend it.
    routes: list[Route] = _ROUTES
    # An idle keep-alive connection is closed after this long.
    timeout = 120
    # Headers and body go out in two writes; with Nagle on, the body waits for
    # the client's delayed ACK (40 ms per request on Linux loopback).
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    @property
    def store(self) -> SandboxStore:
        return self.server.store

    # -- plumbing ------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        self.query = parse_qs(url.query, keep_blank_values=True)
        try:
            raw_body = self._read_body()
        except InvalidInput as exc:
            self.close_connection = True
            self._send(_error(400, exc.detail))
            return
        reply = _error(404, f"no such endpoint: {path}")
        for pattern, methods in self.routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if method not in methods:
                reply = _error(405, f"method {method} not allowed")
                reply.headers["Allow"] = ", ".join(methods)
                break
            self.raw_body = raw_body
            handler: Callable[..., Reply] = getattr(self, methods[method])
            try:
                reply = handler(**match.groupdict())
            except SandboxError as exc:
                reply = _refusal(exc)
            except Exception:
                logger.exception("sandbox: %s %s failed", method, self.path)
                reply = _error(500, "internal error in the sandbox")
            break
        self._send(reply)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise InvalidInput("chunked request bodies are not supported; send Content-Length")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise InvalidInput("invalid Content-Length") from None
        if length < 0 or length > MAX_BODY_BYTES:
            raise InvalidInput("request body too large")
        return self.rfile.read(length) if length else b""

    def _json_body(self) -> dict[str, Any]:
        if not self.raw_body.strip():
            return {}
        try:
            body = json.loads(self.raw_body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidInput(f"invalid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise InvalidInput("the body must be a JSON object")
        return body

    def _param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def _send(self, reply: Reply) -> None:
        if reply.drop:
            # The effect is committed; the client must see a connection that
            # ends without a single byte of answer.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        payload = b"" if reply.status == 204 else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.status != 204:
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if payload:
            self.wfile.write(payload)

    def _faulted(self, action: str, work: Callable[[], Reply]) -> Reply:
        """Runs `work` (the valid, store-changing part of a call) under the next fault."""
        fault = self.store.take_fault(action)
        if fault is None:
            return work()
        before = self.fault_reply_before_commit(fault)
        if before is not None:
            return before
        if fault.mode == "slow":
            # Outside the store lock: a slow call must not stall the others.
            time.sleep(fault.seconds)
        try:
            reply = work()
        except SandboxError as exc:
            # Whatever the outcome, "after commit" modes spoil the answer.
            reply = _refusal(exc)
        if fault.mode == "drop_response_after_commit":
            return Reply(drop=True)
        if fault.mode == "http_500_after_commit":
            return self.fault_reply_after_commit(fault)
        if fault.mode == "http_502_after_commit":
            # A proxy or load balancer in front of the service lost its answer: the
            # gateway's words, whatever the vendor (RFC 9110, 15.6.3).
            return _error(502, "bad gateway: the upstream answer was lost after commit")
        return reply

    def fault_reply_before_commit(self, fault: Fault) -> Reply | None:
        """The answer of a fault that refuses the call before anything is stored
        (None: the call goes ahead). Vendor emulators answer in their vendor's words."""
        return _answer_before_commit(fault)

    def fault_reply_after_commit(self, fault: Fault) -> Reply:
        """The 500 of `http_500_after_commit`, sent after the effect was stored."""
        return _error(500, "injected failure after commit")

    def _idempotency_key(self) -> str | None:
        return self.headers.get("Idempotency-Key") or None

    @staticmethod
    def _created(item: dict[str, Any], replayed: bool) -> Reply:
        if replayed:
            return Reply(200, item, {"Idempotent-Replayed": "true"})
        return Reply(201, item)

    # -- CRM -----------------------------------------------------------------

    def records_get(self) -> Reply:
        ref = self._param("external_ref")
        if ref is not None:
            self.store.count_call("lookup_record")
            return Reply(200, {"results": self.store.find_records(ref)})
        self.store.count_call("list_records")
        limit_param = self._param("limit")
        try:
            limit = int(limit_param) if limit_param else 500
        except ValueError:
            raise InvalidInput("limit must be an integer") from None
        results, next_cursor = self.store.list_records(
            since=self._param("since") or None,
            until=self._param("until") or None,
            cursor=self._param("cursor") or None,
            limit=limit,
        )
        return Reply(200, {"results": results, "next_cursor": next_cursor})

    def records_post(self) -> Reply:
        self.store.count_call("create_record")
        fields = clean_record_fields(self._json_body())
        key = self._idempotency_key()
        return self._faulted(
            "create_record",
            lambda: self._created(*self.store.create_record(fields, idempotency_key=key)),
        )

    def record_get(self, record_id: str) -> Reply:
        return Reply(200, self.store.get_record(record_id))

    def record_patch(self, record_id: str) -> Reply:
        self.store.count_call("update_record")
        changes = clean_record_fields(self._json_body(), partial=True)
        return Reply(200, self.store.update_record(record_id, changes))

    def record_delete(self, record_id: str) -> Reply:
        self.store.count_call("delete_record")
        self.store.delete_record(record_id)
        return Reply(204)

    def tasks_get(self, record_id: str) -> Reply:
        if "external_ref" in self.query:
            self.store.count_call("lookup_task")
            ref = self._param("external_ref")
            return Reply(200, {"results": self.store.list_tasks(record_id, external_ref=ref)})
        return Reply(200, {"results": self.store.list_tasks(record_id)})

    def tasks_post(self, record_id: str) -> Reply:
        self.store.count_call("create_task")
        fields = clean_task_fields(self._json_body())
        key = self._idempotency_key()
        self.store.require_live_record(record_id)
        return self._faulted(
            "create_task",
            lambda: self._created(*self.store.create_task(record_id, fields, idempotency_key=key)),
        )

    def merge_post(self, record_id: str) -> Reply:
        self.store.count_call("merge_record")
        duplicate_id = self._json_body().get("duplicate_id")
        survivor, replayed = self.store.merge_records(
            record_id, duplicate_id, idempotency_key=self._idempotency_key()
        )
        if replayed:
            return Reply(200, survivor, {"Idempotent-Replayed": "true"})
        return Reply(200, survivor)

    # -- control and inspection ----------------------------------------------

    def reset_post(self) -> Reply:
        self.store.reset()
        return Reply(200, {"status": "reset", "capabilities": self.store.capabilities()})

    def capabilities_get(self) -> Reply:
        return Reply(200, self.store.capabilities())

    def capabilities_post(self) -> Reply:
        return Reply(200, self.store.set_capabilities(self._json_body()))

    def faults_get(self) -> Reply:
        return Reply(200, {"results": self.store.faults()})

    def faults_post(self) -> Reply:
        body = self._json_body()
        unknown = set(body) - {"action", "mode", "times", "seconds"}
        if unknown:
            raise InvalidInput(f"unknown fault fields: {', '.join(sorted(unknown))}")
        return Reply(
            200,
            {
                "results": self.store.add_fault(
                    action=body.get("action"),
                    mode=body.get("mode"),
                    times=body.get("times", 1),
                    seconds=body.get("seconds", 1),
                )
            },
        )

    def faults_delete(self) -> Reply:
        self.store.clear_faults()
        return Reply(200, {"results": []})

    def chaos_get(self) -> Reply:
        return Reply(200, self.store.chaos())

    def chaos_post(self) -> Reply:
        body = self._json_body()
        unknown = set(body) - {"rate", "modes", "actions", "seed"}
        if unknown:
            raise InvalidInput(f"unknown chaos fields: {', '.join(sorted(unknown))}")
        return Reply(
            200,
            self.store.set_chaos(
                rate=body.get("rate"),
                modes=body.get("modes"),
                actions=body.get("actions", list(ACTIONS)),
                seed=body.get("seed"),
            ),
        )

    def chaos_delete(self) -> Reply:
        self.store.clear_chaos()
        return Reply(200, self.store.chaos())

    def stats_get(self) -> Reply:
        detail = (self._param("detail") or "1").lower() not in {"0", "false", "no"}
        return Reply(200, self.store.stats(detail=detail))

    def messages_get(self) -> Reply:
        return Reply(200, {"results": self.store.messages()})

    def seed_post(self) -> Reply:
        body = self._json_body()
        created = self.store.seed(
            count=body.get("count"),
            prefix=body.get("prefix", "bench-"),
            created_at=body.get("created_at"),
        )
        return Reply(200, {"created": created})


def _refusal(exc: SandboxError) -> Reply:
    status = {LookupDisabled: 404, NotFound: 404, Conflict: 409}.get(type(exc), 400)
    return Reply(status, exc.as_body())


def _answer_before_commit(fault: Fault) -> Reply | None:
    """The answer of a fault that refuses the call before anything is stored."""
    retry_after = str(max(0, math.ceil(fault.seconds)))
    if fault.mode == "fail_before_commit":
        return _error(500, "injected failure before commit")
    if fault.mode == "http_429":
        return Reply(429, {"detail": "injected rate limit"}, {"Retry-After": retry_after})
    if fault.mode == "http_503":
        return Reply(503, {"detail": "injected unavailability"}, {"Retry-After": retry_after})
    if fault.mode == "http_400":
        return _error(400, "injected validation error")
    return None
