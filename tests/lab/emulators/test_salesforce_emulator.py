"""The Salesforce emulator's rules, shown over loopback HTTP as a client meets them.

Each rule cites its page in lab/emulators/salesforce_store.py ([OAUTH], [ERRORS],
[LIMITS], [FIELDS]); the adapter's reading of them is in
tests/integrations/salesforce/test_salesforce.py. The rolling window behind the
24-hour allocation is shown with a clock the test moves: no test waits a day.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lab.emulators.limits import RollingWindow
from lab.emulators.salesforce import (
    DEFAULT_CLIENT_ID,
    DEFAULT_CLIENT_SECRET,
    SalesforceEmulator,
)

API = "/services/data/v62.0"


@pytest.fixture(scope="module")
def emulator() -> Iterator[SalesforceEmulator]:
    with SalesforceEmulator() as running:
        yield running


@pytest.fixture
def sf(emulator: SalesforceEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=emulator.http_url, timeout=10) as client:
        client.post("/_sandbox/reset").raise_for_status()
        yield client


def token(sf: httpx.Client, **form: str) -> httpx.Response:
    body = {
        "grant_type": "client_credentials",
        "client_id": DEFAULT_CLIENT_ID,
        "client_secret": DEFAULT_CLIENT_SECRET,
        **form,
    }
    return sf.post("/services/oauth2/token", data=body)


def bearer(sf: httpx.Client) -> dict[str, str]:
    response = token(sf)
    assert response.status_code == 200
    return {"Authorization": f"Bearer {response.json()['access_token']}"}


def create_lead(sf: httpx.Client, headers: dict[str, str], **fields: Any) -> httpx.Response:
    body = {"LastName": "Lovelace", "Company": "Acme", "Email": "ada@example.com", **fields}
    return sf.post(f"{API}/sobjects/Lead", json=body, headers=headers)


# -- credentials ([OAUTH], [ERRORS]) ------------------------------------------------------


def test_only_the_expected_client_gets_a_token(sf: httpx.Client) -> None:
    assert token(sf).status_code == 200
    unknown = token(sf, client_id="someone-else")
    assert (unknown.status_code, unknown.json()["error"]) == (400, "invalid_client_id")
    wrong = token(sf, client_secret="not-the-secret")
    assert (wrong.status_code, wrong.json()["error"]) == (400, "invalid_client")


@pytest.mark.parametrize("authorization", ["", "Bearer not-a-session", "Basic abc"])
def test_a_wrong_bearer_is_invalid_session_id(sf: httpx.Client, authorization: str) -> None:
    answer = sf.get(f"{API}/sobjects/Lead/describe", headers={"Authorization": authorization})
    assert answer.status_code == 401
    assert answer.json() == [
        {"message": "Session expired or invalid", "errorCode": "INVALID_SESSION_ID"}
    ]


def test_an_expired_session_is_refused_until_a_new_token(sf: httpx.Client) -> None:
    headers = bearer(sf)
    assert sf.get(f"{API}/sobjects/Lead/describe", headers=headers).status_code == 200
    sf.post("/_sandbox/expire_tokens").raise_for_status()
    assert sf.get(f"{API}/sobjects/Lead/describe", headers=headers).status_code == 401
    assert sf.get(f"{API}/sobjects/Lead/describe", headers=bearer(sf)).status_code == 200


# -- the 24-hour allocation ([LIMITS]) ------------------------------------------------------


def test_every_answer_carries_the_usage_of_the_last_24_hours(sf: httpx.Client) -> None:
    headers = bearer(sf)
    first = sf.get(f"{API}/sobjects/Lead/describe", headers=headers)
    second = sf.get(f"{API}/sobjects/Task/describe", headers=headers)
    # The token request is not an API request.
    assert first.headers["Sforce-Limit-Info"] == "api-usage=1/15000"
    assert second.headers["Sforce-Limit-Info"] == "api-usage=2/15000"


def test_a_spent_allocation_refuses_every_call_with_request_limit_exceeded(
    sf: httpx.Client,
) -> None:
    sf.post("/_sandbox/config", json={"api_usage_limit": 2}).raise_for_status()
    headers = bearer(sf)
    assert create_lead(sf, headers).status_code == 201
    assert sf.get(f"{API}/sobjects/Lead/describe", headers=headers).status_code == 200
    refused = create_lead(sf, headers, Email="grace@example.com")
    assert refused.status_code == 403
    assert refused.json() == [
        {"message": "TotalRequests Limit exceeded.", "errorCode": "REQUEST_LIMIT_EXCEEDED"}
    ]
    # Refused calls are not counted, and carry no Retry-After.
    assert refused.headers["Sforce-Limit-Info"] == "api-usage=2/2"
    assert "Retry-After" not in refused.headers
    assert sf.get("/_sandbox/stats").json()["records"] == 1
    # An admin's larger allocation (or a test lifting it) lets calls through again.
    sf.post("/_sandbox/config", json={"api_usage_limit": 10}).raise_for_status()
    assert create_lead(sf, headers, Email="grace@example.com").status_code == 201


def test_the_window_rolls_room_comes_back_as_the_oldest_requests_age_out() -> None:
    """The rolling window alone, with a clock the test moves (pure logic)."""
    now = [1000.0]
    window = RollingWindow(3, 100, clock=lambda: now[0])
    for _ in range(3):
        assert window.take("org") is None
        now[0] += 10
    now[0] += 10
    # Full at 1040: the first request (at 1000) ages out 60 seconds from now.
    assert window.take("org") == pytest.approx(60)
    assert window.used("org") == 3
    now[0] += 60
    # Only the first has aged out: room for one, and the next room in 10 seconds.
    assert window.take("org") is None
    assert (window.used("org"), window.remaining("org")) == (3, 0)
    assert window.take("org") == pytest.approx(10)
    assert window.reset_seconds("org") == 10
    # Units: a request costing two waits for two to age out.
    assert window.take("other", 2) is None
    assert window.take("other", 2) == pytest.approx(100)


# -- values ([FIELDS]) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "code", "field"),
    [
        ({"Email": "ada(at)example.com"}, "INVALID_EMAIL_ADDRESS", "Email"),
        ({"Status": "Hot"}, "INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST", "Status"),
        ({"LeadSource": "Website"}, "INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST", "LeadSource"),
        ({"LastName": "L" * 81}, "STRING_TOO_LONG", "LastName"),
        ({"Company": ""}, "REQUIRED_FIELD_MISSING", "Company"),
    ],
)
def test_a_lead_is_refused_as_salesforce_refuses_it(
    sf: httpx.Client, fields: dict[str, str], code: str, field: str
) -> None:
    refused = create_lead(sf, bearer(sf), **fields)
    assert refused.status_code == 400
    [error] = refused.json()
    assert (error["errorCode"], error["fields"]) == (code, [field])
    assert sf.get("/_sandbox/stats").json()["records"] == 0


def test_a_task_s_status_and_priority_are_restricted_picklists(sf: httpx.Client) -> None:
    headers = bearer(sf)
    lead = create_lead(sf, headers).json()["id"]
    for fields in ({"Status": "Open"}, {"Priority": "Urgent"}):
        body = {"Subject": "Call", "WhoId": lead, **fields}
        refused = sf.post(f"{API}/sobjects/Task", json=body, headers=headers)
        assert refused.status_code == 400
        assert refused.json()[0]["errorCode"] == "INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST"
    body = {"Subject": "Call", "WhoId": lead, "Status": "Not Started", "Priority": "Normal"}
    assert sf.post(f"{API}/sobjects/Task", json=body, headers=headers).status_code == 201


def test_describe_lists_the_picklists_and_an_unrestricted_org_takes_any_value(
    sf: httpx.Client,
) -> None:
    headers = bearer(sf)
    fields = {
        f["name"]: f
        for f in sf.get(f"{API}/sobjects/Lead/describe", headers=headers).json()["fields"]
    }
    source = fields["LeadSource"]
    assert (source["type"], source["restrictedPicklist"]) == ("picklist", True)
    assert "Web" in [v["value"] for v in source["picklistValues"]]
    assert fields["Email"]["type"] == "email"
    sf.post("/_sandbox/config", json={"restricted_picklists": False}).raise_for_status()
    assert create_lead(sf, headers, LeadSource="Website").status_code == 201
