"""The review block's webhook: one post per case and reason, Slack's, Teams' or a generic
JSON body with no customer details, and a host that resolves to a private address at
send time refused and kept as a failure (never posted).

The network is replaced at its two edges: the resolver (the machine has no internet to
resolve a vendor's host) and httpx's post (recorded, answered 200).
"""

from __future__ import annotations

import socket
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


@pytest.fixture
def resolver(monkeypatch) -> dict[str, str]:
    """Host -> the address the resolver gives for it."""
    addresses: dict[str, str] = {}

    def getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        address = addresses.get(host, PUBLIC)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return addresses


@pytest.fixture
def posts(monkeypatch) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    def post(url: str, **kwargs: Any) -> httpx.Response:
        sent.append({"url": url, **kwargs})
        return httpx.Response(200, request=httpx.Request("POST", url))

    monkeypatch.setattr(httpx, "post", post)
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
    assert post["url"] == url and set(post["json"]) == shape
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


def test_a_private_webhook_is_refused_when_the_block_is_applied(resolver) -> None:
    resolver["intranet.example.com"] = "192.168.1.10"
    with pytest.raises(Exception, match="loopback, private or link-local"):
        webhook("https://intranet.example.com/hook")
