"""The HubSpot adapter against the HubSpot emulator on loopback, answer by answer.

Each test counts what the emulator holds afterwards (contacts, deals, tasks by
our reference), so "adopted" always means "no second object", never only a flag.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from integrations.base import (
    Classification,
    CrmAdapter,
    DestinationError,
    Effect,
    RateLimit,
    RecordContent,
)
from integrations.http import shared_client
from integrations.hubspot.adapter import HubSpotCrm, adapter_from_env
from integrations.times import seconds_to_midnight
from lab.emulators.hubspot import DEFAULT_TOKEN, HubSpotEmulator

ADA = {
    "name": "Ada Lovelace",
    "email": "ada@example.com",
    "phone": "+44 20 7946 0000",
    "message": "Please quote for a kitchen refit.",
    "form": "contact",
    "fields": {"budget": "10k"},
}


@pytest.fixture
def hubspot() -> Iterator[HubSpotEmulator]:
    with HubSpotEmulator() as emulator:
        yield emulator


def adapter(emulator: HubSpotEmulator, **env: str) -> HubSpotCrm:
    return adapter_from_env(base_url=None, timeout=5, env={**emulator.adapter_env(), **env})


@pytest.fixture
def crm(hubspot: HubSpotEmulator) -> HubSpotCrm:
    return adapter(hubspot)


def stats(emulator: HubSpotEmulator) -> dict[str, Any]:
    return emulator.hubspot.stats()


def fault(emulator: HubSpotEmulator, action: str, mode: str, **extra: Any) -> None:
    emulator.hubspot.add_fault(action=action, mode=mode, **extra)


def search_by_ref(emulator: HubSpotEmulator, object_type: str, ref: str) -> int:
    """What a search-based integration would see: HubSpot's search for our reference."""
    response = httpx.post(
        f"{emulator.http_url}/crm/v3/objects/{object_type}/search",
        headers={"Authorization": f"Bearer {DEFAULT_TOKEN}"},
        json={"filterGroups": [{"filters": [{"propertyName": "onefold_ref", "value": ref}]}]},
    )
    response.raise_for_status()
    return int(response.json()["total"])


def test_the_adapter_speaks_the_crm_protocol(crm):
    assert isinstance(crm, CrmAdapter)
    caps = crm.capabilities
    assert (caps.unique_external_ref, caps.lookup, caps.lookup_proves_absence) == (True, True, True)
    assert (caps.idempotency_keys, caps.merge) == (False, True)
    # Tasks have no unique property in HubSpot: found by lookup, which proves absence.
    tasks = caps.for_tasks()
    assert (tasks.unique_external_ref, tasks.lookup, tasks.lookup_proves_absence) == (
        False,
        True,
        True,
    )


# -- contact, enquiry, task ---------------------------------------------------------


def test_an_enquiry_is_a_contact_and_a_deal_associated_to_it(hubspot, crm):
    effect = crm.create_record(external_ref="opk_1", fields=ADA)
    assert not effect.adopted and str(effect.reply) == "HTTP 201"
    record = crm.get_record(effect.ref)
    assert record["external_ref"] == "opk_1"
    assert (record["name"], record["email"]) == ("Ada Lovelace", "ada@example.com")
    assert "kitchen refit" in record["message"] and record["merged_into"] is None
    counts = stats(hubspot)
    assert (counts["contacts"], counts["records"]) == (1, 1)
    assert counts["records_by_external_ref"] == {"opk_1": 1}


def test_a_returning_customer_is_the_same_contact_with_a_second_deal(hubspot, crm):
    first = crm.create_record(external_ref="opk_1", fields=ADA)
    second = crm.create_record(
        external_ref="opk_2", fields={**ADA, "email": "ADA@example.com", "message": "Again"}
    )
    assert first.ref != second.ref and not second.adopted
    counts = stats(hubspot)
    assert (counts["contacts"], counts["records"]) == (1, 2)
    assert counts["contacts_by_email"] == {"ada@example.com": 1}
    # Both deals hang off the one contact (its id came from the 409's message text).
    assert crm.get_record(second.ref)["email"] == "ada@example.com"
    assert counts["calls"]["create_contact"] == 2


def test_a_repeated_create_adopts_the_deal_it_made(hubspot, crm):
    first = crm.create_record(external_ref="opk_1", fields=ADA)
    again = crm.create_record(external_ref="opk_1", fields=ADA)
    assert again.adopted and again.ref == first.ref and str(again.reply) == "HTTP 409"
    counts = stats(hubspot)
    assert (counts["contacts"], counts["records"], counts["calls"]["create_record"]) == (1, 1, 2)


