"""The HubSpot emulator's rules, each shown over loopback HTTP as a client meets them.

Every rule here is one HubSpot documents (the source is cited beside it in
lab/emulators/hubspot*.py); the adapter's own tests are in
tests/integrations/hubspot/test_hubspot.py. The request limiter's clock is the one
thing tested without the wire, with a clock the test moves: waiting ten real seconds
to see a window roll would prove nothing more.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from lab.emulators.hubspot import DEFAULT_TOKEN, HubSpotEmulator
from lab.emulators.hubspot_limits import Limits, RequestLimiter

RATE_HEADERS = (
    "X-HubSpot-RateLimit-Interval-Milliseconds",
    "X-HubSpot-RateLimit-Max",
    "X-HubSpot-RateLimit-Remaining",
    "X-HubSpot-RateLimit-Daily",
    "X-HubSpot-RateLimit-Daily-Remaining",
)
DEAL = {"dealname": "Kitchen", "dealstage": "appointmentscheduled", "onefold_ref": "opk_1"}
TASK = {"hs_timestamp": "2026-01-01T00:00:00.000Z", "hs_task_subject": "Call"}


@pytest.fixture
def hubspot() -> Iterator[HubSpotEmulator]:
    with HubSpotEmulator() as emulator:
        yield emulator


@pytest.fixture
def api(hubspot: HubSpotEmulator) -> Iterator[httpx.Client]:
    """A client of the emulator's API with its token."""
    headers = {"Authorization": f"Bearer {DEFAULT_TOKEN}"}
    with httpx.Client(base_url=hubspot.http_url, headers=headers, timeout=10) as client:
        yield client


def create(api: httpx.Client, object_type: str, properties: dict[str, str], **body: Any) -> Any:
    return api.post(f"/crm/v3/objects/{object_type}", json={"properties": properties, **body})


def invalid(response: httpx.Response) -> list[dict[str, Any]]:
    """The problems listed in a 400 "Property values were not valid: [...]"."""
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["category"] == "VALIDATION_ERROR"
    prefix = "Property values were not valid: "
    assert body["message"].startswith(prefix)
    return list(json.loads(body["message"].removeprefix(prefix)))


def associate(to_id: str, type_id: int) -> list[dict[str, Any]]:
    return [
        {
            "to": {"id": to_id},
            "types": [{"associationCategory": "HUBSPOT_DEFINED", "associationTypeId": type_id}],
        }
    ]


# -- the token ---------------------------------------------------------------------


