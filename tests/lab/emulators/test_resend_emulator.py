"""The Resend emulator as strict as Resend documents, asked over HTTP on loopback.

Each test is one rule of Resend's documentation (cited in lab/emulators/resend.py)
seen from a client that speaks raw HTTP: the key, the team's rate limit, the
quotas, the domains and the checks of a send. The adapter's view of the same
rules is in tests/integrations/resend/test_resend.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lab.emulators.resend import (
    DEFAULT_API_KEY,
    DEFAULT_DOMAIN,
    DEFAULT_RATE_LIMIT,
    DEFAULT_SENDER,
    ResendEmulator,
)

AUTH = {"Authorization": f"Bearer {DEFAULT_API_KEY}"}
EMAIL = {"from": DEFAULT_SENDER, "to": "ada@example.com", "subject": "Received", "text": "Hi"}


@pytest.fixture(scope="module")
def emulator() -> Iterator[ResendEmulator]:
    with ResendEmulator() as server:
        yield server


@pytest.fixture
def api(emulator: ResendEmulator) -> Iterator[httpx.Client]:
    """A client of the emulator, reset: default key, rate limit on, domain verified."""
    with httpx.Client(base_url=emulator.http_url, timeout=30) as http:
        assert http.post("/_sandbox/reset").status_code == 200
        yield http


def configure(api: httpx.Client, **settings: Any) -> httpx.Response:
    return api.post("/_sandbox/config", json=settings)


def send(
    api: httpx.Client, headers: dict[str, str] | None = None, **changes: Any
) -> httpx.Response:
    return api.post("/emails", json={**EMAIL, **changes}, headers={**AUTH, **(headers or {})})


def sent(api: httpx.Client) -> int:
    return int(api.get("/_sandbox/stats").json()["messages"])


def refusal(response: httpx.Response) -> tuple[int, str]:
    body = response.json()
    assert body["statusCode"] == response.status_code  # Resend's error shape
    return response.status_code, body["name"]


# -- the API key -------------------------------------------------------------------------


# A fixed id: pytest-xdist needs the same test names in every worker.
@pytest.mark.parametrize("path", ["/domains", "/emails/4ef9a417-02e9-4d39-ad75-9611e0fcc33f"])
def test_no_key_is_401_missing_api_key_and_another_key_403_invalid_api_key(
    api: httpx.Client, path: str
) -> None:
    assert refusal(api.get(path)) == (401, "missing_api_key")
    assert refusal(api.get(path, headers={"Authorization": "Basic cmVfeA=="})) == (
        401,
        "missing_api_key",
    )
    wrong = api.get(path, headers={"Authorization": "Bearer re_someone_elses_key"})
    assert refusal(wrong) == (403, "invalid_api_key")
    assert wrong.json()["message"] == "API key is invalid."
    assert api.get("/domains", headers=AUTH).status_code == 200


def test_a_send_with_a_wrong_key_sends_nothing(api: httpx.Client) -> None:
    refused = send(api, headers={"Authorization": "Bearer re_someone_elses_key"})
    assert refusal(refused) == (403, "invalid_api_key")
    assert refusal(api.post("/emails", json=EMAIL)) == (401, "missing_api_key")
    assert sent(api) == 0


def test_the_key_is_a_setting_and_only_that_key_is_accepted(api: httpx.Client) -> None:
    assert configure(api, api_key="re_the_accounts_real_key").status_code == 200
    assert refusal(send(api)) == (403, "invalid_api_key")
    accepted = send(api, headers={"Authorization": "Bearer re_the_accounts_real_key"})
    assert accepted.status_code == 200
    assert sent(api) == 1


def test_a_sending_only_key_sends_but_reads_nothing(api: httpx.Client) -> None:
    configure(api, api_key_permission="sending_access")
    assert refusal(api.get("/domains", headers=AUTH)) == (401, "restricted_api_key")
    assert send(api).status_code == 200


# -- the team's rate limit ---------------------------------------------------------------


def test_two_requests_a_second_then_429_with_resends_headers(api: httpx.Client) -> None:
    first, second = send(api, to="a@example.com"), api.get("/domains", headers=AUTH)
    assert (first.status_code, second.status_code) == (200, 200)
    assert first.headers["ratelimit-limit"] == str(DEFAULT_RATE_LIMIT) == "2"
    assert (first.headers["ratelimit-remaining"], second.headers["ratelimit-remaining"]) == (
        "1",
        "0",
    )
    assert first.headers["ratelimit-reset"] == "1"

    limited = send(api, to="b@example.com")
    assert refusal(limited) == (429, "rate_limit_exceeded")
    assert limited.json()["message"].startswith("Too many requests.")
    assert limited.headers["retry-after"] == "1"
    assert limited.headers["ratelimit-remaining"] == "0"
    assert sent(api) == 1  # the refused send sent nothing

    time.sleep(1.05)
    assert send(api, to="b@example.com").status_code == 200
    calls = api.get("/_sandbox/stats").json()["calls"]
    assert (calls["send_email"], calls["rate_limited"], calls["read_domains"]) == (3, 1, 1)


def test_a_refused_request_does_not_count_against_the_window(api: httpx.Client) -> None:
    assert [send(api, to=f"p{n}@example.com").status_code for n in range(2)] == [200, 200]
    time.sleep(0.5)
    assert send(api).status_code == 429
    time.sleep(0.55)  # the first two left the window; the refused third never entered it
    answers = [send(api, to=f"q{n}@example.com") for n in range(2)]
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[1].headers["ratelimit-remaining"] == "0"


def test_a_test_can_lift_the_rate_limit_by_name(api: httpx.Client) -> None:
    configure(api, rate_limit=None)
    answers = [send(api, to=f"p{n}@example.com") for n in range(6)]
    assert [a.status_code for a in answers] == [200] * 6
    assert "ratelimit-limit" not in answers[-1].headers
    configure(api, rate_limit=5)
    assert api.get("/domains", headers=AUTH).headers["ratelimit-limit"] == "5"


def test_the_rate_limit_is_checked_after_the_key(api: httpx.Client) -> None:
    """A request with a wrong key is not the team's: it is refused for the key and
    does not spend the team's window."""
    for _ in range(3):
        assert send(api, headers={"Authorization": "Bearer re_wrong"}).status_code == 403
    assert [send(api, to=f"p{n}@example.com").status_code for n in range(2)] == [200, 200]