def test_twenty_simultaneous_creates_of_one_enquiry_make_one_contact_and_one_deal(hubspot, crm):
    barrier = threading.Barrier(20)

    def create() -> Effect:
        barrier.wait()
        return crm.create_record(external_ref="opk_1", fields=ADA)

    with ThreadPoolExecutor(max_workers=20) as pool:
        effects = list(pool.map(lambda _: create(), range(20)))
    assert len({e.ref for e in effects}) == 1
    assert sum(not e.adopted for e in effects) == 1
    counts = stats(hubspot)
    assert (counts["contacts"], counts["records"], counts["calls"]["create_record"]) == (1, 1, 20)


def test_a_lost_create_answer_under_search_lag_is_found_by_id_property(hubspot, crm):
    hubspot.hubspot.set_config({"search_lag_seconds": 5})
    fault(hubspot, "create_record", "drop_response_after_commit")
    with pytest.raises(DestinationError) as lost:
        crm.create_record(external_ref="opk_1", fields=ADA)
    assert lost.value.classification == Classification.AMBIGUOUS
    # Search does not see the deal yet: "not found in search" would be a lie.
    assert search_by_ref(hubspot, "deals", "opk_1") == 0
    found = crm.find_record(external_ref="opk_1")
    assert found is not None
    retried = crm.create_record(external_ref="opk_1", fields=ADA)
    assert retried.adopted and retried.ref == found
    counts = stats(hubspot)
    assert (counts["contacts"], counts["records"]) == (1, 1)


def test_a_lost_contact_answer_is_followed_by_one_contact(hubspot, crm):
    fault(hubspot, "create_contact", "drop_response_after_commit")
    with pytest.raises(DestinationError) as lost:
        crm.create_record(external_ref="opk_1", fields=ADA)
    assert lost.value.classification == Classification.AMBIGUOUS
    assert (stats(hubspot)["contacts"], stats(hubspot)["records"]) == (1, 0)
    effect = crm.create_record(external_ref="opk_1", fields=ADA)
    assert not effect.adopted
    assert (stats(hubspot)["contacts"], stats(hubspot)["records"]) == (1, 1)


def test_a_task_whose_answer_was_lost_is_found_through_the_deals_associations(hubspot, crm):
    record = crm.create_record(external_ref="opk_1", fields=ADA).ref
    other = crm.create_task(record_id=record, external_ref="opk_t0", title="Earlier", assignee="")
    fault(hubspot, "create_task", "drop_response_after_commit")
    with pytest.raises(DestinationError) as lost:
        crm.create_task(record_id=record, external_ref="opk_t", title="Follow up", assignee="sales")
    assert lost.value.classification == Classification.AMBIGUOUS
    # Search has not seen the task yet; the deal's own association list has.
    assert search_by_ref(hubspot, "tasks", "opk_t") == 0
    found = crm.find_task(record_id=record, external_ref="opk_t")
    assert found is not None and found != other.ref
    assert (
        hubspot.hubspot.read("tasks", found, id_property=None, wanted=None, with_associations=())[
            "properties"
        ]["onefold_ref"]
        == "opk_t"
    )
    counts = stats(hubspot)
    assert (counts["tasks"], counts["tasks_by_external_ref"]) == (2, {"opk_t": 1, "opk_t0": 1})
    assert (counts["calls"]["lookup_task"], counts["calls"]["batch_read"]) == (1, 1)


def test_a_task_never_created_is_proven_absent(hubspot, crm):
    record = crm.create_record(external_ref="opk_1", fields=ADA).ref
    crm.create_task(record_id=record, external_ref="opk_t0", title="Earlier", assignee="")
    fault(hubspot, "create_task", "fail_before_commit")
    with pytest.raises(DestinationError) as failed:
        crm.create_task(record_id=record, external_ref="opk_t", title="Follow up", assignee="")
    assert failed.value.classification == Classification.AMBIGUOUS
    assert crm.find_task(record_id=record, external_ref="opk_t") is None
    # So creating it now makes the one task, not a second.
    crm.create_task(record_id=record, external_ref="opk_t", title="Follow up", assignee="")
    assert stats(hubspot)["tasks_by_external_ref"] == {"opk_t": 1, "opk_t0": 1}