@pytest.mark.parametrize("authorization", [None, "Bearer pat-na1-someone-else", DEFAULT_TOKEN])
def test_any_token_but_the_emulators_own_is_refused(hubspot, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    response = httpx.get(f"{hubspot.http_url}/crm/v3/pipelines/deals", headers=headers)
    assert response.status_code == 401
    body = response.json()
    assert (body["status"], body["category"]) == ("error", "INVALID_AUTHENTICATION")
    assert body["message"].startswith("Authentication credentials not found.")
    # Refused before counting: no rate-limit headers, nothing spent.
    assert "X-HubSpot-RateLimit-Remaining" not in response.headers


def test_the_token_knob_names_the_one_accepted(hubspot, api):
    hubspot.hubspot.set_config({"token": "pat-eu1-other"})
    assert api.get("/crm/v3/pipelines/deals").status_code == 401
    other = {"Authorization": "Bearer pat-eu1-other"}
    assert httpx.get(f"{hubspot.http_url}/crm/v3/pipelines/deals", headers=other).is_success
    hubspot.hubspot.reset()
    assert api.get("/crm/v3/pipelines/deals").is_success


# -- request limits -----------------------------------------------------------------


def test_every_answer_carries_the_limits_and_what_is_left(api):
    first = api.get("/crm/v3/pipelines/deals")
    refused = create(api, "deals", {"dealname": "x"})  # a 400 is an answer too
    assert [first.headers[h] for h in RATE_HEADERS] == ["10000", "100", "99", "250000", "249999"]
    assert refused.status_code == 400
    assert refused.headers["X-HubSpot-RateLimit-Remaining"] == "98"
    assert refused.headers["X-HubSpot-RateLimit-Daily-Remaining"] == "249998"


def test_the_hundred_and_first_request_in_ten_seconds_is_refused(hubspot, api):
    answers = [api.get("/crm/v3/pipelines/tickets") for _ in range(101)]
    assert [a.status_code for a in answers] == [200] * 100 + [429]
    assert answers[99].headers["X-HubSpot-RateLimit-Remaining"] == "0"
    refused = answers[100]
    body = refused.json()
    assert set(body) == {
        "status",
        "message",
        "errorType",
        "correlationId",
        "policyName",
        "requestId",
    }
    assert (body["status"], body["errorType"], body["policyName"]) == (
        "error",
        "RATE_LIMIT",
        "TEN_SECONDLY_ROLLING",
    )
    assert body["message"] == "You have reached your ten_secondly_rolling limit."
    assert refused.headers["X-HubSpot-RateLimit-Remaining"] == "0"
    assert "Retry-After" not in refused.headers  # HubSpot documents none
    assert hubspot.hubspot.stats()["calls"]["rate_limited"] == 1
    # A refused create stores nothing.
    assert create(api, "deals", DEAL).status_code == 429
    assert hubspot.hubspot.stats()["records"] == 0


def test_retry_after_is_sent_only_when_asked_for(hubspot, api):
    hubspot.hubspot.set_config({"rate_limits": {"ten_secondly": 1}, "retry_after_header": True})
    api.get("/crm/v3/pipelines/deals")
    refused = api.get("/crm/v3/pipelines/deals")
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 10


def test_a_spent_day_is_refused_until_the_accounts_midnight(hubspot, api):
    hubspot.hubspot.set_config({"rate_limits": {"daily": 3}})
    assert hubspot.hubspot.config()["rate_limits"] == {
        "ten_secondly": 100,
        "daily": 3,
        "search_per_second": 5,
    }
    answers = [api.get("/crm/v3/pipelines/deals") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [a.headers["X-HubSpot-RateLimit-Daily-Remaining"] for a in answers] == [
        "2",
        "1",
        "0",
        "0",
    ]
    body = answers[3].json()
    assert (body["policyName"], body["message"]) == ("DAILY", "You have reached your daily limit.")
    hubspot.hubspot.new_day()
    assert api.get("/crm/v3/pipelines/deals").status_code == 200


def test_search_has_a_limit_of_its_own_per_second(hubspot, api):
    hubspot.hubspot.set_config({"rate_limits": {"search_per_second": 2}})
    barrier = threading.Barrier(6)

    def search(_: int) -> httpx.Response:
        barrier.wait()
        return api.post("/crm/v3/objects/deals/search", json={"filterGroups": []})

    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(search, range(6)))
    refused = [a for a in answers if a.status_code == 429]
    assert refused and all(a.json()["policyName"] == "SECONDLY" for a in refused)
    assert refused[0].json()["message"] == "You have reached your secondly limit."
    # Other requests are not held by the search limit.
    assert api.get("/crm/v3/pipelines/deals").status_code == 200


def test_a_test_may_lift_the_limits_on_purpose(hubspot, api):
    hubspot.hubspot.set_config({"rate_limits": False})
    answers = [api.get("/crm/v3/pipelines/deals") for _ in range(120)]
    assert {a.status_code for a in answers} == {200}
    assert not any(h in answers[-1].headers for h in RATE_HEADERS)
    hubspot.hubspot.set_config({"rate_limits": True})
    assert api.get("/crm/v3/pipelines/deals").headers["X-HubSpot-RateLimit-Max"] == "100"


def test_an_injected_429_answers_in_hubspots_words(hubspot, api):
    hubspot.hubspot.set_config({"rate_limit_policy": "DAILY"})
    hubspot.hubspot.add_fault(action="create_record", mode="http_429")
    refused = create(api, "deals", DEAL)
    assert refused.status_code == 429
    assert refused.json()["policyName"] == "DAILY"
    assert refused.headers["X-HubSpot-RateLimit-Daily-Remaining"] == "0"
    assert refused.headers["X-HubSpot-RateLimit-Max"] == "100"


def test_the_limiter_rolls_its_ten_second_window():
    now = [0.0]
    limiter = RequestLimiter(clock=lambda: now[0], today=lambda: "2026-01-01")
    limits = Limits(ten_secondly=3, daily=None, search_per_second=None)
    for moment in (0.0, 4.0, 8.0):
        now[0] = moment
        assert limiter.take("t", limits=limits).refused_by is None
    now[0] = 9.0
    refused = limiter.take("t", limits=limits)
    assert (refused.refused_by, refused.retry_after) == ("TEN_SECONDLY_ROLLING", 1.0)
    assert refused.headers["X-HubSpot-RateLimit-Remaining"] == "0"
    now[0] = 10.0  # the request at 0.0 has left the window; the refusal was not counted
    let_in = limiter.take("t", limits=limits)
    assert let_in.refused_by is None
    assert let_in.headers["X-HubSpot-RateLimit-Remaining"] == "0"
    # Another token has its own ten seconds.
    assert limiter.take("other", limits=limits).refused_by is None


def test_the_limiter_counts_the_day_per_account_and_starts_it_again():
    today = ["2026-01-01"]
    limiter = RequestLimiter(clock=lambda: 0.0, today=lambda: today[0])
    limits = Limits(ten_secondly=None, daily=2, search_per_second=None)
    assert limiter.take("a", limits=limits).refused_by is None
    assert limiter.take("b", limits=limits).refused_by is None
    assert limiter.take("a", limits=limits).refused_by == "DAILY"
    today[0] = "2026-01-02"
    assert limiter.take("a", limits=limits).headers["X-HubSpot-RateLimit-Daily-Remaining"] == "1"


# -- validation ----------------------------------------------------------------------


def test_a_deal_needs_a_pipeline_and_one_of_its_stages(hubspot, api):
    wrong_stage = invalid(create(api, "deals", {**DEAL, "dealstage": "won"}))
    assert wrong_stage == [
        {
            "isValid": False,
            "message": "won was not one of the allowed options: [appointmentscheduled, "
            "qualifiedtobuy, presentationscheduled, decisionmakerboughtin, contractsent, "
            "closedwon, closedlost]",
            "error": "INVALID_OPTION",
            "name": "dealstage",
            "localizedErrorMessage": wrong_stage[0]["message"],
        }
    ]
    wrong_pipeline = invalid(create(api, "deals", {**DEAL, "pipeline": "sales"}))
    assert [(p["name"], p["error"]) for p in wrong_pipeline] == [("pipeline", "INVALID_OPTION")]
    missing = create(api, "deals", {"dealname": "Kitchen"})
    assert missing.status_code == 400
    assert missing.json()["message"] == (
        "Error creating DEAL. Some required properties were not set."
    )
    assert missing.json()["context"] == {"properties": ["dealstage"]}
    made = create(api, "deals", DEAL)
    assert made.status_code == 201
    # Without a pipeline the deal goes to the default one.
    assert made.json()["properties"]["pipeline"] == "default"
    deal_id = made.json()["id"]
    moved = api.patch(f"/crm/v3/objects/deals/{deal_id}", json={"properties": {"dealstage": "1"}})
    assert [p["name"] for p in invalid(moved)] == ["dealstage"]
    assert hubspot.hubspot.stats()["records"] == 1


def test_a_ticket_stage_must_be_one_of_its_pipelines(api):
    ticket = {"subject": "Leak", "hs_pipeline_stage": "1"}
    assert create(api, "tickets", ticket).json()["properties"]["hs_pipeline"] == "0"
    refused = invalid(
        create(api, "tickets", {**ticket, "hs_pipeline_stage": "appointmentscheduled"})
    )
    assert refused[0]["message"] == (
        "appointmentscheduled was not one of the allowed options: [1, 2, 3, 4]"
    )


def test_task_status_and_priority_are_enumerations(api):
    problems = invalid(
        create(api, "tasks", {**TASK, "hs_task_status": "OPEN", "hs_task_priority": "URGENT"})
    )
    assert [(p["name"], p["error"]) for p in problems] == [
        ("hs_task_status", "INVALID_OPTION"),
        ("hs_task_priority", "INVALID_OPTION"),
    ]
    assert "LOW, MEDIUM, HIGH" in problems[1]["message"]
    done = create(api, "tasks", {**TASK, "hs_task_status": "COMPLETED", "hs_task_priority": "HIGH"})
    assert done.status_code == 201
    missing = create(api, "tasks", {"hs_task_subject": "Call"})
    assert (
        missing.json()["message"] == "Error creating TASK. Some required properties were not set."
    )


@pytest.mark.parametrize(
    "email", ["ada", "ada@", "@example.com", "ada@example", '"ada"@example.com', "a da@example.com"]
)
def test_a_malformed_email_is_refused(hubspot, api, email):
    problems = invalid(create(api, "contacts", {"email": email}, associations=[]))
    assert problems == [
        {
            "isValid": False,
            "message": f"Email address {email} is invalid",
            "error": "INVALID_EMAIL",
            "name": "email",
            "localizedErrorMessage": f"Email address {email} is invalid",
        }
    ]
    assert hubspot.hubspot.stats()["contacts"] == 0


def test_an_unknown_property_is_refused_by_name(api):
    problems = invalid(create(api, "deals", {**DEAL, "budget": "10k"}))
    assert [(p["name"], p["error"], p["message"]) for p in problems] == [
        ("budget", "PROPERTY_DOESNT_EXIST", 'Property "budget" does not exist')
    ]


def test_the_default_pipelines_are_served(api):
    deals = api.get("/crm/v3/pipelines/deals").json()["results"]
    assert [p["id"] for p in deals] == ["default"]
    assert deals[0]["stages"][0]["id"] == "appointmentscheduled"
    assert deals[0]["stages"][-1]["metadata"] == {"isClosed": "true", "probability": "0.0"}
    tickets = api.get("/crm/v3/pipelines/tickets").json()["results"]
    assert [(p["id"], [s["id"] for s in p["stages"]]) for p in tickets] == [
        ("0", ["1", "2", "3", "4"])
    ]
    required = {"id", "label", "displayOrder", "archived", "createdAt", "updatedAt", "stages"}
    assert required <= set(tickets[0])
    assert {"id", "label", "metadata", "displayOrder", "archived"} <= set(tickets[0]["stages"][0])


# -- properties and unique values -------------------------------------------------------


def test_property_reads_carry_the_specs_required_fields(api):
    required = {"name", "label", "type", "fieldType", "groupName", "description", "options"}
    deal_ref = api.get("/crm/v3/properties/deals/onefold_ref").json()
    task_ref = api.get("/crm/v3/properties/tasks/onefold_ref").json()
    status = api.get("/crm/v3/properties/tasks/hs_task_status").json()
    assert required <= set(deal_ref) and required <= set(task_ref) and required <= set(status)
    assert (deal_ref["hasUniqueValue"], task_ref["hasUniqueValue"]) == (True, False)
    assert (status["type"], [o["value"] for o in status["options"]][:2]) == (
        "enumeration",
        ["NOT_STARTED", "IN_PROGRESS"],
    )
    assert api.get("/crm/v3/properties/contacts/onefold_ref").status_code == 404


def test_tasks_cannot_have_unique_values(hubspot, api):
    prop = {"label": "Ref", "type": "string", "fieldType": "text", "groupName": "taskinformation"}
    refused = api.post(
        "/crm/v3/properties/tasks", json={**prop, "name": "ref2", "hasUniqueValue": True}
    )
    assert refused.status_code == 400
    assert refused.json()["category"] == "VALIDATION_ERROR"
    assert api.get("/crm/v3/properties/tasks/ref2").status_code == 404
    plain = api.post("/crm/v3/properties/tasks", json={**prop, "name": "ref2"})
    assert (plain.status_code, plain.json()["hasUniqueValue"]) == (201, False)
    changed = api.patch("/crm/v3/properties/tasks/ref2", json={"hasUniqueValue": True})
    assert changed.status_code == 400
    # So two tasks may hold the same reference.
    assert create(api, "tasks", {**TASK, "onefold_ref": "opk_t"}).status_code == 201
    assert create(api, "tasks", {**TASK, "onefold_ref": "opk_t"}).status_code == 201
    assert hubspot.hubspot.stats()["tasks_by_external_ref"] == {"opk_t": 2}


def test_a_new_deal_property_may_be_unique_and_then_refuses_a_repeat(api):
    prop = {"label": "Order", "type": "string", "fieldType": "text", "groupName": "dealinformation"}
    made = api.post(
        "/crm/v3/properties/deals", json={**prop, "name": "order_no", "hasUniqueValue": True}
    )
    assert (made.status_code, made.json()["hasUniqueValue"]) == (201, True)
    assert (
        api.post("/crm/v3/properties/deals", json={**prop, "name": "order_no"}).status_code == 409
    )
    first = create(api, "deals", {**DEAL, "order_no": "A1"})
    clash = create(api, "deals", {**DEAL, "onefold_ref": "opk_2", "order_no": "A1"})
    assert clash.status_code == 409
    assert clash.json()["errors"] == [
        {
            "message": f"A deal with order_no A1 already exists. Existing ID: {first.json()['id']}",
            "in": "order_no",
        }
    ]


def test_at_most_ten_unique_properties_per_object(api):
    prop = {"label": "U", "type": "string", "fieldType": "text", "groupName": "dealinformation"}
    # The reference property is the first unique one on deals.
    answers = [
        api.post("/crm/v3/properties/deals", json={**prop, "name": f"u{n}", "hasUniqueValue": True})
        for n in range(10)
    ]
    assert [a.status_code for a in answers] == [201] * 9 + [400]


def test_the_enquiry_reference_can_lose_its_uniqueness_while_running(hubspot, api):
    assert create(api, "deals", DEAL).status_code == 201
    assert create(api, "deals", DEAL).status_code == 409
    hubspot.hubspot.set_config({"reference_unique": False})
    assert api.get("/crm/v3/properties/deals/onefold_ref").json()["hasUniqueValue"] is False
    assert create(api, "deals", DEAL).status_code == 201
    assert hubspot.hubspot.stats()["records_by_external_ref"] == {"opk_1": 2}


def test_a_unique_clash_may_be_answered_400(hubspot, api):
    hubspot.hubspot.set_config({"unique_clash_status": 400})
    first = create(api, "deals", DEAL).json()["id"]
    problems = invalid(create(api, "deals", DEAL))
    text = f"A deal with onefold_ref opk_1 already exists. Existing ID: {first}"
    assert [(p["name"], p["message"]) for p in problems] == [("onefold_ref", text)]
    assert hubspot.hubspot.stats()["records"] == 1


# -- reads ------------------------------------------------------------------------------


def test_search_lags_writes_by_default(hubspot, api):
    create(api, "deals", DEAL)
    query = {"filterGroups": [{"filters": [{"propertyName": "onefold_ref", "value": "opk_1"}]}]}
    assert api.post("/crm/v3/objects/deals/search", json=query).json()["total"] == 0
    assert api.get("/crm/v3/objects/deals/opk_1", params={"idProperty": "onefold_ref"}).is_success
    hubspot.hubspot.set_config({"search_lag_seconds": 0})
    assert api.post("/crm/v3/objects/deals/search", json=query).json()["total"] == 1


def test_v4_association_reads_answer_from_the_record_at_once(hubspot, api):
    contact = create(api, "contacts", {"email": "ada@example.com"}, associations=[]).json()["id"]
    deal = create(api, "deals", DEAL, associations=associate(contact, 3)).json()["id"]
    tasks = [
        create(
            api, "tasks", {**TASK, "onefold_ref": f"t{n}"}, associations=associate(deal, 216)
        ).json()["id"]
        for n in range(3)
    ]
    api.delete(f"/crm/v3/objects/tasks/{tasks[1]}")
    first = api.get(f"/crm/v4/objects/deals/{deal}/associations/tasks", params={"limit": 1})
    assert first.json()["results"] == [
        {
            "toObjectId": tasks[0],
            "associationTypes": [{"category": "HUBSPOT_DEFINED", "typeId": 215}],
        }
    ]
    after = first.json()["paging"]["next"]["after"]
    rest = api.get(
        f"/crm/v4/objects/deals/{deal}/associations/tasks", params={"limit": 1, "after": after}
    ).json()
    # The archived task is left out; the last page has no paging.
    assert [r["toObjectId"] for r in rest["results"]] == [tasks[2]]
    assert "paging" not in rest
    back = api.get(f"/crm/v4/objects/contacts/{contact}/associations/deals").json()["results"]
    assert back == [
        {"toObjectId": deal, "associationTypes": [{"category": "HUBSPOT_DEFINED", "typeId": 4}]}
    ]
    assert api.get("/crm/v4/objects/deals/999/associations/tasks").status_code == 404
    assert hubspot.hubspot.stats()["calls"]["lookup_task"] == 3


def test_a_batch_read_names_the_ids_it_could_not_find(api):
    ids = [create(api, "tasks", {**TASK, "onefold_ref": f"t{n}"}).json()["id"] for n in range(2)]
    query = {"properties": ["onefold_ref"], "propertiesWithHistory": []}
    found = api.post(
        "/crm/v3/objects/tasks/batch/read", json={**query, "inputs": [{"id": i} for i in ids]}
    )
    assert found.status_code == 200
    assert found.json()["status"] == "COMPLETE"
    assert [r["properties"]["onefold_ref"] for r in found.json()["results"]] == ["t0", "t1"]
    partial = api.post(
        "/crm/v3/objects/tasks/batch/read",
        json={**query, "inputs": [{"id": ids[0]}, {"id": "999"}]},
    )
    assert partial.status_code == 207
    assert partial.json()["errors"][0]["category"] == "OBJECT_NOT_FOUND"
    assert partial.json()["errors"][0]["context"] == {"ids": ["999"]}
    too_many = api.post(
        "/crm/v3/objects/tasks/batch/read",
        json={**query, "inputs": [{"id": str(n)} for n in range(101)]},
    )
    assert too_many.status_code == 400
