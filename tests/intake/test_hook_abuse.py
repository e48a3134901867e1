"""Hooks under abuse: hostile bodies, credential floods, odd timestamps, probing.

Each test is one finding of an outside review of the hooks, sent through the real
view (Django's test client) to the real database:

- parsing stays linear: a 64 KB hostile body is answered in under 50 ms;
- a flood of wrong credentials neither spends the source's rate nor writes a
  row per attempt, and a limit per client address applies before verification;
- a timestamp that is NaN, infinite, absurd or an all-digit overflow is a 4xx,
  never a 500, and a signature never stays fresh for ever;
- an unknown source and a wrong credential get the very same answer; `form.js`
  answers only for an `html` source's own hook.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client

from tests.intake.test_hooks import deliver, hook_source
from tests.support.senders import SAMPLES

pytestmark = pytest.mark.django_db

# A 64 KB body must be answered within this (the figure, on a quiet machine).
HOSTILE_BODY_BUDGET_SECONDS = 0.050
HOSTILE_BODY_BYTES = 63 * 1024


@pytest.fixture(autouse=True)
def _fresh_rate_counts() -> Iterator[None]:
    # The rate counts live in the cache, which outlives a test's transaction.
    cache.clear()
    yield
    cache.clear()


def fastest(call: Callable[[], Any], *, runs: int = 5) -> tuple[float, Any]:
    """The shortest of `runs` timings and the last answer: the machine's other load
    only ever adds time, so the minimum is the fairest reading of the code's cost."""
    best, answer = float("inf"), None
    for _ in range(runs):
        started = time.perf_counter()
        answer = call()
        best = min(best, time.perf_counter() - started)
    return best, answer


def multipart(parts: list[tuple[str, bytes]], boundary: str = "xyz") -> tuple[bytes, str]:
    body = b"".join(
        b'--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n'
        % (boundary.encode(), name.encode(), value)
        for name, value in parts
    )
    return body + b"--%s--\r\n" % boundary.encode(), f"multipart/form-data; boundary={boundary}"


def nested_multipart(depth: int) -> tuple[bytes, str]:
    """Each part a multipart of its own, `depth` levels down."""
    body = b""
    for level in range(depth):
        body += (
            b'--b%d\r\nContent-Disposition: form-data; name="n"\r\n'
            b"Content-Type: multipart/mixed; boundary=b%d\r\n\r\n" % (level, level + 1)
        )
    for level in reversed(range(depth)):
        body += b"\r\n--b%d--\r\n" % level
    return body, "multipart/form-data; boundary=b0"


# -- F1: parsing is linear -------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"a=&" * (HOSTILE_BODY_BYTES // 3), id="a=&a=&..."),
        # As many fields as a form may have, each as long as the body allows.
        pytest.param(b"&".join(b"a%d=%s" % (n, b"v" * 55) for n in range(1000)), id="1000-full"),
    ],
)
def test_a_64_kb_form_body_is_answered_in_under_50_ms(body):
    _, path = hook_source("html")
    client = Client()
    seconds, response = fastest(
        lambda: client.post(path, body, content_type="application/x-www-form-urlencoded")
    )
    print(f"\n{len(body)} B form: {response.status_code} in {seconds * 1000:.1f} ms")
    assert response.status_code < 500
    assert seconds < HOSTILE_BODY_BUDGET_SECONDS


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: multipart([("a", b"v")] * 1000), id="1000-parts-one-name"),
        pytest.param(
            lambda: multipart([(f"q{n}", b"v") for n in range(1100)]), id="1100-distinct-parts"
        ),
        pytest.param(lambda: nested_multipart(560), id="560-deep"),
        # As many parts as a hook reads, each as long as the body allows: the most
        # a body can make the parser do.
        pytest.param(
            lambda: multipart([(f"q{n}", b"v" * 250) for n in range(200)]), id="200-full-parts"
        ),
    ],
)
def test_a_hostile_multipart_body_is_answered_in_under_50_ms(build):
    _, path = hook_source("jotform")
    body, content_type = build()
    client = Client()
    seconds, response = fastest(lambda: client.post(path, body, content_type=content_type))
    print(f"\n{len(body)} B multipart: {response.status_code} in {seconds * 1000:.1f} ms")
    assert response.status_code < 500
    assert seconds < HOSTILE_BODY_BUDGET_SECONDS


def test_repeated_names_still_collect_into_a_list():
    from idempotency_core.intake.senders.parsing import parse_body

    document = parse_body(b"a=1&" * 500 + b"b=2", content_type="", parser="form")
    assert document["a"] == ["1"] * 500 and document["b"] == "2"
    body, content_type = multipart([("a", b"1")] * 3 + [("b", b"2")])
    document = parse_body(body, content_type=content_type, parser="multipart")
    assert document == {"a": ["1", "1", "1"], "b": "2"}


def test_a_jotform_delivery_still_parses_with_its_file_parts_as_names():
    sample = SAMPLES["jotform"]
    _, path = hook_source("jotform")
    assert deliver(Client(), path, sample).status_code == 200
    body, content_type = multipart([("rawRequest", b'{"q3_name": "Ada"}')])
    body = body.replace(
        b"--xyz--",
        b'--xyz\r\nContent-Disposition: form-data; name="upload"; filename="cv.pdf"\r\n'
        b"Content-Type: application/pdf\r\n\r\n%PDF-1.4\r\n--xyz--",
    )
    from idempotency_core.intake.senders.parsing import parse_body

    document = parse_body(body, content_type=content_type, parser="multipart_json")
    assert document["upload"] == "cv.pdf" and document["q3_name"] == "Ada"