def test_a_task_lookup_reads_every_page_of_associations(hubspot, crm):
    """More tasks than one page of the v4 association read (500) holds: the match on the
    second page is found, and each batch read stays within HubSpot's 100 inputs."""
    hubspot.hubspot.set_config({"rate_limits": False})  # 520 task creates in a row
    record = crm.create_record(external_ref="opk_1", fields=ADA).ref
    refs = [f"opk_t{n}" for n in range(520)]
    made = {
        ref: crm.create_task(record_id=record, external_ref=ref, title="T", assignee="").ref
        for ref in refs
    }
    assert crm.find_task(record_id=record, external_ref="opk_t519") == made["opk_t519"]
    counts = stats(hubspot)["calls"]
    assert (counts["lookup_task"], counts["batch_read"]) == (2, 6)


def test_a_task_on_another_deal_is_not_found(hubspot, crm):
    first = crm.create_record(external_ref="opk_1", fields=ADA).ref
    second = crm.create_record(external_ref="opk_2", fields=ADA).ref
    crm.create_task(record_id=first, external_ref="opk_t", title="T", assignee="")
    assert crm.find_task(record_id=second, external_ref="opk_t") is None


def test_a_conflict_on_another_property_is_not_adopted(hubspot, crm):
    # An admin made the deal's name unique: the same customer's second enquiry clashes
    # there, and adopting the first deal would lose the second enquiry.
    hubspot.hubspot.set_config({"unique_properties": {"deals": ["dealname"]}})
    crm.create_record(external_ref="opk_1", fields=ADA)
    with pytest.raises(DestinationError) as refused:
        crm.create_record(external_ref="opk_2", fields=ADA)
    assert refused.value.classification == Classification.PERMANENT
    assert str(refused.value.reply) == "HTTP 409"
    assert "not on onefold_ref: not adopted" in refused.value.message
    assert stats(hubspot)["records_by_external_ref"] == {"opk_1": 1}


def test_tickets_by_configuration(hubspot):
    crm = adapter(hubspot, HUBSPOT_ENQUIRY_OBJECT="tickets")
    record = crm.create_record(external_ref="opk_1", fields=ADA).ref
    task = crm.create_task(record_id=record, external_ref="opk_t", title="Call", assignee="42")
    assert crm.find_record(external_ref="opk_1") == record
    assert crm.find_task(record_id=record, external_ref="opk_t") == task.ref
    ticket = hubspot.hubspot.read(
        "tickets", record, id_property=None, wanted=None, with_associations=("contacts", "tasks")
    )
    assert ticket["properties"]["hs_pipeline_stage"] == "1"
    assert ticket["associations"]["tasks"]["results"][0]["id"] == task.ref
    assert (stats(hubspot)["records"], stats(hubspot)["tasks"]) == (1, 1)


def test_a_wrong_association_type_is_refused_by_hubspot(hubspot):
    crm = adapter(hubspot, HUBSPOT_CONTACT_ASSOCIATION_TYPE="4")  # contact→deal, reversed
    with pytest.raises(DestinationError) as refused:
        crm.create_record(external_ref="opk_1", fields=ADA)
    assert refused.value.classification == Classification.PERMANENT
    assert "Association type [4] is not valid from deals to contacts" in refused.value.message
    assert stats(hubspot)["records"] == 0


def test_update_merge_and_listing(hubspot, crm):
    survivor = crm.create_record(external_ref="opk_1", fields=ADA).ref
    duplicate = crm.create_record(external_ref="opk_2", fields=ADA).ref
    third = crm.create_record(external_ref="opk_3", fields={**ADA, "email": "kim@example.com"})
    crm.update_record(record_id=survivor, fields={**ADA, "name": "Ada King"})
    assert crm.get_record(survivor)["extra"]["dealname"] == "Contact enquiry from Ada King"
    pages = list(crm.iter_records(since="2000-01-01T00:00:00Z", limit=2))
    assert [len(page) for page, _ in pages] == [2, 1] and pages[-1][1] is None
    resumed = list(crm.iter_records(since="2000-01-01T00:00:00Z", cursor=pages[0][1], limit=2))
    assert [r["id"] for page, _ in resumed for r in page] == [third.ref]
    assert list(crm.iter_records(since="2999-01-01T00:00:00Z")) == [([], None)]
    assert not crm.merge_records(survivor_id=survivor, duplicate_id=duplicate, key="m").adopted
    # A repeat of the merge is refused by HubSpot; the duplicate reads as merged: adopted.
    assert crm.merge_records(survivor_id=survivor, duplicate_id=duplicate, key="m").adopted
    assert crm.get_record(duplicate)["merged_into"] == survivor
    assert stats(hubspot)["records"] == 2