# -- quotas --------------------------------------------------------------------------------


def test_a_daily_quota_refuses_the_email_past_it(api: httpx.Client) -> None:
    configure(api, daily_quota=2, rate_limit=None)  # lifted: this test is about the quota
    first = send(api, to=["a@example.com"])
    assert first.headers["x-resend-daily-quota"] == "1"
    assert first.headers["x-resend-monthly-quota"] == "1"
    # Each recipient is one email of the quota: two more do not fit.
    over = send(api, to=["b@example.com", "c@example.com"])
    assert refusal(over) == (429, "daily_quota_exceeded")
    assert over.json()["message"] == "You have exceeded your daily email sending quota."
    assert "retry-after" not in over.headers  # Resend names no delay; the reset is midnight UTC
    assert send(api, to="b@example.com").status_code == 200
    assert sent(api) == 2


def test_a_monthly_quota_refuses_and_the_key_stays_free(api: httpx.Client) -> None:
    configure(api, monthly_quota=0)
    over = send(api, headers={"Idempotency-Key": "k-1"})
    assert refusal(over) == (429, "monthly_quota_exceeded")
    assert "x-resend-daily-quota" not in over.headers  # only a Free plan has a daily quota
    configure(api, monthly_quota=None)
    assert send(api, headers={"Idempotency-Key": "k-1"}).status_code == 200
    assert sent(api) == 1


# -- domains -------------------------------------------------------------------------------


def test_domains_list_the_senders_domain_verified_by_default(api: httpx.Client) -> None:
    listed = api.get("/domains", headers=AUTH).json()
    assert (listed["object"], listed["has_more"]) == ("list", False)
    [domain] = listed["data"]
    assert (domain["name"], domain["status"], domain["region"]) == (
        DEFAULT_DOMAIN,
        "verified",
        "us-east-1",
    )
    one = api.get(f"/domains/{domain['id']}", headers=AUTH)
    assert one.status_code == 200
    assert one.json() == {"object": "domain", **domain, "records": []}


