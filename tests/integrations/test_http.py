"""The one rule from an HTTP answer to the engine's vocabulary (integrations/http.py).

Pure logic: answers are built in memory, nothing is sent. The vendors' own readings
that come before this rule are proven against their emulators (<vendor>/test_<vendor>.py);
the rule over real sockets, through the sandbox's adapter, in test_classification.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from integrations.base import Classification, Reply
from integrations.http import classify, parse_retry_after, shared_client, status_error

RETRYABLE, PERMANENT, AMBIGUOUS = (
    Classification.RETRYABLE,
    Classification.PERMANENT,
    Classification.AMBIGUOUS,
)


def answer(status: int, method: str = "POST", headers: dict[str, str] | None = None):
    request = httpx.Request(method, "https://crm.example/api/records")
    return httpx.Response(status, headers=headers, json={"detail": "no"}, request=request)


# -- status x safe -> outcome ----------------------------------------------------------


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
@pytest.mark.parametrize("safe", [True, False])
def test_a_2xx_is_success_whatever_the_method(status, safe):
    assert classify(status, safe=safe) is None


@pytest.mark.parametrize("status", [408, 425, 429, 503])
@pytest.mark.parametrize("safe", [True, False])
def test_a_refusal_before_processing_is_retryable_even_for_a_write(status, safe):
    assert classify(status, safe=safe) == RETRYABLE


@pytest.mark.parametrize("status", [400, 401, 402, 403, 404, 405, 409, 410, 412, 413, 422, 499])
@pytest.mark.parametrize("safe", [True, False])
def test_any_other_4xx_is_permanent_even_for_a_read(status, safe):
    assert classify(status, safe=safe) == PERMANENT


@pytest.mark.parametrize("status", [500, 501, 502, 504, 599, 300, 301, 302, 303, 304, 307])
def test_an_unclear_answer_is_ambiguous_for_a_write_and_retryable_for_a_read(status):
    # 5xx: the server may have applied it. 3xx: redirects are never followed, so the
    # request was not done as asked, and a 303 may answer one that was.
    assert classify(status, safe=False) == AMBIGUOUS
    assert classify(status, safe=True) == RETRYABLE


# -- the error an adapter raises ----------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "status", "expected"),
    [
        ("POST", 500, AMBIGUOUS),
        ("PATCH", 502, AMBIGUOUS),
        ("GET", 500, RETRYABLE),
        ("HEAD", 504, RETRYABLE),
        ("get", 500, RETRYABLE),  # methods compare without case
        ("DELETE", 404, PERMANENT),
        ("GET", 404, PERMANENT),
        ("POST", 429, RETRYABLE),
    ],
)
def test_the_error_is_classified_by_the_requests_method(method, status, expected):
    error = status_error(answer(status, method), "HTTP refused")
    assert (error.classification, error.reply, error.message) == (
        expected,
        Reply("http", status),
        "HTTP refused",
    )


def test_a_429_is_retryable_after_its_retry_after():
    error = status_error(answer(429, headers={"Retry-After": "7"}), "rate limited")
    assert (error.classification, error.retry_after) == (RETRYABLE, 7.0)


def test_a_429_without_retry_after_leaves_the_delay_to_the_engines_backoff():
    assert status_error(answer(429), "rate limited").retry_after is None


def test_a_vendors_own_delay_wins_over_retry_after():
    # Pipedrive names its delay in x-ratelimit-reset, HubSpot by the limit's policy.
    error = status_error(answer(503, headers={"Retry-After": "7"}), "busy", retry_after=60.0)
    assert (error.classification, error.retry_after) == (RETRYABLE, 60.0)


@pytest.mark.parametrize("status", [400, 500])
def test_only_a_refusal_to_ask_later_carries_a_delay(status):
    error = status_error(answer(status, headers={"Retry-After": "7"}), "no", retry_after=60.0)
    assert error.retry_after is None


@pytest.mark.parametrize(("method", "expected"), [("POST", AMBIGUOUS), ("GET", RETRYABLE)])
def test_a_success_its_caller_cannot_use_is_unclear(method, expected):
    # Resend's 2xx without an email id, Salesforce's upsert naming no record.
    error = status_error(answer(202, method), "no id in the answer")
    assert (error.classification, error.reply) == (expected, Reply("http", 202))


# -- Retry-After ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("7", 7.0), ("0", 0.0), ("2.5", 2.5), (" 30 ", 30.0), ("-5", 0.0)],
)
def test_retry_after_in_seconds(value, seconds):
    assert parse_retry_after(value) == seconds


def test_retry_after_as_an_http_date_is_the_time_until_then():
    then = datetime.now(UTC) + timedelta(seconds=120)
    assert parse_retry_after(format_datetime(then, usegmt=True)) == pytest.approx(120, abs=2)


def test_retry_after_as_a_date_without_a_zone_is_read_in_gmt():
    then = datetime.now(UTC) + timedelta(seconds=120)
    value = then.strftime("%a, %d %b %Y %H:%M:%S -0000")
    assert parse_retry_after(value) == pytest.approx(120, abs=2)


def test_retry_after_as_a_date_in_the_past_is_now():
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "soon",
        "7 seconds",
        "Wed, 99 Oct 2015 07:28:00 GMT",  # no such day
        "Wed, 21 Oct 99999999999999 07:28:00 GMT",  # a year no date can hold
        "nan",
        "inf",
        "1e400",  # a number too large is infinite
    ],
)
def test_garbage_retry_after_is_no_delay(value):
    assert parse_retry_after(value) is None


def test_garbage_retry_after_on_a_429_leaves_it_retryable():
    error = status_error(answer(429, headers={"Retry-After": "later"}), "rate limited")
    assert (error.classification, error.retry_after) == (RETRYABLE, None)


def test_the_shared_client_leaves_out_only_the_defaults_that_say_nothing():
    sent = shared_client().build_request("POST", "http://crm.test/records", json={"a": 1})
    names = {name.lower() for name in sent.headers}
    assert "accept" not in names
    assert "connection" not in names
    assert {"user-agent", "accept-encoding", "host", "content-type"} <= names
