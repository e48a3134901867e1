"""Malformed cursors and filters on the console's lists: 4xx or the page with an error, never 5xx.

An outside review found 13 of 313 malformed queue and audit cursors
answering 500. The corpus below is generated from the ways a cursor or a filter
value goes wrong (not base64, base64 of the wrong JSON shape, wrong types, values
beyond what PostgreSQL or Python's dates hold, NUL bytes, lone surrogates) and is
thrown at the three lists that page: the queue, the audit trail and the staff API.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import permanent_case

pytestmark = pytest.mark.django_db

WHEN = "2026-11-29T10:15:00+00:00"

# Values that break one column of a cursor or a filter, each for its own reason.
BAD_SCALARS: list[Any] = [
    None,
    True,
    "",
    "abc",
    "1",
    "\x00",
    f"{WHEN}\x00",
    "\udc00",
    "2026-13-45T99:99:99",
    "2026-02-30T10:00:00Z",
    "9999-12-31T23:59:59-14:00",
    "0001-01-01T00:00:00+14:00",
    "10000-01-01T00:00:00Z",
    "2026-11-29T10:15:00+99:00",
    -1,
    0,
    1.5,
    2**31,
    2**63,
    -(2**63) - 1,
    10**40,
    1e308,
    [],
    [1],
    {},
    {"a": 1},
    "x" * 10_000,
]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _json_cursor(value: Any) -> str:
    # allow_nan: a hostile client can write NaN; ensure_ascii keeps lone surrogates as \udc00.
    return _b64(json.dumps(value).encode())


def malformed_cursors() -> Iterator[str]:
    """About 200 cursors no page ever printed."""
    # Not base64 at all, or base64 of bytes that are not JSON.
    yield from ["!", "%%%", "a", "ab=", "====", "\x00", "é", "A" * 100_001, "null", "[1,2]"]
    yield from [_b64(b"\xff\xfe\x00"), _b64(b"not json"), _b64(b"[1,"), _b64(b"\x00" * 8)]
    yield _b64(b"[" * 5000 + b"]" * 5000)  # deep nesting: json.loads recursion
    yield _b64(b"[" + b"9" * 5000 + b",1]")  # an integer beyond int()'s digit limit
    yield _b64(b'["2026-11-29T10:15:00Z", NaN]')
    yield _b64(b'["2026-11-29T10:15:00Z", Infinity]')
    # Valid JSON of the wrong shape.
    for shape in (None, 1, "s", {}, {"at": WHEN, "id": 1}, [], [WHEN], [WHEN, 1, 2, 3]):
        yield _json_cursor(shape)
    # The right shape for (created_at, id) / (-at, -id), one column wrong at a time.
    for bad in BAD_SCALARS:
        yield _json_cursor([bad, 1])
        yield _json_cursor([WHEN, bad])
    # The right shape for (kind, created_at, id).
    for bad in BAD_SCALARS:
        yield _json_cursor([bad, WHEN, 1])
        yield _json_cursor(["permanent_failure", bad, 1])
        yield _json_cursor(["permanent_failure", WHEN, bad])


def malformed_filters() -> Iterator[tuple[str, dict[str, str]]]:
    """About 100 filter values, each for the list whose filter it breaks."""
    texts = ["\x00", "a\x00b", "\udc00", "x" * 10_000, "' OR 1=1 --", "%", "_", "\\"]
    numbers = ["abc", "1e400", "-1e400", "NaN", "Infinity", "1.5", str(2**63), str(10**40), ""]
    dates = ["9999-12-31", "0001-01-01", "2026-02-30", "99999-01-01", "\x00", "yesterday"]
    for value in texts:
        for name in ("q", "owner", "kind", "status", "step"):
            yield "queue", {name: value}
        for name in ("action", "actor"):
            yield "audit", {name: value}
    for value in numbers:
        for name in ("source", "destination"):
            yield "queue", {name: value}
        yield "audit", {"case": value}
    for value in dates:
        for name in ("opened_after", "opened_before"):
            yield "queue", {name: value}
        for name in ("since", "until"):
            yield "audit", {name: value}
    for value in ("", "\x00", "oldest\x00", "x" * 5000, "__class__"):
        yield "queue", {"sort": value}


def drf_cursors() -> Iterator[str]:
    """DRF's cursor is base64 of a query string: o (offset), r (reverse), p (position)."""
    for position in ["", "abc", "\x00", f"{WHEN}\x00", "2026-13-45", "9999-12-31T23:59:59-14:00"]:
        yield _b64(f"o=0&r=0&p={position}".encode())
    for offset in ["-1", "abc", str(10**40), "1e9"]:
        yield _b64(f"o={offset}&p={WHEN}".encode())
    yield from ["!", "\x00", _b64(b"\xff\xfe"), _b64(b"r=1&r=0&p=x&p=y"), _b64(b"p=%00")]


CORPUS: list[tuple[str, dict[str, str]]] = [
    *(
        (page, {direction: cursor})
        for cursor in malformed_cursors()
        for page, direction in (("queue", "after"), ("audit", "before"))
    ),
    *(("queue", {"before": cursor, "sort": "kind"}) for cursor in malformed_cursors()),
    *malformed_filters(),
    *(("api", params) for page, params in malformed_filters() if page == "queue"),
]


def _query(params: dict[str, str]) -> str:
    # Lone surrogates cannot be UTF-8 encoded by urlencode: send their raw bytes,
    # as a hostile client would.
    return "&".join(
        f"{name}={quote(value.encode('utf-8', 'surrogatepass'), safe='')}"
        for name, value in params.items()
    )


URLS = {"queue": "console:case-list", "audit": "console:audit-list", "api": "console:api-case-list"}


def test_the_corpus_is_as_large_as_the_review_that_found_the_500s():
    assert len(CORPUS) >= 300


def _server_errors(users, corpus: list[tuple[str, dict[str, str]]]) -> list[Any]:
    permanent_case("hostile-queries")  # a row, so that a cursor's filter reaches the database
    client = Client(raise_request_exception=False)
    client.force_login(users["superuser"])
    failures = []
    for page, params in corpus:
        response = client.get(f"{reverse(URLS[page])}?{_query(params)}")
        if response.status_code >= 500:
            failures.append((page, {k: v[:80] for k, v in params.items()}))
    return failures


def test_no_malformed_cursor_or_filter_gets_a_server_error(users):
    assert _server_errors(users, CORPUS) == []


def test_a_malformed_page_link_is_refused_not_read_as_the_first_page(users):
    permanent_case("hostile-link")
    client = Client(raise_request_exception=False)
    client.force_login(users["reviewer"])
    for name in ("console:case-list", "console:audit-list"):
        assert client.get(reverse(name)).status_code == 200
        assert client.get(reverse(name), {"after": _json_cursor([WHEN, "1"])}).status_code == 400
        assert client.get(reverse(name), {"before": "!"}).status_code == 400
    # A cursor a page printed still works.
    assert (
        client.get(reverse("console:case-list"), {"after": _json_cursor([WHEN, 1])}).status_code
        == 200
    )


def test_no_malformed_staff_api_cursor_gets_a_server_error(users):
    assert _server_errors(users, [("api", {"cursor": c}) for c in drf_cursors()]) == []
