"""Contract tests: the HubSpot and Resend adapters against their emulators, every
request and every answer checked against the vendor's own description of its API.

Resend's OpenAPI document is vendored in lab/specs/resend/ (source and licence in the
README there); HubSpot's shapes are the models of its Apache-2.0 Python client
(tests/support/hubspot_shapes.py). tests/support/vendor_specs.py records the traffic,
validates it and holds the one list of excuses (each with its reason and source). Each
test drives the adapter's operations over real sockets and names the excuses it relies on; an excuse
named that excuses nothing fails, so a fixed cause takes its excuse with it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from integrations.base import ConfiguredCrmNames, DestinationError
from integrations.hubspot.adapter import HubSpotCrm, adapter_from_env
from integrations.resend.adapter import ResendSender
from lab.emulators.hubspot import HubSpotEmulator
from lab.emulators.resend import ResendEmulator, ResendStore
from tests.support.vendor_specs import (
    EXCUSES,
    SPECS_DIR,
    hubspot_contract,
    operations,
    recording,
    resend_contract,
)

TOKEN = "pat-na1-contract-0123456789"
API_KEY = "re_contract_0123456789"
SENDER = "enquiries@onefold.example"
ADA = {
    "name": "Ada Lovelace",
    "email": "ada@example.com",
    "phone": "+44 20 7946 0000",
    "message": "Please quote for a kitchen refit.",
    "form": "contact",
    "fields": {"budget": "10k"},
}


# -- HubSpot -----------------------------------------------------------------------


@pytest.fixture
def hubspot() -> Iterator[HubSpotEmulator]:
    with HubSpotEmulator() as emulator:
        emulator.hubspot.set_config({"token": TOKEN})
        yield emulator


def hubspot_adapter(emulator: HubSpotEmulator, **env: str) -> HubSpotCrm:
    return adapter_from_env(
        base_url=emulator.http_url, timeout=5, env={"HUBSPOT_TOKEN": TOKEN, **env}
    )


def test_every_deal_operation_keeps_hubspots_documents(hubspot):
    crm = hubspot_adapter(hubspot)
    since = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    with recording() as traffic:
        assert all(check.verified for check in crm.verify())
        first = crm.create_record(external_ref="opk_1", fields=ADA)
        crm.create_record(external_ref="opk_1", fields=ADA)  # 409 on the reference, adopted
        second = crm.create_record(external_ref="opk_2", fields={**ADA, "message": "Again"})
        assert crm.find_record(external_ref="opk_1") == first.ref
        assert crm.find_record(external_ref="opk_absent") is None
        assert crm.get_record(first.ref)["email"] == "ada@example.com"
        crm.update_record(record_id=first.ref, fields={**ADA, "message": "Changed"})
        pages = list(crm.iter_records(since=since, limit=1))
        task = crm.create_task(
            record_id=first.ref, external_ref="opk_t", title="Call back", assignee="42"
        )
        assert crm.find_task(record_id=first.ref, external_ref="opk_t") == task.ref
        crm.merge_records(survivor_id=first.ref, duplicate_id=second.ref, key="opk_m")
        crm.merge_records(survivor_id=first.ref, duplicate_id=second.ref, key="opk_m")
    assert sum(len(page) for page, _ in pages) == 2
    hubspot_contract().assert_kept(traffic)
    assert operations(traffic) >= {
        "GET /crm/v3/properties/deals/onefold_ref 200",
        "POST /crm/v3/objects/contacts 201",
        "POST /crm/v3/objects/contacts 409",
        "POST /crm/v3/objects/deals 201",
        "POST /crm/v3/objects/deals 409",
        "GET /crm/v3/objects/deals/opk_1 200",
        "GET /crm/v3/objects/deals/opk_absent 404",
        "GET /crm/v3/objects/deals/{id} 200",
        "GET /crm/v3/objects/contacts/{id} 200",
        "PATCH /crm/v3/objects/deals/{id} 200",
        "GET /crm/v3/objects/deals 200",
        "POST /crm/v3/objects/tasks 201",
        "POST /crm/v3/objects/deals/merge 200",
        "POST /crm/v3/objects/deals/merge 400",
    }


def test_every_ticket_operation_keeps_hubspots_documents(hubspot):
    crm = hubspot_adapter(hubspot, HUBSPOT_ENQUIRY_OBJECT="tickets")
    with recording() as traffic:
        assert all(check.verified for check in crm.verify())
        record = crm.create_record(external_ref="opk_1", fields=ADA).ref
        assert crm.find_record(external_ref="opk_1") == record
        assert crm.get_record(record)["external_ref"] == "opk_1"
        task = crm.create_task(record_id=record, external_ref="opk_t", title="Call", assignee="")
        assert crm.find_task(record_id=record, external_ref="opk_t") == task.ref
    hubspot_contract().assert_kept(traffic)
    assert operations(traffic) >= {
        "GET /crm/v3/properties/tickets/onefold_ref 200",
        "POST /crm/v3/objects/tickets 201",
        "GET /crm/v3/objects/tickets/opk_1 200",
        "GET /crm/v3/objects/tickets/{id} 200",
        "POST /crm/v3/objects/tasks 201",
    }


def test_configured_names_and_owners_keep_hubspots_documents(hubspot):
    """The schema and owners reads `check_destinations` makes, and a task whose
    configured assignee is mapped to its owner: the Properties and Owners documents."""
    crm = hubspot_adapter(hubspot)
    names = ConfiguredCrmNames(
        enquiry_properties=frozenset({"amount", "no_such_property"}),
        contact_properties=frozenset({"company"}),
        assignees=frozenset({"Ana Lima", "ben.okafor@example.com", "nobody@example.com"}),
    )
    with recording() as traffic:
        verdicts = {c.capability: c.verified for c in crm.names_check(names)}
        record = crm.create_record(external_ref="opk_1", fields=ADA).ref
        crm.create_task(
            record_id=record,
            external_ref="opk_t",
            title="Call",
            assignee="ana.lima@example.com",
            assignee_is_owner=True,
        )
    assert verdicts == {
        "enquiry.fields[amount]": True,
        "enquiry.fields[no_such_property]": False,
        "contact.fields[company]": True,
        "task.assignee[Ana Lima]": True,
        "task.assignee[ben.okafor@example.com]": True,
        "task.assignee[nobody@example.com]": False,
    }
    hubspot_contract().assert_kept(traffic)
    assert operations(traffic) >= {
        "GET /crm/v3/properties/deals 200",
        "GET /crm/v3/properties/contacts 200",
        "GET /crm/v3/owners 200",
        "POST /crm/v3/objects/tasks 201",
    }


def test_hubspots_refusals_keep_its_documents(hubspot):
    """Errors share one Error schema in every document (`default`); the rate limit's
    own body is the documented exception."""
    crm = hubspot_adapter(hubspot)
    wrong_token = hubspot_adapter(hubspot, HUBSPOT_TOKEN="pat-na1-wrong")
    with recording() as traffic:
        with pytest.raises(DestinationError):
            wrong_token.find_record(external_ref="opk_1")
        hubspot.hubspot.set_config({"reference_missing_on": ["tasks"]})
        assert not all(check.verified for check in crm.verify())
        hubspot.hubspot.set_config({"reference_missing_on": []})
        for mode in ("http_429", "http_503", "fail_before_commit", "http_400"):
            hubspot.hubspot.add_fault(action="create_record", mode=mode)
            with pytest.raises(DestinationError):
                crm.create_record(external_ref="opk_1", fields=ADA)
        hubspot.hubspot.set_config({"rate_limit_policy": "DAILY"})
        hubspot.hubspot.add_fault(action="create_task", mode="http_429")
        record = crm.create_record(external_ref="opk_1", fields=ADA).ref
        with pytest.raises(DestinationError):
            crm.create_task(record_id=record, external_ref="opk_t", title="Call", assignee="")
        hubspot.hubspot.add_fault(action="create_record", mode="http_500_after_commit")
        with pytest.raises(DestinationError):
            crm.create_record(external_ref="opk_2", fields=ADA)
    hubspot_contract().assert_kept(traffic, excused=("hubspot-rate-limit-body",))
    assert operations(traffic) >= {
        "GET /crm/v3/objects/deals/opk_1 401",
        "GET /crm/v3/properties/tasks/onefold_ref 404",
        "POST /crm/v3/objects/deals 429",
        "POST /crm/v3/objects/deals 503",
        "POST /crm/v3/objects/deals 500",
        "POST /crm/v3/objects/deals 400",
        "POST /crm/v3/objects/tasks 429",
    }


# -- Resend ------------------------------------------------------------------------


@pytest.fixture
def resend() -> Iterator[ResendEmulator]:
    with ResendEmulator() as emulator:
        assert isinstance(emulator.store, ResendStore)
        emulator.store.set_config(
            {
                "api_key": API_KEY,
                "domains": [{"name": "onefold.example", "status": "verified"}],
                # These tests check shapes, not pacing: several requests come back to back.
                "rate_limit": None,
            }
        )
        yield emulator


def resend_adapter(emulator: ResendEmulator, api_key: str = API_KEY) -> ResendSender:
    return ResendSender(emulator.http_url, api_key=api_key, sender=SENDER, timeout=5)


def confirm(sender: ResendSender, key: str = "opk_1", body: str = "Thank you.") -> None:
    sender.send(operation_key=key, to="ada@example.com", subject="Received", body=body)


def test_sending_and_verifying_keep_resends_document(resend):
    sender = resend_adapter(resend)
    with recording() as traffic:
        assert all(check.verified for check in sender.verify())
        confirm(sender)
        confirm(sender)  # the same key and payload: the first answer again
    resend_contract().assert_kept(traffic)
    assert operations(traffic) == {"GET /domains 200", "POST /emails 200"}


def test_resends_refusals_are_not_in_its_document(resend):
    """Resend's document lists no error answer: the requests that met a refusal are
    checked against it, the refusals themselves are excused (one excuse for all)."""
    sender = resend_adapter(resend)
    assert isinstance(resend.store, ResendStore)
    with recording() as traffic:
        with pytest.raises(DestinationError):
            confirm(resend_adapter(resend, api_key="re_wrong_0123"))
        confirm(sender)
        with pytest.raises(DestinationError):
            confirm(sender, body="Another body under the same key.")
        with pytest.raises(DestinationError):
            sender.send(operation_key="opk_2", to="not-an-address", subject="s", body="b")
        for mode in ("http_429", "fail_before_commit"):
            resend.store.add_fault(action="send_email", mode=mode)
            with pytest.raises(DestinationError):
                confirm(sender, key="opk_3")
        resend.store.set_config({"api_key_permission": "sending_access"})
        sender.verify()
    resend_contract().assert_kept(traffic, excused=("resend-errors-undocumented",))
    assert operations(traffic) >= {
        "POST /emails 403",
        "POST /emails 409",
        "POST /emails 422",
        "POST /emails 429",
        "POST /emails 500",
        "GET /domains 401",
    }


def test_the_emulators_other_answers_keep_resends_document(resend):
    """What no adapter asks but the emulator serves: an email read back, a request
    without a key (the request breaks the document on purpose: its answer is judged)."""
    sender = resend_adapter(resend)
    with recording() as traffic:
        confirm(sender)
    email_id = traffic[0].json()["id"]
    with httpx.Client(base_url=resend.http_url, timeout=5) as http:
        read = http.get(f"/emails/{email_id}", headers={"Authorization": f"Bearer {API_KEY}"})
        missing = http.get(
            "/emails/8e3f0c1e-0000-4000-8000-000000000000",
            headers={"Authorization": f"Bearer {API_KEY}"},
        )
        keyless = http.post("/emails", json={})
    contract = resend_contract()
    contract.assert_kept([read], excused=("resend-email-bodies-null",))
    contract.assert_kept([missing], excused=("resend-errors-undocumented",))
    contract.assert_kept([keyless], excused=("resend-errors-undocumented",), requests=False)
    assert (read.status_code, missing.status_code, keyless.status_code) == (200, 404, 401)


# -- the contract can fail ---------------------------------------------------------


def test_a_request_with_a_property_of_the_wrong_type_breaks_the_contract(hubspot, monkeypatch):
    """HubSpot's property values are strings: a number breaks the document, whatever
    the emulator makes of it."""
    crm = hubspot_adapter(hubspot)
    original = HubSpotCrm._enquiry_properties
    monkeypatch.setattr(
        HubSpotCrm,
        "_enquiry_properties",
        lambda self, fields: {**original(self, fields), "amount": 1200},
    )
    with recording() as traffic, pytest.raises(DestinationError):
        crm.create_record(external_ref="opk_1", fields=ADA)
    contract = hubspot_contract()
    assert (
        "POST /crm/v3/objects/deals request: body $.properties.amount: 1200 is not of type 'string'"
    ) in contract.problems(traffic)
    with pytest.raises(AssertionError, match="amount"):
        contract.assert_kept(traffic)


def test_an_answer_missing_a_required_field_breaks_the_contract(hubspot, monkeypatch):
    crm = hubspot_adapter(hubspot)
    create = hubspot.hubspot.create
    monkeypatch.setattr(
        hubspot.hubspot,
        "create",
        lambda *args: {k: v for k, v in create(*args).items() if k != "createdAt"},
    )
    with recording() as traffic:
        crm.create_record(external_ref="opk_1", fields=ADA)
    problems = hubspot_contract().problems(traffic)
    assert "POST /crm/v3/objects/deals answer 201: body: 'createdAt' is a required property" in (
        problems
    )


def test_an_answer_with_a_field_of_the_wrong_type_breaks_the_contract(resend, monkeypatch):
    assert isinstance(resend.store, ResendStore)
    store_email = resend.store.store_email
    monkeypatch.setattr(
        resend.store,
        "store_email",
        lambda *args, **kwargs: {**store_email(*args, **kwargs), "id": 1234},
    )
    with recording() as traffic, pytest.raises(DestinationError):
        confirm(resend_adapter(resend))
    problems = resend_contract().problems(traffic)
    assert problems == ["POST /emails answer 200: body $.id: 1234 is not of type 'string'"]


def test_an_excuse_that_excuses_nothing_fails(resend):
    with recording() as traffic:
        confirm(resend_adapter(resend))
    with pytest.raises(AssertionError, match="excused nothing"):
        resend_contract().assert_kept(traffic, excused=("resend-errors-undocumented",))


def test_every_excuse_gives_its_reason_and_source():
    for excuse in EXCUSES.values():
        assert excuse.reason and excuse.source, excuse.name


# -- the documents are the vendors' ------------------------------------------------


def test_the_vendored_documents_are_the_vendors_files_unedited():
    """Each README names every document with the git blob id it had in the vendor's
    repository; the file must still hash to it (`git hash-object`)."""
    for readme in SPECS_DIR.glob("*/README.md"):
        rows = re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{40})` \|$", readme.read_text(), re.M)
        documents = {p.name for p in readme.parent.glob("*.json")}
        assert {name for name, _ in rows} == documents, readme
        for name, blob in rows:
            content = (readme.parent / name).read_bytes()
            header = f"blob {len(content)}\0".encode()
            assert hashlib.sha1(header + content).hexdigest() == blob, name
