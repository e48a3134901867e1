"""The Dataverse emulator's rules, shown over loopback HTTP as a client meets them.

Each rule cites its page in lab/emulators/dataverse.py (Entra ID's client
credentials flow, the service protection limits, the lead and task column
references); the adapter's reading of them is in
tests/integrations/dataverse/test_dataverse.py.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lab.emulators.dataverse import (
    API,
    DEFAULT_CLIENT_ID,
    DEFAULT_CLIENT_SECRET,
    DataverseEmulator,
)


@pytest.fixture(scope="module")
def emulator() -> Iterator[DataverseEmulator]:
    with DataverseEmulator() as running:
        yield running


@pytest.fixture
def dv(emulator: DataverseEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=emulator.http_url, timeout=10) as client:
        client.post("/_sandbox/reset").raise_for_status()
        yield client


def configure(dv: httpx.Client, **settings: Any) -> None:
    response = dv.post("/_sandbox/config", json=settings)
    assert response.status_code == 200, response.text


def token(dv: httpx.Client, **form: str) -> httpx.Response:
    body = {
        "grant_type": "client_credentials",
        "client_id": DEFAULT_CLIENT_ID,
        "client_secret": DEFAULT_CLIENT_SECRET,
        "scope": f"{dv.base_url}/.default",
        **form,
    }
    return dv.post("/emulator-tenant/oauth2/v2.0/token", data=body)


def bearer(dv: httpx.Client) -> dict[str, str]:
    response = token(dv)
    assert response.status_code == 200
    return {"Authorization": f"Bearer {response.json()['access_token']}"}


def put_lead(dv: httpx.Client, headers: dict[str, str], **columns: Any) -> httpx.Response:
    body = {"lastname": "Lovelace", **columns}
    return dv.patch(
        f"{API}/leads({uuid.uuid4()})", json=body, headers={**headers, "If-None-Match": "*"}
    )


# -- credentials -----------------------------------------------------------------------


def test_only_the_app_registration_gets_a_token(dv: httpx.Client) -> None:
    assert token(dv).status_code == 200
    unknown = token(dv, client_id="someone-else")
    assert (unknown.status_code, unknown.json()["error"]) == (400, "unauthorized_client")
    assert "AADSTS700016" in unknown.json()["error_description"]
    wrong = token(dv, client_secret="not-the-secret")
    assert (wrong.status_code, wrong.json()["error"]) == (401, "invalid_client")
    assert "AADSTS7000215" in wrong.json()["error_description"]


@pytest.mark.parametrize("authorization", ["", "Bearer not-a-token", "Basic abc"])
def test_a_wrong_bearer_is_401_with_www_authenticate(dv: httpx.Client, authorization: str) -> None:
    answer = dv.get(f"{API}/WhoAmI", headers={"Authorization": authorization})
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith("Bearer authorization_uri=")
    assert "x-ms-ratelimit-burst-remaining-xrm-requests" not in answer.headers


# -- service protection limits -------------------------------------------------------------


def test_every_answer_says_how_many_requests_are_left_in_the_window(dv: httpx.Client) -> None:
    headers = bearer(dv)
    first = dv.get(f"{API}/WhoAmI", headers=headers)
    second = dv.get(f"{API}/WhoAmI", headers=headers)
    assert first.headers["x-ms-ratelimit-burst-remaining-xrm-requests"] == "5999"
    assert second.headers["x-ms-ratelimit-burst-remaining-xrm-requests"] == "5998"


def test_past_the_requests_in_the_window_a_429_says_when_to_retry(dv: httpx.Client) -> None:
    configure(dv, requests_per_window=2, window_seconds=60)
    headers = bearer(dv)
    assert [dv.get(f"{API}/WhoAmI", headers=headers).status_code for _ in range(2)] == [200, 200]
    refused = dv.get(f"{API}/WhoAmI", headers=headers)
    assert refused.status_code == 429
    assert refused.json()["error"] == {
        "code": "0x80072322",
        "message": "Number of requests exceeded the limit of 2 over time window of 60 seconds.",
    }
    assert 55 <= int(refused.headers["Retry-After"]) <= 60
    # Per user: another app registration has a window of its own.
    configure(dv, client_id="another-app")
    other = {"Authorization": "Bearer " + token(dv, client_id="another-app").json()["access_token"]}
    assert dv.get(f"{API}/WhoAmI", headers=other).status_code == 200


def test_past_the_concurrent_requests_a_429_comes_at_once(dv: httpx.Client) -> None:
    configure(dv, concurrent_requests=1)
    headers = bearer(dv)
    fault = {"action": "create_record", "mode": "slow", "seconds": 1.5}
    dv.post("/_sandbox/faults", json=fault).raise_for_status()
    slow: list[int] = []
    started = threading.Thread(target=lambda: slow.append(put_lead(dv, headers).status_code))
    started.start()
    try:
        refused = None
        for _ in range(50):
            answer = dv.get(f"{API}/WhoAmI", headers=headers)
            if answer.status_code == 429:
                refused = answer
                break
            threading.Event().wait(0.02)
    finally:
        started.join()
    assert refused is not None
    assert refused.json()["error"]["code"] == "0x80072326"
    assert refused.headers["Retry-After"] == "1"
    assert slow == [204]
    assert dv.get(f"{API}/WhoAmI", headers=headers).status_code == 200


def test_lifted_limits_refuse_nothing(dv: httpx.Client) -> None:
    configure(dv, rate_limits=False, requests_per_window=0)
    answer = dv.get(f"{API}/WhoAmI", headers=bearer(dv))
    assert answer.status_code == 200
    assert "x-ms-ratelimit-burst-remaining-xrm-requests" not in answer.headers


# -- values ---------------------------------------------------------------------------------


def test_a_choice_outside_its_options_is_refused(dv: httpx.Client) -> None:
    headers = bearer(dv)
    refused = put_lead(dv, headers, leadsourcecode=42)
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == (
        "A validation error occurred. The value 42 of 'leadsourcecode' on record of type "
        "'lead' is outside the valid range. Accepted Values: 1,2,3,4,5,6,7,8,9,10"
    )
    assert put_lead(dv, headers, leadsourcecode=8).status_code == 204
    assert dv.get("/_sandbox/stats").json()["records"] == 1


def test_a_task_priority_outside_low_normal_high_is_refused(dv: httpx.Client) -> None:
    headers = bearer(dv)
    leadid = str(uuid.uuid4())
    made = dv.patch(
        f"{API}/leads({leadid})",
        json={"lastname": "Lovelace"},
        headers={**headers, "If-None-Match": "*"},
    )
    assert made.status_code == 204
    body = {
        "subject": "Call",
        "prioritycode": 3,
        "regardingobjectid_lead_task@odata.bind": f"/leads({leadid})",
    }
    refused = dv.patch(
        f"{API}/tasks({uuid.uuid4()})", json=body, headers={**headers, "If-None-Match": "*"}
    )
    assert refused.status_code == 400
    assert "Accepted Values: 0,1,2" in refused.json()["error"]["message"]


@pytest.mark.parametrize(("column", "limit"), [("lastname", 50), ("description", 2000)])
def test_text_past_its_max_length_is_refused(dv: httpx.Client, column: str, limit: int) -> None:
    refused = put_lead(dv, bearer(dv), **{column: "x" * (limit + 1)})
    assert refused.status_code == 400
    assert (
        f"exceeded the maximum allowed length of '{limit}'" in (refused.json()["error"]["message"])
    )
    assert dv.get("/_sandbox/stats").json()["records"] == 0
