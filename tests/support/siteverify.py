"""A stand-in for the CAPTCHA providers' siteverify API, on loopback: tests never
call the internet.

It answers as Turnstile, hCaptcha and reCAPTCHA document theirs: a POST,
form-encoded, of `secret`, `response` and optionally `remoteip`, answered 200 with
JSON `success`, `error-codes` and, on success, `hostname` and `challenge_ts`. A token
starting with "pass" is good once (again: `timeout-or-duplicate`, as a single-use
token is); any other is `invalid-input-response`; a secret other than the one given
is `invalid-input-secret`. `mode` makes it misbehave as a provider in trouble does:
"error" (HTTP 500), "slow" (answers after `slow_seconds`); `stop()` closes it, so a
connection is refused. Every request is kept in `requests`, and `on_request`, when
set, is called with each before it is answered.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

SECRET = "0x-stand-in-captcha-secret"


class SiteverifyStandIn:
    def __init__(self, secret: str = SECRET) -> None:
        self.secret = secret
        self.mode = "ok"
        self.slow_seconds = 3.0
        self.requests: list[dict[str, Any]] = []
        self.on_request: Callable[[dict[str, Any]], None] | None = None
        self._used: set[str] = set()
        self._lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode()
                request = {
                    "path": self.path,
                    "content_type": self.headers.get("Content-Type", ""),
                    "form": {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()},
                }
                status, body = stand_in._answer(request)
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/siteverify"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _answer(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(request)
        if self.on_request is not None:
            self.on_request(request)
        if self.mode == "error":
            return 500, {"error": "stand-in: internal server error"}
        if self.mode == "slow":
            time.sleep(self.slow_seconds)
        form = request["form"]
        if form.get("secret") != self.secret:
            return 200, {"success": False, "error-codes": ["invalid-input-secret"]}
        token = form.get("response", "")
        if not token:
            return 200, {"success": False, "error-codes": ["missing-input-response"]}
        with self._lock:
            seen = token in self._used
            self._used.add(token)
        if not token.startswith("pass"):
            return 200, {"success": False, "error-codes": ["invalid-input-response"]}
        if seen:
            return 200, {"success": False, "error-codes": ["timeout-or-duplicate"]}
        return 200, {
            "success": True,
            "error-codes": [],
            "hostname": "www.example.com",
            "challenge_ts": "2026-12-01T10:00:00Z",
        }

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
