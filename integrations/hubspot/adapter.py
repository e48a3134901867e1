"""HubSpot's CRM as a `CrmAdapter`: contact by email, the enquiry as a deal or ticket.

What HubSpot recognises of a repeated enquiry is a custom property with unique
values (`hasUniqueValue`), created by the account's admin on the enquiry object
(docs/vendor-facts.md). Onefold writes its operation key there; a second create
with the same value is refused naming the property (409, or a 400 that names it
as a duplicate value), and the object is read back by it with `?idProperty=`
(never by search, which lags writes). The contact is HubSpot's own
unique-by-email object: a returning customer's create answers 409 "Contact
already exists. Existing ID: N", and N is adopted.

Tasks cannot have unique values: HubSpot offers them for companies, deals,
tickets, custom objects and contacts only (developer changelog "Unique
Properties support for newly created Contact properties"). A task carries the
reference in a plain property, and a repeated task is found by reading the
enquiry's own associations (`GET /crm/v4/objects/{type}/{id}/associations/tasks`,
a read of the record, not the lagging search index) and then those tasks.

Configuration comes from the environment (see `adapter_from_env`); the token is
sent as `Authorization: Bearer` and never appears in a message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Unpack

import httpx

from integrations.capabilities import Capabilities, CapabilityCheck, ConfiguredCrmNames
from integrations.env import AdapterSettings, SettingError
from integrations.http import (
    RETRY_LATER,
    HttpAdapter,
    header_delay,
    json_object,
    named_effect,
    path_segment,
    status_error,
    timeout_of,
)
from integrations.limits import RateLimit, RequestBudget
from integrations.listing import RecordListing, listing_limit
from integrations.outcomes import Classification, DestinationError, Effect, http_reply
from integrations.owners import Owner, assignee_checks, owner_id_of, task_owner
from integrations.times import seconds_to_midnight, utc_instant
from integrations.writes import NewRecord, NewTask, RecordUpdate, content_of

DEFAULT_BASE_URL = "https://api.hubapi.com"
# Per enquiry object: its title and text properties, default pipeline and stage, and
# the HUBSPOT_DEFINED association type ids to a contact and from a task. Deal→contact 3
# and task→deal 216: docs/vendor-facts.md. Ticket→contact 16: the legacy associations
# overview gives contact→ticket 15 and its reverse 16
# (https://developers.hubspot.com/docs/methods/crm-associations/crm-associations-overview).
# Task→ticket 230: third-party tables only, unverified; HUBSPOT_CONTACT_ASSOCIATION_TYPE
# and HUBSPOT_TASK_ASSOCIATION_TYPE override them (confirm with
# GET /crm/v4/associations/{from}/{to}/labels).
_ENQUIRY_OBJECTS: dict[str, dict[str, Any]] = {
    "deals": {
        "singular": "deal",
        "title": "dealname",
        "text": "description",
        "pipeline": ("pipeline", "default"),
        "stage": ("dealstage", "appointmentscheduled"),
        "to_contact": 3,
        "from_task": 216,
    },
    "tickets": {
        "singular": "ticket",
        "title": "subject",
        "text": "content",
        "pipeline": ("hs_pipeline", "0"),
        "stage": ("hs_pipeline_stage", "1"),
        "to_contact": 16,
        "from_task": 230,
    },
}
# HubSpot's object ids are numbers ("id": "12345678").
_OBJECT_ID = re.compile(r"[1-9][0-9]{0,18}")
# "Contact already exists. Existing ID: 6001" (docs/vendor-facts.md).
_EXISTING_ID = re.compile(r"Existing ID:\s*([0-9]+)")
# The ten-second window, when a 429 names TEN_SECONDLY_ROLLING without Retry-After
# (https://developers.hubspot.com/docs/api/usage-details).
_TEN_SECONDS = 10.0
_PAGE_LIMIT = 100
# GET /crm/v3/owners pages: the spec's default limit is 100 (crmOwners.json, v3).
_OWNERS_PAGE = 100
_OWNERS_PATH = "/crm/v3/owners"
# A v4 association read answers up to 500 a page ("Limit 500 per call", associations v4
# spec); a batch read takes up to 100 inputs.
_ASSOCIATIONS_LIMIT = 500
_BATCH_LIMIT = 100
# Words of a refusal that says a value is already held by another object.
_DUPLICATE_WORDS = re.compile(r"already exists|already has|duplicate|unique", re.IGNORECASE)


@dataclass(frozen=True)
class _PropertyRead:
    """The reference property as HubSpot described it: what was asked, what it said."""

    path: str
    answer: str
    exists: bool = False
    unique: bool = False

    @property
    def how(self) -> str:
        return f"GET {self.path}: {self.answer}"


@dataclass(frozen=True)
class HubSpotConfig:
    base_url: str
    token: str
    enquiry_object: str = "deals"
    reference_property: str = "onefold_ref"
    pipeline: str = ""
    stage: str = ""
    account_timezone: str = "UTC"
    # None: the enquiry object's default (_ENQUIRY_OBJECTS).
    contact_association_type: int | None = None
    task_association_type: int | None = None


def adapter_from_env(*, base_url: str | None, timeout: float, env: Mapping[str, str]) -> HubSpotCrm:
    """The adapter from HUBSPOT_* variables (docs/destinations.md, "HubSpot"); no network call.

    HUBSPOT_TOKEN (a private app's token), HUBSPOT_BASE_URL (default HubSpot's API),
    HUBSPOT_ENQUIRY_OBJECT (`deals` or `tickets`), HUBSPOT_REFERENCE_PROPERTY
    (default `onefold_ref`), HUBSPOT_PIPELINE / HUBSPOT_STAGE (default the object's
    default pipeline and first stage), HUBSPOT_ACCOUNT_TIMEZONE (IANA name, for
    the daily limit's reset at the account's midnight; default UTC),
    HUBSPOT_CONTACT_ASSOCIATION_TYPE / HUBSPOT_TASK_ASSOCIATION_TYPE (association
    type ids, enquiry→contact and task→enquiry; default HubSpot's for the object).
    A missing token is not an error here: every call then refuses, saying so.
    """
    read = AdapterSettings(env, base_url=base_url, url_variable="HUBSPOT_BASE_URL")
    config = HubSpotConfig(
        base_url=read.url("HUBSPOT_BASE_URL", DEFAULT_BASE_URL),
        token=read.get("HUBSPOT_TOKEN"),
        enquiry_object=read.choice("HUBSPOT_ENQUIRY_OBJECT", _ENQUIRY_OBJECTS, "deals"),
        reference_property=read.get("HUBSPOT_REFERENCE_PROPERTY", "onefold_ref"),
        pipeline=read.get("HUBSPOT_PIPELINE"),
        stage=read.get("HUBSPOT_STAGE"),
        account_timezone=read.time_zone("HUBSPOT_ACCOUNT_TIMEZONE"),
        contact_association_type=_type_id(read, "HUBSPOT_CONTACT_ASSOCIATION_TYPE"),
        task_association_type=_type_id(read, "HUBSPOT_TASK_ASSOCIATION_TYPE"),
    )
    return HubSpotCrm(config, timeout=timeout)


def _type_id(read: AdapterSettings, name: str) -> int | None:
    raw = read.get(name)
    if not raw:
        return None
    if not raw.isdigit():
        raise SettingError(f"{name} must be an association type id (a number)")
    return int(raw)


class HubSpotCrm(HttpAdapter):
    """`CrmAdapter` for HubSpot's CRM v3 objects API (emulated in lab/emulators/hubspot.py)."""

    # Free and Starter private apps: 100 requests per 10 seconds and 250,000 a day
    # (https://developers.hubspot.com/apisbytier: "100 requests/10 seconds and 250,000
    # requests/day for Free and Starter accounts"); higher tiers allow more, which the
    # answers' X-HubSpot-RateLimit-* headers teach the engine. The usage guidelines moved
    # from /docs/guides/apps/api-usage/usage-details to the address below. Search has a
    # limit of its own (five a second), never reached: the adapter does not search.
    request_budget: RequestBudget | None = RequestBudget(
        requests=100,
        per_seconds=10,
        daily=250_000,
        source="https://developers.hubspot.com/docs/developer-tooling/platform/usage-guidelines",
    )

    def __init__(self, config: HubSpotConfig, *, timeout: float) -> None:
        self.config = config
        self.base_url = config.base_url
        self.timeout = timeout_of(timeout)
        self.object_type = config.enquiry_object
        shape = _ENQUIRY_OBJECTS[config.enquiry_object]
        self._shape = {
            **shape,
            "to_contact": config.contact_association_type or shape["to_contact"],
            "from_task": config.task_association_type or shape["from_task"],
        }
        # A unique property refuses a second create and can be read by (`idProperty`):
        # the read is no search, so "not found" is an answer. Tasks have no unique
        # property; their lookup reads the enquiry's associations, as consistent.
        self.capabilities = Capabilities(
            unique_external_ref=True,
            lookup=True,
            lookup_proves_absence=True,
            merge=True,
            tasks=Capabilities(lookup=True, lookup_proves_absence=True),
        )
        # Read once per adapter: the schemas by object type, and the account's owners.
        self._schemas: dict[str, dict[str, dict[str, Any]]] = {}
        self._owner_list: list[Owner] | None = None

    # -- verification -------------------------------------------------------------

    def verify(self) -> list[CapabilityCheck]:
        """On the enquiry object the reference property must have unique values: both
        the refusal of a repeat and the idProperty read depend on it. On tasks it need
        only exist (HubSpot offers no unique values there): a repeated task is found
        through the enquiry's associations, the `tasks.lookup` check."""
        enquiry = self._property(self.object_type)
        task = self._property("tasks")
        recovery = (
            f"lookup through the {self._shape['singular']}'s associations "
            f"(GET /crm/v4/objects/{self.object_type}/{{id}}/associations/tasks)"
        )
        return [
            CapabilityCheck("unique_external_ref", enquiry.unique, enquiry.how),
            CapabilityCheck("lookup", enquiry.unique, enquiry.how),
            CapabilityCheck("tasks.lookup", task.exists, f"{task.how}; {recovery}"),
        ]

    def _property(self, object_type: str) -> _PropertyRead:
        """What HubSpot says of the reference property on `object_type`."""
        path = f"/crm/v3/properties/{object_type}/{_segment(self.config.reference_property)}"
        if not self.config.token:
            return _PropertyRead(path, "not asked, HUBSPOT_TOKEN is not set")
        response = self._send("GET", path)
        if response.status_code == 404:
            return _PropertyRead(path, f"404, the property does not exist on {object_type}")
        if response.status_code in RETRY_LATER or response.status_code >= 500:
            # No verdict: a rate limit (waited for) or an outage (asked again).
            self._raise_for_status(response)
        if response.status_code >= 400:
            return _PropertyRead(path, _described(response))
        unique = json_object(response).get("hasUniqueValue") is True
        return _PropertyRead(
            path, f"hasUniqueValue={str(unique).lower()}", exists=True, unique=unique
        )

    # -- the configuration's names (check_destinations) ---------------------------------

    def names_check(self, names: ConfiguredCrmNames) -> list[CapabilityCheck]:
        """Enquiry properties against the enquiry object's schema and contact properties
        against the contacts' (`GET /crm/v3/properties/{objectType}`, every property of
        the type: https://developers.hubspot.com/docs/api/crm/properties); assignees
        against the account's owners (`GET /crm/v3/owners`, every page:
        https://developers.hubspot.com/docs/api/crm/owners), by owner id, email or
        first and last name. A property HubSpot marks read-only is refused too."""
        checks = names.property_checks(
            lambda name: self._property_verdict(self.object_type, name),
            lambda name: self._property_verdict("contacts", name),
        )
        return checks + assignee_checks(names.assignees, self._owners, asked=f"GET {_OWNERS_PATH}")

    def _property_verdict(self, object_type: str, name: str) -> tuple[bool, str]:
        path = f"/crm/v3/properties/{object_type}"
        found = self._schema(object_type).get(name)
        if found is None:
            return False, f"GET {path}: no property {name!r} on {object_type}"
        if (found.get("modificationMetadata") or {}).get("readOnlyValue") is True:
            return False, f"GET {path}: {name!r} is read-only (readOnlyValue)"
        return True, f"GET {path}: {name!r} is a property ({found.get('label') or name})"

    def _schema(self, object_type: str) -> dict[str, dict[str, Any]]:
        """The type's properties by name, read once: the list is not paged
        (CollectionResponsePropertyNoPaging, Properties v3 spec)."""
        if object_type not in self._schemas:
            response = self._send("GET", f"/crm/v3/properties/{object_type}")
            self._raise_for_status(response)
            self._schemas[object_type] = {
                str(p["name"]): p
                for p in json_object(response).get("results") or []
                if isinstance(p, dict) and p.get("name")
            }
        return self._schemas[object_type]

    def _owners(self) -> list[Owner]:
        """The account's active owners, every page (`paging.next.after`), read once."""
        if self._owner_list is None:
            self._owner_list = [
                Owner(
                    id=str(o.get("id")),
                    name=" ".join(filter(None, (o.get("firstName"), o.get("lastName")))),
                    email=str(o.get("email") or ""),
                )
                for results, _ in self._pages(_OWNERS_PATH, {"limit": _OWNERS_PAGE})
                for o in results
                if isinstance(o, dict) and o.get("id")
            ]
        return self._owner_list

    def _owner_id(self, assignee: str) -> str:
        """The owner id a configured assignee names: a number as it is (HubSpot's owner
        ids are numbers), else the owner found by email or name; none: PERMANENT."""
        return owner_id_of(assignee, self._owners, asked=f"GET {_OWNERS_PATH}", is_id=str.isdigit)

    # -- records -------------------------------------------------------------------

    def create_record(self, **record: Unpack[NewRecord]) -> Effect:
        """The contact (found or created by email), then the enquiry associated to it.
        The configured properties go on each (`content`), and its pipeline and stage
        over HUBSPOT_PIPELINE and HUBSPOT_STAGE; the reference property stays ours."""
        # allow_duplicate is ignored: HubSpot has no duplicate rule that refuses a create.
        fields, external_ref = record["fields"], record["external_ref"]
        content = content_of(record)
        contact_id = self._contact_for(fields, content.contact_properties)
        shape = self._shape
        properties = {
            **self._enquiry_properties(fields),
            **content.properties,
            shape["pipeline"][0]: content.pipeline or self.config.pipeline or shape["pipeline"][1],
            shape["stage"][0]: content.stage or self.config.stage or shape["stage"][1],
            self.config.reference_property: external_ref,
        }
        associations = (
            [_association(contact_id, shape["to_contact"])] if contact_id is not None else []
        )
        return self._create(
            self.object_type,
            {"properties": properties, "associations": associations},
            find=lambda: self.find_record(external_ref=external_ref),
        )

    def find_record(self, *, external_ref: str) -> str | None:
        return self._find(self.object_type, external_ref)

    def reference_check(self, record_id: str) -> str | None:
        if _OBJECT_ID.fullmatch(record_id) is None:
            return "HubSpot record ids are numbers, like 12345678"
        return None

    def get_record(self, record_id: str) -> dict[str, Any] | None:
        """The enquiry in the sandbox's record shape, with its contact's name and email.
        A merged-away id reads as the surviving object: `merged_into` names it."""
        params = {"properties": ",".join(self._read_properties()), "associations": "contacts"}
        response = self._send(
            "GET", f"/crm/v3/objects/{self.object_type}/{_segment(record_id)}", params=params
        )
        if response.status_code == 404:
            return None
        self._raise_for_status(response)
        data = json_object(response)
        record = self._record_of(data)
        record["merged_into"] = record["id"] if record["id"] != record_id else None
        contact = self._contact_of(data)
        name = " ".join(filter(None, (contact.get("firstname"), contact.get("lastname"))))
        record.update(name=name, email=contact.get("email") or "")
        return record

    def update_record(self, **update: Unpack[RecordUpdate]) -> Effect:
        """PATCH the enquiry's title, text and configured properties: the same update
        twice leaves it as once."""
        record_id, content = update["record_id"], content_of(update)
        properties = {**self._enquiry_properties(update["fields"]), **content.properties}
        properties.pop(self.config.reference_property, None)
        response = self._send(
            "PATCH",
            f"/crm/v3/objects/{self.object_type}/{_segment(record_id)}",
            json={"properties": properties},
        )
        self._raise_for_status(response)
        return named_effect(response, record_id)

    def iter_records(
        self, **listing: Unpack[RecordListing]
    ) -> Iterator[tuple[list[dict[str, Any]], str | None]]:
        """Pages of enquiries created in [since, until), resumable after each page.

        HubSpot's list (`GET /crm/v3/objects/{type}?limit=&after=`) has no date filter
        and search lags and stops at 10,000 results, so the whole list is read and
        filtered here; the cursor is HubSpot's own `after`.
        """
        until = listing.get("until")
        start, end = utc_instant(listing["since"]), utc_instant(until) if until else None
        params: dict[str, Any] = {
            "limit": min(listing_limit(listing), _PAGE_LIMIT),
            "properties": ",".join(self._read_properties()),
        }
        path = f"/crm/v3/objects/{self.object_type}"
        for results, after in self._pages(path, params, after=listing.get("cursor")):
            page = [self._record_of(item) for item in results]
            kept = [
                r
                for r in page
                if start <= utc_instant(r["created_at"])
                and (end is None or utc_instant(r["created_at"]) < end)
            ]
            yield kept, after

    def _pages(
        self, path: str, params: dict[str, Any], *, after: str | None = None
    ) -> Iterator[tuple[list[Any], str | None]]:
        """A list's pages, from the cursor `after`: each page's results, and the cursor
        that follows it (`paging.next.after`; None after the last page)."""
        while True:
            asked = {**params, "after": after} if after else params
            response = self._send("GET", path, params=asked)
            self._raise_for_status(response)
            data = json_object(response)
            after = ((data.get("paging") or {}).get("next") or {}).get("after")
            yield list(data.get("results") or []), after
            if not after:
                return

    def merge_records(self, *, survivor_id: str, duplicate_id: str, key: str) -> Effect:
        """POST /crm/v3/objects/{type}/merge. A repeat of a merge already made is refused
        by HubSpot; reading the duplicate then shows the survivor, and that is adopted."""
        for value in (survivor_id, duplicate_id):
            problem = self.reference_check(value)
            if problem is not None:
                raise DestinationError(
                    f"{value!r}: {problem}", classification=Classification.PERMANENT
                )
        response = self._send(
            "POST",
            f"/crm/v3/objects/{self.object_type}/merge",
            json={"primaryObjectId": survivor_id, "objectIdToMerge": duplicate_id},
        )
        if response.status_code in (400, 404, 409):
            merged = self.get_record(duplicate_id)
            if merged is not None and merged["merged_into"] == survivor_id:
                return Effect(ref=survivor_id, reply=http_reply(response.status_code), adopted=True)
        self._raise_for_status(response)
        return named_effect(response, survivor_id)

    def erase_person(self, *, record_id: str, task_ids: tuple[str, ...] = ()) -> Effect:
        """The enquiry's contacts permanently deleted by id (POST
        /crm/v3/objects/contacts/gdpr-delete: by email, an address HubSpot does not know
        would be blocklisted, docs/vendor-facts.md), then its tasks and the enquiry archived
        (DELETE /crm/v3/objects/{type}/{id}). The enquiry goes last: until then it names
        its contacts, so a repeat after a lost answer finds what is left; a 404 on any
        part is that part already gone."""
        problem = self.reference_check(record_id)
        if problem is not None:
            raise DestinationError(
                f"{record_id!r}: {problem}", classification=Classification.PERMANENT
            )
        contacts = self._contact_ids_of(record_id)
        if contacts is None:
            return Effect(ref=record_id, reply=http_reply(404), adopted=True)
        for contact_id in contacts:
            self._deleted(
                self._send(
                    "POST", "/crm/v3/objects/contacts/gdpr-delete", json={"objectId": contact_id}
                )
            )
        for task_id in task_ids:
            self._deleted(self._send("DELETE", f"/crm/v3/objects/tasks/{_segment(task_id)}"))
        response = self._send("DELETE", f"/crm/v3/objects/{self.object_type}/{_segment(record_id)}")
        self._deleted(response)
        return Effect(ref=record_id, reply=http_reply(response.status_code))

    def _contact_ids_of(self, record_id: str) -> list[str] | None:
        """The contacts the enquiry is associated with; None when it is gone."""
        response = self._send(
            "GET",
            f"/crm/v3/objects/{self.object_type}/{_segment(record_id)}",
            params={"associations": "contacts"},
        )
        if response.status_code == 404:
            return None
        self._raise_for_status(response)
        links = ((json_object(response).get("associations") or {}).get("contacts") or {}).get(
            "results"
        ) or []
        return list(dict.fromkeys(str(link.get("id")) for link in links if link.get("id")))

    def _deleted(self, response: httpx.Response) -> None:
        if response.status_code != 404:
            self._raise_for_status(response)

    # -- tasks ---------------------------------------------------------------------

    def create_task(self, **task: Unpack[NewTask]) -> Effect:
        """A task with its own reference, associated to the enquiry. HubSpot owners are
        numeric ids (`hubspot_owner_id`): a configured assignee is mapped to its owner
        through the owners API (`_owner_id`); the source's own label becomes the owner
        only when numeric. The assignee is named in the body too. A task's
        `hs_timestamp` is its due date: `due_at`, else now."""
        record_id, external_ref = task["record_id"], task["external_ref"]
        assignee, due_at = task["assignee"], task.get("due_at")
        owner = task_owner(
            task, owner_id=self._owner_id, own_id=lambda label: label if label.isdigit() else None
        )
        due = due_at.astimezone(UTC) if due_at is not None else datetime.now(UTC)
        properties = {
            "hs_timestamp": due.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "hs_task_subject": task["title"],
            "hs_task_status": "NOT_STARTED",
            "hs_task_body": f"Assignee: {assignee}" if assignee else "",
            self.config.reference_property: external_ref,
        }
        if owner is not None:
            properties["hubspot_owner_id"] = owner
        association = _association(_checked_id(record_id), self._shape["from_task"])
        return self._create(
            "tasks",
            {"properties": properties, "associations": [association]},
            find=lambda: self.find_task(record_id=record_id, external_ref=external_ref),
        )

    def find_task(self, *, record_id: str, external_ref: str) -> str | None:
        """The enquiry's task carrying `external_ref`, or None, which proves there is
        none: the enquiry's associations are read from the record itself
        (GET /crm/v4/objects/{type}/{id}/associations/tasks, every page), then those
        tasks' reference property (POST /crm/v3/objects/tasks/batch/read), never
        through search, which lags writes. Several matches (duplicates made before):
        the oldest, the lowest id."""
        prop = self.config.reference_property
        matches = [
            task["id"]
            for ids in _chunks(self._task_ids_of(_checked_id(record_id)), _BATCH_LIMIT)
            for task in self._read_tasks(ids, prop)
            if (task.get("properties") or {}).get(prop) == external_ref
        ]
        return min(matches, key=int) if matches else None

    def _task_ids_of(self, record_id: str) -> list[str]:
        """Every task associated with the enquiry, page by page."""
        path = f"/crm/v4/objects/{self.object_type}/{record_id}/associations/tasks"
        pages = self._pages(path, {"limit": _ASSOCIATIONS_LIMIT})
        return [str(item["toObjectId"]) for results, _ in pages for item in results]

    def _read_tasks(self, ids: list[str], prop: str) -> list[dict[str, Any]]:
        """The tasks' `prop`, in one batch read; a task archived since is left out
        (207, its id among the errors)."""
        response = self._send(
            "POST",
            "/crm/v3/objects/tasks/batch/read",
            json={
                "properties": [prop],
                "propertiesWithHistory": [],
                "inputs": [{"id": i} for i in ids],
            },
        )
        self._raise_for_status(response)
        return list(json_object(response).get("results") or [])

    # -- plumbing ------------------------------------------------------------------

    def _contact_for(
        self, fields: Mapping[str, Any], configured: Mapping[str, str] | None = None
    ) -> str | None:
        """The contact's id by email: created, or on 409 the existing one adopted (its
        id is only in the message text: docs/vendor-facts.md). None without an email.
        `configured` properties go on a contact created here; an existing contact is
        adopted as it is (its properties are its owner's, not overwritten)."""
        email = str(fields.get("email") or "").strip()
        if not email:
            return None
        first, _, last = str(fields.get("name") or "").strip().partition(" ")
        properties = {**(configured or {}), "email": email, "firstname": first, "lastname": last}
        if fields.get("phone"):
            properties["phone"] = str(fields["phone"])
        # `associations` is required by the Contacts v3 spec (SimplePublicObjectInputForCreate),
        # though HubSpot takes a create without it.
        response = self._send(
            "POST", "/crm/v3/objects/contacts", json={"properties": properties, "associations": []}
        )
        if response.status_code == 409:
            found = _EXISTING_ID.search(str(json_object(response).get("message", "")))
            if found:
                return found.group(1)
            # Another conflict wording: read the contact by its unique email instead.
            return self._find("contacts", email, id_property="email") or self._refuse(response)
        self._raise_for_status(response)
        return str(json_object(response)["id"])

    def _enquiry_properties(self, fields: Mapping[str, Any]) -> dict[str, str]:
        name = str(fields.get("name") or "").strip() or str(fields.get("email") or "")
        form = str(fields.get("form") or "website")
        lines = [str(fields.get("message") or "")]
        lines += [f"{k}: {v}" for k, v in sorted((fields.get("fields") or {}).items())]
        if fields.get("phone"):
            lines.append(f"phone: {fields['phone']}")
        return {
            self._shape["title"]: f"{form.capitalize()} enquiry from {name or 'a visitor'}",
            self._shape["text"]: "\n".join(line for line in lines if line),
        }

    def _read_properties(self) -> list[str]:
        shape = self._shape
        return [
            self.config.reference_property,
            shape["title"],
            shape["text"],
            shape["pipeline"][0],
            shape["stage"][0],
        ]

    def _record_of(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """A HubSpot object in the record shape reconciliation and the console read."""
        props = data.get("properties") or {}
        shape = self._shape
        return {
            "id": str(data.get("id")),
            "external_ref": props.get(self.config.reference_property) or None,
            "name": "",
            "email": "",
            "message": props.get(shape["text"]) or "",
            "extra": {
                k: props.get(k) for k in (shape["title"], shape["pipeline"][0], shape["stage"][0])
            },
            "created_at": data.get("createdAt") or props.get("createdate"),
            "updated_at": data.get("updatedAt") or props.get("hs_lastmodifieddate"),
            "merged_into": None,
        }

    def _contact_of(self, data: Mapping[str, Any]) -> dict[str, Any]:
        links = ((data.get("associations") or {}).get("contacts") or {}).get("results") or []
        if not links:
            return {}
        response = self._send(
            "GET",
            f"/crm/v3/objects/contacts/{_segment(str(links[0].get('id')))}",
            params={"properties": "email,firstname,lastname"},
        )
        if response.status_code == 404:
            return {}
        self._raise_for_status(response)
        return dict(json_object(response).get("properties") or {})

    def _create(
        self, object_type: str, body: dict[str, Any], *, find: Callable[[], str | None]
    ) -> Effect:
        """POSTs the object. A refusal saying our reference is already held (409, or a
        400 naming it as a duplicate value) is settled by `find`, the read by reference."""
        response = self._send("POST", f"/crm/v3/objects/{object_type}", json=body)
        if response.status_code == 409 or (
            response.status_code == 400 and self._clash_on_reference(json_object(response))
        ):
            return self._adopt(object_type, response, find)
        self._raise_for_status(response)
        return Effect(ref=str(json_object(response)["id"]), reply=http_reply(response.status_code))

    def _adopt(
        self, object_type: str, response: httpx.Response, find: Callable[[], str | None]
    ) -> Effect:
        """A refusal is adopted only when it is on our reference property, and only as
        the object that reading by that property returns (it carries our value)."""
        status = response.status_code
        prop = self.config.reference_property
        if not self._names_reference(json_object(response)):
            raise DestinationError(
                f"{object_type}: {_described(response)} (a conflict not on {prop}: not adopted)",
                classification=Classification.PERMANENT,
                reply=http_reply(status),
            )
        existing = find()
        if existing is not None:
            return Effect(ref=existing, reply=http_reply(status), adopted=True)
        if status == 409:
            # The holder vanished between the 409 and the read (archived): try again.
            raise DestinationError(
                f"{object_type}: 409 on {prop}, but reading by it found nothing",
                classification=Classification.RETRYABLE,
                reply=http_reply(409),
            )
        # A 400 whose clash the read does not confirm is the refusal it says it is.
        raise status_error(response, _described(response))

    def _names_reference(self, data: Mapping[str, Any]) -> bool:
        """Whether HubSpot's error names our reference property: in `errors[].in`, as its
        409 bodies do, or in the message (a 400 lists the property by name there)."""
        prop = self.config.reference_property
        errors = [e for e in data.get("errors") or [] if isinstance(e, dict)]
        return any(e.get("in") == prop for e in errors) or bool(
            re.search(rf"(?<![\w]){re.escape(prop)}(?![\w])", str(data.get("message", "")))
        )

    def _clash_on_reference(self, data: Mapping[str, Any]) -> bool:
        """A 400 that names our reference property as a value another object holds: a
        variant of HubSpot's 409 its docs do not rule out, treated like the 409."""
        texts = [str(data.get("message", ""))] + [
            str(e.get("message", "")) for e in data.get("errors") or [] if isinstance(e, dict)
        ]
        return self._names_reference(data) and any(_DUPLICATE_WORDS.search(t) for t in texts)

    def _find(self, object_type: str, value: str, *, id_property: str | None = None) -> str | None:
        """GET /crm/v3/objects/{type}/{value}?idProperty= (HubSpot/hubspot-api-python,
        crm/objects basic_api get_by_id): a read, not a search, so a write shows at once."""
        response = self._send(
            "GET",
            f"/crm/v3/objects/{object_type}/{_segment(value)}",
            params={"idProperty": id_property or self.config.reference_property},
        )
        if response.status_code == 404:
            return None
        self._raise_for_status(response)
        return str(json_object(response)["id"])

    def _auth(self) -> dict[str, str]:
        if not self.config.token:
            raise DestinationError(
                "HUBSPOT_TOKEN is not set", classification=Classification.PERMANENT
            )
        return {"Authorization": f"Bearer {self.config.token}"}

    def _refuse(self, response: httpx.Response) -> str:
        self._raise_for_status(response)
        raise DestinationError(
            _described(response), classification=Classification.PERMANENT, reply=http_reply(409)
        )

    def _raise_for_status(self, response: httpx.Response) -> None:
        if response.is_success:
            return
        error = status_error(
            response, _described(response), retry_after=self._rate_limit_delay(response)
        )
        if response.status_code == 429 and json_object(response).get("policyName") == "DAILY":
            # The day's allowance is spent: the destination's work waits for the reset,
            # status_error's WINDOW would ask again every ten seconds.
            error.rate_limit = RateLimit.DAILY
        raise error

    def _rate_limit_delay(self, response: httpx.Response) -> float | None:
        """A 429's delay; None for any other answer (its Retry-After is read as usual).
        DAILY: until the account's next midnight (https://developers.hubspot.com/
        apisbytier: "The daily limits reset at midnight based on the time zone setting");
        TEN_SECONDLY_ROLLING or unnamed: Retry-After if given, else the ten-second window."""
        if response.status_code != 429:
            return None
        header = header_delay(response)
        if json_object(response).get("policyName") == "DAILY":
            return max(header or 0.0, seconds_to_midnight(self.config.account_timezone))
        if header is not None:
            return header
        interval = response.headers.get("X-HubSpot-RateLimit-Interval-Milliseconds", "")
        return int(interval) / 1000 if interval.isdigit() else _TEN_SECONDS


def _described(response: httpx.Response) -> str:
    """HubSpot's error in one line: status, category or policy, message."""
    data = json_object(response)
    kind = data.get("category") or data.get("errorType") or response.reason_phrase
    if data.get("policyName"):
        kind = f"{kind} ({data['policyName']})"
    return f"HTTP {response.status_code} {kind}: {data.get('message') or 'no message'}"


def _association(to_id: str, type_id: int) -> dict[str, Any]:
    return {
        "to": {"id": to_id},
        "types": [{"associationCategory": "HUBSPOT_DEFINED", "associationTypeId": type_id}],
    }


def _checked_id(value: str) -> str:
    if _OBJECT_ID.fullmatch(value) is None:
        raise DestinationError(
            f"{value!r} is not a HubSpot object id", classification=Classification.PERMANENT
        )
    return value


def _segment(value: str) -> str:
    return path_segment(value, "cannot name a HubSpot object")


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
