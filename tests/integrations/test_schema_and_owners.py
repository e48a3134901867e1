"""What the business configuration names in a CRM is checked there, and reaches it mapped.

Per vendor, its emulator is the default CRM (over loopback, as in production), with a
custom property and a user added the way an admin would (each emulator's docstring).
The configuration names that property on the enquiry, a property of the contact, and
the user as the task's assignee (by email, through a from_field map with a default):

- `check_destinations` verifies every name against the vendor's schema and owners
  APIs, one line each;
- the engine's steps create the enquiry and the task, and the vendor's objects hold
  the properties (Pipedrive's by key: one configured by its name, one by its key)
  and the user's owner id;
- a configuration naming a property and an owner the CRM does not have makes
  `check_destinations` exit 1, naming both; the adapter refuses that owner PERMANENT.

The sandbox takes any name: the same command verifies them all.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command

from idempotency_core.execution.destinations import crm_adapter_for, verification_forget
from idempotency_core.execution.engine import operation_execute
from idempotency_core.models import Destination
from integrations.base import Classification, DestinationError
from lab.drill import VENDOR_SETUP
from lab.emulators import CRM_VENDORS, emulator_class
from lab.emulators.dataverse import API, DataverseEmulator
from lab.emulators.hubspot import DEFAULT_TOKEN, HubSpotEmulator
from lab.emulators.kit import EmulatorServer
from lab.emulators.pipedrive import (
    DEFAULT_API_TOKEN,
    LANGUAGE_FIELD_KEY,
    PipedriveEmulator,
    default_lead_fields,
)
from lab.emulators.salesforce import SalesforceEmulator
from tests.factories import configured, ingest, op

NEW_OWNER = {"first_name": "Cy", "last_name": "Nakamura", "email": "cy.nakamura@example.com"}
REGION_KEY = hashlib.sha1(b"test region").hexdigest()


@dataclass(frozen=True)
class Vendor:
    """How a test adds a custom property to the vendor's enquiry object, which names the
    configuration uses there, and how the vendor's objects are read back."""

    # The custom property as the configuration names it, and the contact property.
    enquiry_property: str
    contact_property: str
    add_property: Callable[[httpx.Client], None]
    owner_id: Callable[[dict[str, Any]], str]
    # (emulator, record ref) -> (enquiry property value, contact property value)
    read_record: Callable[[Any, str], tuple[Any, Any]]
    # (emulator, task ref) -> the task's owner
    read_owner: Callable[[Any, str], str]


def _hubspot_property(control: httpx.Client) -> None:
    # POST /crm/v3/properties/{objectType}, as an admin creates one.
    control.post(
        "/crm/v3/properties/deals",
        json={
            "name": "deal_region",
            "label": "Region",
            "type": "string",
            "fieldType": "text",
            "groupName": "dealinformation",
        },
        headers={"Authorization": f"Bearer {DEFAULT_TOKEN}"},
    ).raise_for_status()


def _hubspot_record(emulator: Any, ref: str) -> tuple[Any, Any]:
    store = emulator.hubspot
    deal = store.read("deals", ref, id_property=None, wanted=None, with_associations=("contacts",))
    contact_id = deal["associations"]["contacts"]["results"][0]["id"]
    contact = store.read(
        "contacts", contact_id, id_property=None, wanted=None, with_associations=()
    )
    return deal["properties"].get("deal_region"), contact["properties"].get("preferred_language")


def _hubspot_owner(emulator: Any, ref: str) -> str:
    task = emulator.hubspot.read("tasks", ref, id_property=None, wanted=None, with_associations=())
    return str(task["properties"].get("hubspot_owner_id"))


def _pipedrive_record(emulator: Any, ref: str) -> tuple[Any, Any]:
    lead = emulator.store.get_lead(ref)
    person = emulator.store.get_person(int(lead["person_id"]))
    return lead.get(REGION_KEY), person["custom_fields"].get(LANGUAGE_FIELD_KEY)