def test_reference_check_names_hubspot_ids_only(crm):
    assert crm.reference_check("12345678") is None
    for typed in ("rec_000001", "../_sandbox/stats", "0", "12 3", ""):
        assert crm.reference_check(typed) is not None


# -- classification -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "mode", "classification"),
    [
        ("create_record", "fail_before_commit", Classification.AMBIGUOUS),
        ("create_record", "http_500_after_commit", Classification.AMBIGUOUS),
        ("create_record", "drop_response_after_commit", Classification.AMBIGUOUS),
        ("create_record", "http_400", Classification.PERMANENT),
        ("create_record", "http_503", Classification.RETRYABLE),
        ("create_contact", "http_400", Classification.PERMANENT),
        ("create_contact", "http_503", Classification.RETRYABLE),
    ],
)
def test_each_answer_is_classified(hubspot, crm, action, mode, classification):
    fault(hubspot, action, mode, seconds=2)
    with pytest.raises(DestinationError) as failed:
        crm.create_record(external_ref="opk_1", fields=ADA)
    assert failed.value.classification == classification
    if mode == "http_503":
        assert failed.value.retry_after == 2


def test_the_ten_second_limit_waits_ten_seconds_or_retry_after(hubspot, crm):
    fault(hubspot, "create_record", "http_429")
    with pytest.raises(DestinationError) as limited:
        crm.create_record(external_ref="opk_1", fields=ADA)
    assert limited.value.classification == Classification.RETRYABLE
    assert limited.value.rate_limit == RateLimit.WINDOW
    assert limited.value.retry_after == 10
    assert "RATE_LIMIT (TEN_SECONDLY_ROLLING)" in limited.value.message
    hubspot.hubspot.set_config({"retry_after_header": True})
    fault(hubspot, "create_record", "http_429", seconds=3)
    with pytest.raises(DestinationError) as told:
        crm.create_record(external_ref="opk_1", fields=ADA)
    assert told.value.retry_after == 3
    assert stats(hubspot)["records"] == 0


@pytest.mark.parametrize("zone", ["UTC", "Pacific/Auckland", "America/Los_Angeles"])
def test_the_daily_limit_waits_for_the_accounts_midnight(hubspot, zone):
    crm = adapter(hubspot, HUBSPOT_ACCOUNT_TIMEZONE=zone)
    hubspot.hubspot.set_config({"rate_limit_policy": "DAILY"})
    fault(hubspot, "create_record", "http_429")
    with pytest.raises(DestinationError) as limited:
        crm.create_record(external_ref="opk_1", fields=ADA)
    assert limited.value.classification == Classification.RETRYABLE
    assert limited.value.rate_limit == RateLimit.DAILY
    assert "RATE_LIMIT (DAILY)" in limited.value.message
    assert limited.value.retry_after == pytest.approx(seconds_to_midnight(zone), abs=5)


def test_past_hubspots_ten_second_limit_the_adapter_is_told_to_wait(hubspot, crm):
    # Four requests allowed per ten seconds: the contact, the deal, then a second
    # enquiry's contact and deal; the fifth request is refused, nothing created by it.
    hubspot.hubspot.set_config({"rate_limits": {"ten_secondly": 4}})
    crm.create_record(external_ref="opk_1", fields=ADA)
    crm.create_record(external_ref="opk_2", fields=ADA)
    with pytest.raises(DestinationError) as limited:
        crm.create_record(external_ref="opk_3", fields=ADA)
    assert (limited.value.classification, limited.value.rate_limit) == (
        Classification.RETRYABLE,
        RateLimit.WINDOW,
    )
    assert limited.value.retry_after == 10  # X-HubSpot-RateLimit-Interval-Milliseconds
    assert "RATE_LIMIT (TEN_SECONDLY_ROLLING)" in limited.value.message
    counts = stats(hubspot)
    assert (counts["records"], counts["calls"]["rate_limited"]) == (2, 1)


def test_a_spent_day_parks_until_the_accounts_midnight(hubspot):
    crm = adapter(hubspot, HUBSPOT_ACCOUNT_TIMEZONE="Europe/Paris")
    hubspot.hubspot.set_config({"rate_limits": {"daily": 2}})
    crm.create_record(external_ref="opk_1", fields=ADA)
    with pytest.raises(DestinationError) as limited:
        crm.create_record(external_ref="opk_2", fields=ADA)
    assert limited.value.rate_limit == RateLimit.DAILY
    assert "RATE_LIMIT (DAILY)" in limited.value.message
    assert limited.value.retry_after == pytest.approx(seconds_to_midnight("Europe/Paris"), abs=5)
    hubspot.hubspot.new_day()
    assert not crm.create_record(external_ref="opk_2", fields=ADA).adopted
    assert stats(hubspot)["records_by_external_ref"] == {"opk_1": 1, "opk_2": 1}


