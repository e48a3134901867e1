"""The review block's webhook: one post per case and reason, Slack's, Teams' or a generic
JSON body with no customer details, and a host that resolves to a private address at
send time refused and kept as a failure (never posted).

The network is replaced at its two edges: the resolver (the machine has no internet to
resolve a vendor's host) and httpx's send (recorded, answered 200). The post goes to the
address checked, never to a second lookup's (DNS rebinding): the request names that
address, with the host in its Host header and as the TLS server name.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import httpx
import pytest

from idempotency_core import tasks
from idempotency_core.configuration.versions import config_apply
from idempotency_core.intake.sources import source_get_or_create
from idempotency_core.models import Notification
from tests.factories import permanent_case

pytestmark = pytest.mark.django_db

PUBLIC = "93.184.216.34"
# An address that never takes the connection (an IPv6 one on a machine without IPv6).
UNREACHABLE = {"2606:2800:220:1:248:1893:25c8:1946"}


@pytest.fixture
def resolver(monkeypatch) -> dict[str, Any]:
    """Host -> the address the resolver gives for it (a list: one address per lookup,
    the last one repeated); "lookups" counts the lookups of each host."""
    addresses: dict[str, Any] = {"lookups": Counter()}

    def getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        given = addresses.get(host, PUBLIC)
        if isinstance(given, list):
            given = given[min(addresses["lookups"][host], len(given) - 1)]
        addresses["lookups"][host] += 1
        # A tuple: several addresses in one answer.
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
            for address in (given if isinstance(given, tuple) else (given,))
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return addresses


@pytest.fixture
def posts(monkeypatch) -> list[dict[str, Any]]:
    """Each request httpx was about to put on the network, answered 200."""
    sent: list[dict[str, Any]] = []

    def send(client: httpx.Client, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        if request.url.host in UNREACHABLE:
            raise httpx.ConnectError("Network is unreachable", request=request)
        sent.append(
            {
                "url": str(request.url),
                "host": request.headers["Host"],
                "sni": request.extensions.get("sni_hostname"),
                "json": json.loads(request.content),
                "headers": request.headers,
                "follow_redirects": kwargs.get("follow_redirects"),
            }
        )
        return httpx.Response(200, request=request)

    monkeypatch.setattr(httpx.Client, "send", send)
    return sent


def webhook(url: str) -> None:
    source_get_or_create(name="website")
    config_apply(document={"review": {"notify": {"email": False, "webhook": url}}})


@pytest.mark.parametrize(
    "url, shape",
    [
        ("https://hooks.slack.com/services/T0/B0/x", {"text"}),
        ("https://acme.webhook.office.com/webhookb2/x", {"@type", "@context", "summary", "text"}),
        ("https://hooks.example.com/onefold", {"text", "case"}),
    ],
)
def test_one_post_per_case_in_the_receivers_shape(resolver, posts, url, shape) -> None:
    webhook(url)
    case = permanent_case("hook-1")
    tasks.case_notify(case.pk)
    tasks.case_notify(case.pk)
    (post,) = posts
    host = httpx.URL(url).host
    assert post["url"] == url.replace(host, PUBLIC) and set(post["json"]) == shape
    assert post["host"] == host and post["sni"] == host
    assert post["follow_redirects"] is False
    assert post["headers"]["Idempotency-Key"].startswith("ntf_")
    text = str(post["json"])
    assert f"/console/cases/{case.pk}/" in text and "Refused" in text
    assert "Ada" not in text and "ada@example.com" not in text and "7946" not in text
    assert Notification.objects.get(case=case).status == "sent"


def test_a_host_that_now_resolves_to_a_private_address_is_never_posted(resolver, posts) -> None:
    webhook("https://hooks.example.com/onefold")
    resolver["hooks.example.com"] = "10.0.0.5"  # changed since the block was applied
    case = permanent_case("hook-2")
    tasks.case_notify(case.pk)
    assert posts == []
    row = Notification.objects.get(case=case)
    assert row.status == "failed" and "private" in row.error


def test_a_host_that_rebinds_to_a_private_address_after_the_check_is_posted_to_the_checked_one(
    resolver, posts
) -> None:
    webhook("https://hooks.example.com:8443/onefold")
    # At the send: public for the check, private for any lookup after it.
    resolver["hooks.example.com"] = [PUBLIC, "127.0.0.1"]
    resolver["lookups"].clear()
    case = permanent_case("hook-3")
    tasks.case_notify(case.pk)
    (post,) = posts
    assert post["url"] == f"https://{PUBLIC}:8443/onefold"
    assert post["host"] == "hooks.example.com:8443" and post["sni"] == "hooks.example.com"
    assert resolver["lookups"]["hooks.example.com"] == 1  # the check's, and no other
    assert Notification.objects.get(case=case).status == "sent"


def test_a_checked_address_that_takes_no_connection_gives_way_to_the_next(resolver, posts) -> None:
    webhook("https://hooks.example.com/onefold")
    resolver["hooks.example.com"] = (*UNREACHABLE, PUBLIC)
    case = permanent_case("hook-4")
    tasks.case_notify(case.pk)
    (post,) = posts
    assert post["url"] == f"https://{PUBLIC}/onefold" and post["host"] == "hooks.example.com"
    assert Notification.objects.get(case=case).status == "sent"


def test_a_private_webhook_is_refused_when_the_block_is_applied(resolver) -> None:
    resolver["intranet.example.com"] = "192.168.1.10"
    with pytest.raises(Exception, match="loopback, private or link-local"):
        webhook("https://intranet.example.com/hook")


@pytest.fixture
def tls_receiver(tmp_path, monkeypatch) -> Iterator[dict[str, Any]]:
    """A real HTTPS receiver on loopback for the name hooks.test (a certificate made by
    openssl for that name, trusted through SSL_CERT_FILE as httpx reads it), recording
    each post's Host header, the TLS server name it was asked for, and its body."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=hooks.test"),
            *("-addext", "subjectAltName=DNS:hooks.test"),
        ],
        check=True,
        capture_output=True,
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    received: dict[str, Any] = {"posts": [], "sni": []}
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda _sock, name, _ctx: received["sni"].append(name)

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received["posts"].append({"host": self.headers["Host"], "json": json.loads(body)})
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    real = socket.getaddrinfo

    def getaddrinfo(host: str, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "hooks.test" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    received["url"] = f"https://hooks.test:{server.server_address[1]}/onefold"
    yield received
    server.shutdown()
    server.server_close()


def test_the_pinned_post_reaches_a_real_tls_receiver_by_its_name(tls_receiver, settings) -> None:
    """Connecting to the checked address keeps TLS whole: the receiver is asked for its
    name (SNI), its certificate is verified against that name, and the Host header
    names it."""
    settings.ONEFOLD_WEBHOOK_ALLOW_PRIVATE = True  # the receiver is on loopback
    url = tls_receiver["url"]
    webhook(url)
    case = permanent_case("hook-tls")
    tasks.case_notify(case.pk)
    assert Notification.objects.get(case=case).status == "sent"
    (post,) = tls_receiver["posts"]
    assert post["host"] == httpx.URL(url).netloc.decode() and "hooks.test" in tls_receiver["sni"]
    assert post["json"]["case"]["id"] == case.pk