VENDORS: dict[str, Vendor] = {
    "hubspot": Vendor(
        enquiry_property="deal_region",
        contact_property="preferred_language",
        add_property=_hubspot_property,
        owner_id=lambda answer: str(answer["id"]),
        read_record=_hubspot_record,
        read_owner=_hubspot_owner,
    ),
    "salesforce": Vendor(
        enquiry_property="Region__c",
        contact_property="Company",
        add_property=lambda control: control.post(
            "/_sandbox/config",
            json={"custom_fields": {"Lead": ["Budget__c", "Region__c"]}},
        ).raise_for_status(),
        owner_id=lambda answer: str(answer["Id"]),
        read_record=lambda emulator, ref: (
            emulator.store.rows["Lead"][ref].get("Region__c"),
            emulator.store.rows["Lead"][ref].get("Company"),
        ),
        read_owner=lambda emulator, ref: str(emulator.store.rows["Task"][ref]["OwnerId"]),
    ),
    "pipedrive": Vendor(
        # A custom field by its name (mapped to its key by the adapter), the person's
        # by its key.
        enquiry_property="Region",
        contact_property=LANGUAGE_FIELD_KEY,
        add_property=lambda control: control.post(
            "/_sandbox/config",
            json={
                "lead_fields": [
                    *default_lead_fields(),
                    {"key": REGION_KEY, "name": "Region", "field_type": "varchar"},
                ]
            },
        ).raise_for_status(),
        owner_id=lambda answer: str(answer["data"]["id"]),
        read_record=_pipedrive_record,
        read_owner=lambda emulator, ref: str(emulator.store.get_activity(int(ref))["owner_id"]),
    ),
    "dataverse": Vendor(
        enquiry_property="new_region",
        contact_property="companyname",
        add_property=lambda control: control.post(
            "/_sandbox/config", json={"custom_columns": ["new_budget", "new_region"]}
        ).raise_for_status(),
        owner_id=lambda answer: str(answer["systemuserid"]),
        read_record=lambda emulator, ref: (
            emulator.store.lead(ref).get("new_region"),
            emulator.store.lead(ref).get("companyname"),
        ),
        read_owner=lambda emulator, ref: (
            str(emulator.store.task(ref)["ownerid@odata.bind"])
            .removeprefix("/systemusers(")
            .removesuffix(")")
        ),
    ),
}


def test_every_crm_vendor_has_a_case_here() -> None:
    assert sorted(VENDORS) == sorted(CRM_VENDORS)


@pytest.fixture(params=sorted(VENDORS))
def crm(request, settings, monkeypatch) -> Iterator[tuple[str, EmulatorServer, httpx.Client]]:
    """(vendor, its emulator as the default CRM, a client of its controls)."""
    name = request.param
    with (
        emulator_class(name)() as emulator,
        httpx.Client(base_url=emulator.http_url, timeout=10) as control,
    ):
        for variable, value in VENDOR_SETUP[name].env(emulator).items():
            monkeypatch.setenv(variable, value)
        settings.ONEFOLD_CRM = name
        verification_forget()
        yield name, emulator, control
        verification_forget()


def check_destinations() -> tuple[int, dict[str, tuple[str, str]]]:
    """The command's exit status and its lines for "crm": {capability: (verdict, how)}."""
    out = io.StringIO()
    try:
        call_command("check_destinations", "crm", stdout=out, stderr=io.StringIO())
        status = 0
    except CommandError as exc:
        status = exc.returncode
    lines = [line.split("\t") for line in out.getvalue().splitlines()]
    return status, {fields[1]: (fields[2], fields[3]) for fields in lines if fields[0] == "crm"}


def forms(enquiry_property: str, contact_property: str, assignee: Any) -> dict[str, Any]:
    return {
        "*": {
            "enquiry": {"fields": {enquiry_property: "{{ fields.region|upper }}"}},
            "contact": {"fields": {contact_property: "{{ fields.company }}"}},
            "task": {"assignee": assignee},
        }
    }


@pytest.mark.django_db
def test_configured_names_are_checked_and_reach_the_vendor_mapped(crm) -> None:
    name, emulator, control = crm
    vendor = VENDORS[name]
    vendor.add_property(control)
    added = control.post("/_sandbox/owners", json=NEW_OWNER)
    assert added.status_code == 200, added.text
    owner = vendor.owner_id(added.json())
    # The user by email for the north, an owner of the seeded ones by name otherwise.
    assignee = {
        "from_field": "fields.region",
        "map": {"north": NEW_OWNER["email"]},
        "default": "Ana Lima",
    }
    configured(forms(vendor.enquiry_property, vendor.contact_property, assignee))

    status, lines = check_destinations()
    assert status == 0, lines
    for capability in (
        f"enquiry.fields[{vendor.enquiry_property}]",
        f"contact.fields[{vendor.contact_property}]",
        f"task.assignee[{NEW_OWNER['email']}]",
        "task.assignee[Ana Lima]",
    ):
        assert lines[capability][0] == "verified", (capability, lines)
    assert owner in lines[f"task.assignee[{NEW_OWNER['email']}]"][1]

    event = ingest(f"names-{name}", fields={"region": "north", "company": "Acme Ltd"})
    for step in ("create_enquiry", "assign_task"):
        assert operation_execute(operation_id=op(event, step).pk) == "succeeded"
    record, task = (op(event, step).destination_ref for step in ("create_enquiry", "assign_task"))
    assert vendor.read_record(emulator, record) == ("NORTH", "Acme Ltd")
    assert vendor.read_owner(emulator, task).lower() == owner.lower()

    # A property and an owner the CRM does not have: refused, each named.
    configured(forms("no_such_property", vendor.contact_property, "nobody@example.com"))
    status, lines = check_destinations()
    assert status == 1
    assert lines["enquiry.fields[no_such_property]"][0] == "refused"
    assert "no_such_property" in lines["enquiry.fields[no_such_property]"][1]
    assert lines["task.assignee[nobody@example.com]"][0] == "refused"
    assert "nobody@example.com" in lines["task.assignee[nobody@example.com]"][1]
    # The declared capabilities still hold: only the names are refused.
    assert lines["lookup"][0] == "verified"

    adapter = crm_adapter_for(Destination.objects.get(name="crm"))
    with pytest.raises(DestinationError) as unknown:
        adapter.create_task(
            record_id=record,
            external_ref="opk_unknown_owner",
            title="Call",
            assignee="nobody@example.com",
            assignee_is_owner=True,
        )
    assert unknown.value.classification == Classification.PERMANENT
    assert "nobody@example.com" in unknown.value.message
    assert emulator.store.stats()["tasks"] == 1