def test_a_clash_answered_400_on_our_reference_is_adopted_by_reading_it(hubspot, crm):
    hubspot.hubspot.set_config({"unique_clash_status": 400})
    first = crm.create_record(external_ref="opk_1", fields=ADA)
    again = crm.create_record(external_ref="opk_1", fields=ADA)
    assert again.adopted and again.ref == first.ref and str(again.reply) == "HTTP 400"
    counts = stats(hubspot)
    assert (counts["records"], counts["calls"]["lookup_record"]) == (1, 1)


def test_a_clash_answered_400_on_another_property_stays_a_refusal(hubspot, crm):
    hubspot.hubspot.set_config(
        {"unique_clash_status": 400, "unique_properties": {"deals": ["dealname"]}}
    )
    crm.create_record(external_ref="opk_1", fields=ADA)
    with pytest.raises(DestinationError) as refused:
        crm.create_record(external_ref="opk_2", fields=ADA)
    assert refused.value.classification == Classification.PERMANENT
    assert str(refused.value.reply) == "HTTP 400"
    assert stats(hubspot)["records_by_external_ref"] == {"opk_1": 1}
    assert stats(hubspot)["calls"]["lookup_record"] == 0


def test_a_contact_create_carries_the_associations_the_spec_requires(hubspot, crm):
    """The Contacts v3 spec marks `associations` required on create: the request on the
    wire, read from the shared client's own hook, carries it (empty)."""
    sent: list[httpx.Request] = []
    hooks = shared_client().event_hooks["request"]
    hooks.append(sent.append)
    try:
        crm.create_record(external_ref="opk_1", fields=ADA)
    finally:
        hooks.remove(sent.append)
    contact = next(r for r in sent if r.url.path == "/crm/v3/objects/contacts")
    assert json.loads(contact.content) == {
        "properties": {
            "email": "ada@example.com",
            "firstname": "Ada",
            "lastname": "Lovelace",
            "phone": "+44 20 7946 0000",
        },
        "associations": [],
    }


def test_midnight_is_the_accounts_own():
    now = datetime(2026, 11, 30, 22, 30, tzinfo=UTC)
    assert seconds_to_midnight("UTC", now=now) == 5400
    assert seconds_to_midnight("Europe/Paris", now=now) == 1800  # 23:30 there
    assert seconds_to_midnight("America/New_York", now=now) == 23400  # 17:30 there
    # The night clocks go back in New York: 01:00 EDT (05:00Z) to midnight is 24 hours.
    fall_back = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)
    assert seconds_to_midnight("America/New_York", now=fall_back) == 24 * 3600


def test_a_refused_token_is_permanent_and_never_repeated_in_the_message(hubspot):
    crm = adapter_from_env(
        base_url=hubspot.http_url, timeout=5, env={"HUBSPOT_TOKEN": "pat-wrong-secret-42"}
    )
    with pytest.raises(DestinationError) as refused:
        crm.create_record(external_ref="opk_1", fields=ADA)
    assert refused.value.classification == Classification.PERMANENT
    assert str(refused.value.reply) == "HTTP 401"
    assert "INVALID_AUTHENTICATION" in refused.value.message
    assert "pat-wrong-secret-42" not in refused.value.message
    assert (stats(hubspot)["contacts"], stats(hubspot)["records"]) == (0, 0)


def test_lookup_by_a_property_that_is_not_unique_is_refused(hubspot, crm):
    hubspot.hubspot.set_config({"reference_unique": False})
    with pytest.raises(DestinationError) as refused:
        crm.find_record(external_ref="opk_1")
    assert refused.value.classification == Classification.PERMANENT
    assert "non-unique" in refused.value.message


# -- verification -------------------------------------------------------------------


def test_verify_requires_unique_values_on_the_enquiry_only(crm):
    checks = crm.verify()
    assert [(c.capability, c.verified) for c in checks] == [
        ("unique_external_ref", True),
        ("lookup", True),
        ("tasks.lookup", True),
    ]
    assert checks[0].how == "GET /crm/v3/properties/deals/onefold_ref: hasUniqueValue=true"
    assert checks[2].how == (
        "GET /crm/v3/properties/tasks/onefold_ref: hasUniqueValue=false; lookup through the "
        "deal's associations (GET /crm/v4/objects/deals/{id}/associations/tasks)"
    )


