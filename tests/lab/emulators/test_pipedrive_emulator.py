"""The Pipedrive emulator's rules, shown over loopback HTTP as a client meets them.

Each rule cites its page in lab/emulators/pipedrive.py (authentication, the rate
limiting page's budget and burst limits, v2's validation); the adapter's reading
of them is in tests/integrations/pipedrive/test_pipedrive.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lab.emulators.pipedrive import DEFAULT_ACCESS_TOKEN, DEFAULT_API_TOKEN, PipedriveEmulator

TOKEN = {"x-api-token": DEFAULT_API_TOKEN}
PERSON = {"name": "Ada Lovelace", "emails": [{"value": "ada@example.com", "primary": True}]}


@pytest.fixture(scope="module")
def emulator() -> Iterator[PipedriveEmulator]:
    with PipedriveEmulator() as running:
        yield running


@pytest.fixture
def pd(emulator: PipedriveEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=emulator.http_url, timeout=10) as client:
        client.post("/_sandbox/reset").raise_for_status()
        yield client


def configure(pd: httpx.Client, **settings: Any) -> None:
    response = pd.post("/_sandbox/config", json=settings)
    assert response.status_code == 200, response.text


def tokens_left(pd: httpx.Client) -> int:
    return int(pd.get("/_sandbox/stats").json()["daily_tokens_left"])


# -- credentials ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "params"),
    [
        ({}, {}),
        ({"x-api-token": "not-the-token"}, {}),
        ({}, {"api_token": "not-the-token"}),
        ({"Authorization": "Bearer not-the-access-token"}, {}),
        # An API token is no OAuth access token.
        ({"Authorization": f"Bearer {DEFAULT_API_TOKEN}"}, {}),
    ],
)
def test_a_wrong_token_is_401_unauthorized_access(
    pd: httpx.Client, headers: dict[str, str], params: dict[str, str]
) -> None:
    answer = pd.get("/v1/leadFields", headers=headers, params=params)
    assert answer.status_code == 401
    body = answer.json()
    assert (body["success"], body["error"], body["errorCode"]) == (
        False,
        "unauthorized access",
        401,
    )
    assert "x-ratelimit-limit" not in answer.headers


def test_the_api_token_and_the_oauth_token_each_have_their_plan_s_burst_limit(
    pd: httpx.Client,
) -> None:
    by_api_token = pd.get("/v1/leadFields", headers=TOKEN)
    by_oauth = pd.get("/v1/leadFields", headers={"Authorization": f"Bearer {DEFAULT_ACCESS_TOKEN}"})
    assert by_api_token.status_code == by_oauth.status_code == 200
    # Lite: 20 requests per 2 seconds with an API token, 80 with an OAuth token.
    assert by_api_token.headers["x-ratelimit-limit"] == "20"
    assert by_oauth.headers["x-ratelimit-limit"] == "80"


# -- burst limits ---------------------------------------------------------------------


def test_every_answer_carries_its_2_second_window(pd: httpx.Client) -> None:
    first = pd.get("/v1/leadFields", headers=TOKEN)
    second = pd.get("/v1/leadFields", headers=TOKEN)
    assert (first.headers["x-ratelimit-limit"], first.headers["x-ratelimit-remaining"]) == (
        "20",
        "19",
    )
    assert second.headers["x-ratelimit-remaining"] == "18"
    assert 1 <= int(second.headers["x-ratelimit-reset"]) <= 2
    # Searches have a window of their own: 10 per 2 seconds.
    search = pd.get(
        "/api/v2/persons/search",
        headers=TOKEN,
        params={"term": "ada@example.com", "fields": "email", "exact_match": "true"},
    )
    assert (search.headers["x-ratelimit-limit"], search.headers["x-ratelimit-remaining"]) == (
        "10",
        "9",
    )


def test_past_the_burst_limit_a_429_shows_no_room_until_the_window_rolls(
    pd: httpx.Client,
) -> None:
    configure(pd, burst_limit=3)
    for _ in range(3):
        assert pd.post("/api/v2/persons", json=PERSON, headers=TOKEN).status_code == 200
    refused = pd.post("/api/v2/persons", json=PERSON, headers=TOKEN)
    assert refused.status_code == 429
    assert (refused.json()["success"], refused.json()["error"]) == (False, "Request over limit")
    assert refused.headers["x-ratelimit-remaining"] == "0"
    reset = int(refused.headers["x-ratelimit-reset"])
    assert 1 <= reset <= 2
    assert tokens_left(pd) == 30_000 - 3 * 5  # a refused request spends no tokens
    time.sleep(reset)
    assert pd.post("/api/v2/persons", json=PERSON, headers=TOKEN).status_code == 200


def test_the_search_window_refuses_the_eleventh_search(pd: httpx.Client) -> None:
    params = {"term": "ada@example.com", "fields": "email", "exact_match": "true"}
    codes = [
        pd.get("/api/v2/persons/search", headers=TOKEN, params=params).status_code
        for _ in range(11)
    ]
    assert codes == [200] * 10 + [429]
    # Other requests count in the other window.
    assert pd.get("/v1/leadFields", headers=TOKEN).status_code == 200


# -- the daily token budget ---------------------------------------------------------------


def test_the_budget_is_30000_tokens_times_the_plan_times_the_seats(pd: httpx.Client) -> None:
    assert tokens_left(pd) == 30_000
    configure(pd, plan="growth", seats=3)
    assert tokens_left(pd) == 180_000
    # Each request spends its endpoint's x-token-cost: POST /api/v2/persons 5,
    # GET /api/v2/persons/{id} 1, a v2 search 20.
    person = pd.post("/api/v2/persons", json=PERSON, headers=TOKEN).json()["data"]["id"]
    pd.get(f"/api/v2/persons/{person}", headers=TOKEN).raise_for_status()
    pd.get(
        "/api/v2/persons/search",
        headers=TOKEN,
        params={"term": "ada@example.com", "fields": "email", "exact_match": "true"},
    ).raise_for_status()
    assert tokens_left(pd) == 180_000 - 5 - 1 - 20


def test_a_spent_budget_refuses_with_room_left_in_the_window(pd: httpx.Client) -> None:
    configure(pd, daily_token_budget=12)
    assert pd.post("/api/v2/persons", json=PERSON, headers=TOKEN).status_code == 200
    assert pd.post("/api/v2/persons", json=PERSON, headers=TOKEN).status_code == 200
    refused = pd.post("/api/v2/persons", json=PERSON, headers=TOKEN)
    assert refused.status_code == 429
    assert int(refused.headers["x-ratelimit-remaining"]) > 0
    assert pd.get("/_sandbox/stats").json()["calls"]["create_person"] == 3
    # A top-up (a larger budget) lets requests through again the same day.
    configure(pd, daily_token_budget=20)
    assert pd.post("/api/v2/persons", json=PERSON, headers=TOKEN).status_code == 200


def test_lifted_limits_refuse_nothing_and_send_no_headers(pd: httpx.Client) -> None:
    configure(pd, rate_limits=False, daily_token_budget=0, burst_limit=0)
    answer = pd.get("/v1/leadFields", headers=TOKEN)
    assert answer.status_code == 200
    assert "x-ratelimit-limit" not in answer.headers


# -- validation ------------------------------------------------------------------------


def lead(pd: httpx.Client) -> str:
    person = pd.post("/api/v2/persons", json=PERSON, headers=TOKEN).json()["data"]["id"]
    created = pd.post("/v1/leads", json={"title": "Enquiry", "person_id": person}, headers=TOKEN)
    assert created.status_code == 201
    return str(created.json()["data"]["id"])


@pytest.mark.parametrize(
    ("activity", "error"),
    [
        ({"type": "coffee"}, "Validation failed: type: 'coffee' is not an activity type"),
        ({"type": "task", "owner_id": "7"}, "Validation failed: owner_id: Expected number"),
    ],
)
def test_an_activity_is_refused_as_v2_refuses_it(
    pd: httpx.Client, activity: dict[str, Any], error: str
) -> None:
    body = {"subject": "Call back", "lead_id": lead(pd), **activity}
    refused = pd.post("/api/v2/activities", json=body, headers=TOKEN)
    assert refused.status_code == 400
    assert (refused.json()["success"], refused.json()["error"]) == (False, error)
    assert pd.get("/_sandbox/stats").json()["tasks"] == 0


def test_an_activity_of_a_known_type_is_created(pd: httpx.Client) -> None:
    body = {"subject": "Call back", "type": "task", "lead_id": lead(pd), "owner_id": 7}
    assert pd.post("/api/v2/activities", json=body, headers=TOKEN).status_code == 200
    configure(pd, activity_types=["call"])
    assert pd.post("/api/v2/activities", json=body, headers=TOKEN).status_code == 400


def test_a_lead_needs_a_title_and_a_person_or_organization(pd: httpx.Client) -> None:
    refused = pd.post("/v1/leads", json={"title": "Enquiry"}, headers=TOKEN)
    assert refused.status_code == 400
    assert pd.post("/v1/leads", json={"person_id": 1}, headers=TOKEN).status_code == 400
