"""A customer's website for browser tests: static pages on loopback, another origin
than Onefold's, served by http.server in a thread (a real socket, as a site is).

Chromium refuses a public page's requests into a private address (Private Network
Access), so a site standing in for www.example.com must itself be on loopback to
load a hook's form.js.
"""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


class Website:
    """Serves the files under `root` at `url` until `stop()`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        handler = functools.partial(_QuietHandler, directory=str(root))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def page(self, name: str, html: str) -> str:
        """Writes the page `name` and returns its URL."""
        (self.root / name).write_text(html)
        return f"{self.url}/{name}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