def test_a_domain_id_is_a_uuid_and_an_unknown_one_is_404(api: httpx.Client) -> None:
    assert refusal(api.get("/domains/example.com", headers=AUTH)) == (422, "invalid_parameter")
    assert refusal(api.get(f"/domains/{uuid.uuid4()}", headers=AUTH)) == (404, "not_found")


@pytest.mark.parametrize(
    "status", ["not_started", "pending", "partially_verified", "failed", "temporary_failure"]
)
def test_a_send_from_a_domain_that_is_not_verified_is_403(api: httpx.Client, status: str) -> None:
    configure(api, domains=[{"name": DEFAULT_DOMAIN, "status": status}])
    assert api.get("/domains", headers=AUTH).json()["data"][0]["status"] == status
    refused = send(api)
    assert refusal(refused) == (403, "validation_error")
    assert refused.json()["message"] == (
        "The onefold.example domain is not verified. Please, add and verify your domain "
        "on https://resend.com/domains"
    )
    assert sent(api) == 0


def test_a_send_from_a_domain_not_added_or_another_subdomain_is_403(api: httpx.Client) -> None:
    configure(api, rate_limit=None)  # lifted: three sends back to back, about the domain
    other = send(api, **{"from": "hello@elsewhere.example"})
    assert refusal(other) == (403, "validation_error")
    assert "The elsewhere.example domain is not verified" in other.json()["message"]
    sub = send(api, **{"from": f"hello@mail.{DEFAULT_DOMAIN}"})
    assert f"The mail.{DEFAULT_DOMAIN} domain is not verified" in sub.json()["message"]
    assert send(api, **{"from": f"hello@{DEFAULT_DOMAIN.upper()}"}).status_code == 200


def test_domain_statuses_are_resends_own(api: httpx.Client) -> None:
    refused = configure(api, domains=[{"name": DEFAULT_DOMAIN, "status": "active"}])
    assert refused.status_code == 400
    assert "temporary_failure" in refused.text


# -- what a send must carry ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("to", "ada"),
        ("to", "ada@localhost"),
        ("to", ["ada@example.com", "Ada <ada@"]),
        ("from", "enquiries"),
        ("from", "Onefold <enquiries@onefold.example"),
    ],
)
def test_an_address_resend_does_not_accept_is_422(
    api: httpx.Client, field: str, value: Any
) -> None:
    refused = send(api, **{field: value})
    assert refusal(refused) == (422, "validation_error")
    assert f"Invalid `{field}` field" in refused.json()["message"]


def test_both_address_forms_are_accepted(api: httpx.Client) -> None:
    answer = send(api, to=["Ada Lovelace <ada@example.com>"], **{"from": f"x@{DEFAULT_DOMAIN}"})
    assert answer.status_code == 200


@pytest.mark.parametrize("missing", ["from", "to", "subject"])
def test_a_missing_field_is_422_missing_required_field(api: httpx.Client, missing: str) -> None:
    body = {k: v for k, v in EMAIL.items() if k != missing}
    refused = api.post("/emails", json=body, headers=AUTH)
    assert refusal(refused) == (422, "missing_required_field")
    assert f"`{missing}`" in refused.json()["message"]


def test_more_than_fifty_recipients_is_422(api: httpx.Client) -> None:
    refused = send(api, to=[f"p{n}@example.com" for n in range(51)])
    assert refusal(refused) == (422, "validation_error")


# -- idempotency keys (https://resend.com/docs/dashboard/emails/idempotency-keys) ---------


def test_a_key_replays_its_first_answer_and_refuses_another_payload(api: httpx.Client) -> None:
    first = send(api, headers={"Idempotency-Key": "welcome/1"})
    again = send(api, headers={"Idempotency-Key": "welcome/1"})
    assert again.json() == first.json()
    assert "ratelimit-limit" in again.headers  # a replay is a request like any other
    time.sleep(1.05)
    other = send(api, headers={"Idempotency-Key": "welcome/1"}, subject="Another")
    assert refusal(other) == (409, "invalid_idempotent_request")
    assert refusal(send(api, headers={"Idempotency-Key": "k" * 257})) == (
        400,
        "invalid_idempotency_key",
    )
    assert sent(api) == 1