@pytest.mark.django_db
def test_the_sandbox_takes_any_configured_name(sandbox) -> None:
    configured(forms("anything_at_all", "whatever", {"round_robin": ["ana", "nobody"]}))
    status, lines = check_destinations()
    assert status == 0, lines
    assert {k: v[0] for k, v in lines.items() if "[" in k} == {
        "enquiry.fields[anything_at_all]": "verified",
        "contact.fields[whatever]": "verified",
        "task.assignee[ana]": "verified",
        "task.assignee[nobody]": "verified",
    }


def _pages(
    client: httpx.Client, url: str, next_of: Callable[[dict[str, Any]], str | None], **kwargs: Any
) -> list[dict[str, Any]]:
    """Every page from `url` on, following what `next_of` finds in each."""
    pages: list[dict[str, Any]] = []
    next_url: str | None = url
    while next_url:
        answer = client.get(next_url, **kwargs)
        assert answer.status_code == 200, answer.text
        pages.append(answer.json())
        next_url = next_of(pages[-1])
    return pages


def test_the_schema_and_users_apis_refuse_a_wrong_credential_and_page() -> None:
    """The emulators' new reads are as strict as the rest: a wrong credential is refused
    in the vendor's words; where the vendor pages a list, it is paged."""
    wrong = {"Authorization": "Bearer wrong"}
    with HubSpotEmulator() as hubspot, httpx.Client(base_url=hubspot.http_url) as client:
        assert client.get("/crm/v3/owners", headers=wrong).status_code == 401
        assert client.get("/crm/v3/properties/deals", headers=wrong).status_code == 401
        pages = _pages(
            client,
            "/crm/v3/owners?limit=1",
            lambda body: (body.get("paging") or {}).get("next", {}).get("link"),
            headers={"Authorization": f"Bearer {DEFAULT_TOKEN}"},
        )
        assert [o["email"] for p in pages for o in p["results"]] == [
            "ana.lima@example.com",
            "ben.okafor@example.com",
        ]
    with SalesforceEmulator() as salesforce, httpx.Client(base_url=salesforce.http_url) as client:
        query = {"q": "SELECT Id FROM User WHERE IsActive = true"}
        assert (
            client.get("/services/data/v62.0/query", params=query, headers=wrong).status_code == 401
        )
        assert (
            client.get("/services/data/v62.0/sobjects/Lead/describe", headers=wrong).status_code
            == 401
        )
    with PipedriveEmulator() as pipedrive, httpx.Client(base_url=pipedrive.http_url) as client:
        assert client.get("/v1/users", headers={"x-api-token": "wrong"}).status_code == 401
        assert client.get("/v1/personFields", headers={"x-api-token": "wrong"}).status_code == 401
        token = {"x-api-token": DEFAULT_API_TOKEN}
        starts = iter(range(2, 100, 2))
        pages = _pages(
            client,
            "/v1/personFields?start=0&limit=2",
            lambda body: (
                f"/v1/personFields?start={next(starts)}&limit=2"
                if body["additional_data"]["pagination"]["more_items_in_collection"]
                else None
            ),
            headers=token,
        )
        assert len(pages) == 3
        assert LANGUAGE_FIELD_KEY in {f["key"] for p in pages for f in p["data"]}
    with DataverseEmulator() as dataverse, httpx.Client(base_url=dataverse.http_url) as client:
        assert client.get(f"{API}/systemusers", headers=wrong).status_code == 401
        attributes = f"{API}/EntityDefinitions(LogicalName='lead')/Attributes"
        assert client.get(attributes, headers=wrong).status_code == 401
        form = {
            "grant_type": "client_credentials",
            "client_id": dataverse.adapter_env()["DATAVERSE_CLIENT_ID"],
            "client_secret": dataverse.adapter_env()["DATAVERSE_CLIENT_SECRET"],
            "scope": f"{dataverse.http_url}/.default",
        }
        token = client.post(dataverse.token_url, data=form).json()["access_token"]
        pages = _pages(
            client,
            f"{API}/systemusers?$filter=isdisabled eq false",
            lambda body: body.get("@odata.nextLink"),
            headers={"Authorization": f"Bearer {token}", "Prefer": "odata.maxpagesize=1"},
        )
        assert len(pages) == 3 and all(len(p["value"]) == 1 for p in pages)