def test_verify_refuses_an_enquiry_reference_without_unique_values(hubspot, crm):
    # What an account whose deal property lost its uniqueness (re-created without it) shows.
    hubspot.hubspot.set_config({"reference_unique": False})
    checks = crm.verify()
    assert [c.verified for c in checks] == [False, False, True]
    assert "deals/onefold_ref: hasUniqueValue=false" in checks[0].how


def test_verify_refuses_when_tasks_lack_the_property(hubspot):
    hubspot.hubspot.set_config({"reference_missing_on": ["tasks"]})
    checks = adapter(hubspot, HUBSPOT_ENQUIRY_OBJECT="tickets").verify()
    assert [(c.capability, c.verified) for c in checks] == [
        ("unique_external_ref", True),
        ("lookup", True),
        ("tasks.lookup", False),
    ]
    assert "tickets/onefold_ref: hasUniqueValue=true" in checks[0].how
    assert "tasks/onefold_ref: 404, the property does not exist on tasks" in checks[2].how
    assert "ticket's associations (GET /crm/v4/objects/tickets/{id}/associations/tasks)" in (
        checks[2].how
    )


def test_verify_without_a_token_asks_nothing(hubspot):
    crm = adapter_from_env(base_url=hubspot.http_url, timeout=5, env={})
    checks = crm.verify()
    assert [c.verified for c in checks] == [False, False, False]
    assert "HUBSPOT_TOKEN is not set" in checks[0].how
    assert stats(hubspot)["calls"].get("get_property", 0) == 0


def test_configuration_errors_are_loud():
    with pytest.raises(ValueError, match="HUBSPOT_ENQUIRY_OBJECT"):
        adapter_from_env(base_url=None, timeout=5, env={"HUBSPOT_ENQUIRY_OBJECT": "leads"})
    with pytest.raises(ValueError, match="HUBSPOT_ACCOUNT_TIMEZONE"):
        adapter_from_env(base_url=None, timeout=5, env={"HUBSPOT_ACCOUNT_TIMEZONE": "Mars/Base"})
    with pytest.raises(ValueError, match="HUBSPOT_TASK_ASSOCIATION_TYPE"):
        adapter_from_env(base_url=None, timeout=5, env={"HUBSPOT_TASK_ASSOCIATION_TYPE": "x"})
    crm = adapter_from_env(base_url=None, timeout=5, env={"HUBSPOT_BASE_URL": "http://x:1/"})
    assert crm.base_url == "http://x:1"
    assert adapter_from_env(base_url=None, timeout=5, env={}).base_url == "https://api.hubapi.com"


# -- what the business configured ----------------------------------------


def test_configured_properties_pipeline_and_stage_reach_the_deal_and_contact(hubspot, crm):
    content = RecordContent(
        properties={"amount": "10000"},
        contact_properties={"company": "Acme"},
        pipeline="default",
        stage="qualifiedtobuy",
    )
    effect = crm.create_record(external_ref="opk_cfg", fields=ADA, content=content)
    deal = hubspot.hubspot.read(
        "deals", effect.ref, id_property=None, wanted=None, with_associations=("contacts",)
    )
    props = deal["properties"]
    assert (props["amount"], props["pipeline"], props["dealstage"]) == (
        "10000",
        "default",
        "qualifiedtobuy",
    )
    assert props["onefold_ref"] == "opk_cfg"
    (contact_id,) = [a["id"] for a in deal["associations"]["contacts"]["results"]]
    contact = hubspot.hubspot.read(
        "contacts", contact_id, id_property=None, wanted=["company"], with_associations=()
    )
    assert contact["properties"]["company"] == "Acme"


def test_a_tasks_due_date_is_its_hs_timestamp(hubspot, crm):
    deal = crm.create_record(external_ref="opk_d", fields=ADA).ref
    due = datetime(2026, 11, 30, 10, 15, tzinfo=UTC)
    task = crm.create_task(
        record_id=deal, external_ref="opk_t", title="Call Ada", assignee="ana", due_at=due
    )
    read = hubspot.hubspot.read(
        "tasks", task.ref, id_property=None, wanted=["hs_timestamp"], with_associations=()
    )
    assert read["properties"]["hs_timestamp"] == "2026-11-30T10:15:00.000Z"
