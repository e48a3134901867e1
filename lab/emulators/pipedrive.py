"""Pipedrive's API on loopback: persons, leads, activities, lead fields, and a lagging search.

Built from the emulator kit (lab/emulators/kit.py): the sandbox's fault
queue, chaos, call counts and /_sandbox/ controls come with it. What the
emulator answers, and the source of each behaviour, is below;
the comments in the code name the source again
where the behaviour is made.

The emulated API
================

Pipedrive: the adapter (adapter.py) and a local emulator of its API (emulator.py).

Pipedrive recognises no repeat: no idempotency key, no unique field, no upsert,
and the only way to find a lead by Onefold's reference is its search, whose
freshness is undocumented (CRM-FACTS.md, "Pipedrive"). So the adapter claims
`lookup` with `lookup_proves_absence=False` and a settling delay, and an unclear
create is looked up after that delay: found, adopted; not found, a case. Never a
blind second create.

Running the emulator
====================

In process (tests)::

    from lab.emulators.pipedrive import PipedriveEmulator, DEFAULT_API_TOKEN

    with PipedriveEmulator() as pipedrive:        # port 0: a free port
        httpx.get(f"{pipedrive.http_url}/v1/leadFields",
                  headers={"x-api-token": DEFAULT_API_TOKEN})

State is in memory; ``/_sandbox/reset`` empties it and restores the defaults.

Conventions
===========

JSON in and out. Every Pipedrive path needs the API token, in the ``x-api-token``
header or the ``api_token`` query parameter
(pipedrive.readme.io/docs/core-api-concepts-authentication); the emulator's is
``DEFAULT_API_TOKEN`` unless ``/_sandbox/config`` changes it. Without it: 401
``{"success": false, "error": "unauthorized access", "errorCode": 401, ...}``.
Successes are ``{"success": true, "data": ..., "additional_data"?: ...}``;
refusals ``{"success": false, "error", "error_info", "data": null,
"additional_data": null}`` (client-nodejs v1 models/lead-not-found-response.ts).
Timestamps are ISO 8601 UTC with a ``Z``.

Vendor API
==========

``POST /api/v2/persons`` ``{"name", "emails": [{"value", "primary", "label"}], "phones"?}``
    200 with the person (``id`` an integer). No uniqueness: the same email twice
    is two persons, as in Pipedrive (CRM-FACTS.md: concurrent webhooks made 2-3
    copies of a contact).

``GET /api/v2/persons/search?term=&fields=email&exact_match=true``
    ``{"data": {"items": [{"result_score", "item": {"id", "type": "person",
    "name", "emails": [...]}}]}, "additional_data": {"next_cursor": null}}``.
    Lags writes by ``search_lag_seconds``.

``GET /api/v2/persons/<id>``
    200 person, 404.

``POST /v1/leads`` ``{"title", "person_id" | "organization_id", <custom key>: value, ...}``
    201 with the lead (``id`` a UUID, ``source_name`` ``API``). 400 without a
    title, without a person or organization, or naming a person that does not
    exist. Custom field values sit at the top level under their 40-hex keys;
    a key that names no lead field is dropped without a word (an assumption:
    Pipedrive documents nothing either way), and an unset field is absent from
    the lead. Faultable as ``create_record``.

``GET /v1/leads?start=&limit=&sort=add_time ASC``
    A page of leads (archived ones excluded), ``additional_data: {"start",
    "limit", "more_items_in_collection"}``; limit 100 by default, 500 at most.

``GET|PATCH|DELETE /v1/leads/<id>``
    200 lead / updated lead (``null`` unsets a property) / ``{"id"}``; 404
    ``"Lead not found"``.

``GET /api/v2/leads/search?term=&fields=custom_fields&exact_match=true``
    Leads whose searchable custom field (types address, varchar, text,
    varchar_auto, double, monetary, phone) matches ``term``, not case
    sensitive, as the index saw them ``search_lag_seconds`` ago: a lead
    created (or its field changed) within the lag is not found (or found by
    its old value). Items as for persons, ``item.custom_fields`` the values.

``GET /v1/leadFields``
    The lead's own fields and the configured custom ones: ``key``, ``name``,
    ``field_type``, ``active_flag``, ``searchable_flag`` (client-nodejs v1
    models/field.ts).

``POST /api/v2/activities`` ``{"subject", "type", "lead_id", "note", "owner_id"?, ...}``
    200 with the activity (``id`` an integer); 404 when ``lead_id`` names no
    lead. Faultable as ``create_task``.

``GET /api/v2/activities?lead_id=&limit=&cursor=``
    The lead's activities by id, ``additional_data.next_cursor``. A filtered
    list, read from the store: no lag.

``GET /api/v2/activities/<id>``
    200 activity, 404.

Quirks and fault modes
======================

Fault modes are the sandbox's (lab/sandbox/__init__.py), on
``create_record`` (POST /v1/leads) and ``create_task`` (POST /api/v2/activities),
answered in Pipedrive's words: ``http_429`` is 429 ``"Request over limit"`` with
``x-ratelimit-limit``, ``x-ratelimit-remaining: 0`` and ``x-ratelimit-reset:
<seconds>`` and no Retry-After (pipedrive.readme.io/docs/core-api-concepts-rate-limiting);
``http_503`` a 503 with Retry-After; ``fail_before_commit`` and
``http_500_after_commit`` a 500; ``drop_response_after_commit`` closes the
connection after storing. Person creation takes no faults.

Controls
========

The sandbox's ``/_sandbox/reset``, ``/_sandbox/faults``, ``/_sandbox/chaos`` and
``/_sandbox/stats`` (records: live leads; tasks: activities of live leads;
``records_by_external_ref`` by the value of the reference field,
``tasks_by_external_ref`` by the "Onefold reference: KEY" line of the
activity's note; messages always 0; ``calls`` adds ``create_person`` and
``lookup_person``), and:

``GET|POST /_sandbox/config``
    ``{"search_lag_seconds": 1.0, "api_token": "...", "lead_fields": [{"key",
    "name", "field_type"}], "reference_field": "<key stats count by>"}``.
    POST changes any of them (400 for unknown keys or bad values);
    ``lead_fields`` replaces the custom lead fields, by default the reference
    field (``REFERENCE_FIELD_KEY``, varchar) and a message field
    (``MESSAGE_FIELD_KEY``, text); ``[]``: both are gone; ``field_type:
    "enum"``: the field exists but search cannot find it.
    ``PipedriveEmulator.adapter_env()`` gives the PIPEDRIVE_* variables that
    point the adapter at a fresh emulator.
    A lag applies to writes made after it is set.
"""

from __future__ import annotations

import hashlib
import html
import math
import re
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from lab.emulators.kit import EmulatorServer
from lab.sandbox.http import CONTROL_ROUTES, Reply, Route, SandboxRequestHandler
from lab.sandbox.store import Fault, InvalidInput, NotFound, SandboxStore

DEFAULT_API_TOKEN = "pipedrive-emulator-token"
# Custom field keys are 40 hex characters, generated by Pipedrive when the field is
# created (client-nodejs v1 models/field.ts: "For custom fields this is generated upon
# creation"). The emulator's reference field has a fixed one so that tests can name it.
REFERENCE_FIELD_KEY = hashlib.sha1(b"onefold reference").hexdigest()
REFERENCE_FIELD_NAME = "Onefold reference"
MESSAGE_FIELD_KEY = hashlib.sha1(b"onefold message").hexdigest()
# Search freshness is undocumented (CRM-FACTS.md, Pipedrive: "treat as lagging").
DEFAULT_SEARCH_LAG_SECONDS = 1.0
# "Only the following custom field types are searchable: address, varchar, text,
# varchar_auto, double, monetary and phone" (client-nodejs v2 persons-api.ts, searchPersons;
# the same list in v1 ItemSearchApi.md).
SEARCHABLE_TYPES = frozenset(
    {"address", "varchar", "text", "varchar_auto", "double", "monetary", "phone"}
)
FIELD_TYPES = SEARCHABLE_TYPES | {"date", "enum", "set", "int", "user", "org", "people", "time"}
CUSTOM_KEY = re.compile(r"[0-9a-f]{40}")
# The reference line the adapter writes into an activity's note; stats count tasks by it.
ACTIVITY_REFERENCE = re.compile(r"Onefold reference: ([^\s<]+)")
# Writable lead properties (client-nodejs v1 models/add-lead-request.ts, update-lead-request.ts).
_LEAD_PROPERTIES = (
    "title",
    "owner_id",
    "label_ids",
    "person_id",
    "organization_id",
    "value",
    "expected_close_date",
    "visible_to",
    "was_seen",
    "origin_id",
    "channel",
    "channel_id",
    "is_archived",
)
_ACTIVITY_PROPERTIES = (
    "subject",
    "type",
    "owner_id",
    "deal_id",
    "lead_id",
    "person_id",
    "org_id",
    "due_date",
    "due_time",
    "duration",
    "busy",
    "done",
    "public_description",
    "priority",
    "note",
)
_ERROR_INFO = "Please check developers.pipedrive.com for more information about Pipedrive API."


def _now() -> str:
    # "In ISO 8601 format: YYYY-MM-DDTHH:MM:SSZ" (client-nodejs v1 models/lead.ts, add_time).
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_lead_fields() -> list[dict[str, Any]]:
    """The custom lead fields a fresh emulator has: the reference field (searchable) and
    a long-text field for the enquiry's message."""
    return [
        {"key": REFERENCE_FIELD_KEY, "name": REFERENCE_FIELD_NAME, "field_type": "varchar"},
        {"key": MESSAGE_FIELD_KEY, "name": "Onefold message", "field_type": "text"},
    ]


class PipedriveError(InvalidInput):
    """A refusal in Pipedrive's words: {"success": false, "error": ..., "error_info": ...}."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status = status

    def reply(self) -> Reply:
        return _failure(self.status, self.detail)


def _failure(status: int, error: str, headers: dict[str, str] | None = None) -> Reply:
    # Error bodies: client-nodejs v1 models/lead-not-found-response.ts
    # (success, error, error_info, data, additional_data).
    body = {
        "success": False,
        "error": error,
        "error_info": _ERROR_INFO,
        "data": None,
        "additional_data": None,
    }
    return Reply(status, body, headers or {})


class PipedriveStore(SandboxStore):
    """The sandbox store (faults, chaos, calls) plus Pipedrive's objects, kept in memory."""

    def __init__(self, db_path: str | None = None) -> None:
        super().__init__(db_path)
        self._clear_objects()

    def reset(self) -> None:
        super().reset()
        self._clear_objects()

    def _clear_objects(self) -> None:
        with self._lock:
            self.config: dict[str, Any] = {
                "search_lag_seconds": DEFAULT_SEARCH_LAG_SECONDS,
                "api_token": DEFAULT_API_TOKEN,
                "lead_fields": default_lead_fields(),
                "reference_field": REFERENCE_FIELD_KEY,
            }
            self._persons: dict[int, dict[str, Any]] = {}
            self._leads: dict[str, dict[str, Any]] = {}
            self._activities: dict[int, dict[str, Any]] = {}
            # (kind, id) -> [(visible_at, searchable snapshot)], oldest first.
            self._index: dict[tuple[str, Any], list[tuple[float, dict[str, list[str]]]]] = {}

    # -- configuration -------------------------------------------------------

    def set_config(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(changes) - set(self.config)
        if unknown:
            raise InvalidInput(f"unknown config keys: {', '.join(sorted(unknown))}")
        cleaned = dict(changes)
        if "search_lag_seconds" in cleaned:
            lag = cleaned["search_lag_seconds"]
            if isinstance(lag, bool) or not isinstance(lag, int | float) or lag < 0:
                raise InvalidInput("search_lag_seconds must be a number >= 0")
            cleaned["search_lag_seconds"] = float(lag)
        if "lead_fields" in cleaned:
            cleaned["lead_fields"] = _clean_fields(cleaned["lead_fields"])
        for name in ("api_token", "reference_field"):
            if name in cleaned and not isinstance(cleaned[name], str):
                raise InvalidInput(f"{name} must be a string")
        with self._lock:
            self.config.update(cleaned)
            return dict(self.config)

    def custom_lead_fields(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {field["key"]: field for field in self.config["lead_fields"]}

    # -- persons -------------------------------------------------------------

    def create_person(self, body: Mapping[str, Any]) -> dict[str, Any]:
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            raise PipedriveError(400, "Name must be given.")
        emails = _contact_list(body.get("emails"), "emails")
        phones = _contact_list(body.get("phones"), "phones")
        with self._lock:
            person_id = len(self._persons) + 1
            now = _now()
            person = {
                "id": person_id,
                "name": name,
                "emails": emails,
                "phones": phones,
                "add_time": now,
                "update_time": now,
            }
            self._persons[person_id] = person
            self._to_index("person", person_id, {"email": [e["value"] for e in emails]})
            return dict(person)

    def get_person(self, person_id: int) -> dict[str, Any]:
        with self._lock:
            person = self._persons.get(person_id)
            if person is None:
                raise PipedriveError(404, "Person not found")
            return dict(person)

    def search_persons(self, term: str, *, exact: bool) -> list[dict[str, Any]]:
        found = self._search("person", "email", term, exact=exact)
        with self._lock:
            persons = [self._persons[pid] for pid in found if pid in self._persons]
        return [
            {
                "result_score": 1.0,
                "item": {
                    "id": person["id"],
                    "type": "person",
                    "name": person["name"],
                    "emails": [e["value"] for e in person["emails"]],
                    "phones": [p["value"] for p in person["phones"]],
                },
            }
            for person in persons
        ]

    # -- leads ---------------------------------------------------------------

    def check_lead(self, body: Mapping[str, Any]) -> None:
        """Refuses a lead body Pipedrive would refuse, storing nothing."""
        title = body.get("title")
        if not isinstance(title, str) or not title.strip():
            raise PipedriveError(400, "Validation failed: title: Required")
        # "A lead always has to be linked to a person or an organization or both"
        # (client-nodejs v1 leads-api.ts, addLead).
        if body.get("person_id") is None and body.get("organization_id") is None:
            raise PipedriveError(400, "A lead must be linked to a person or an organization.")
        with self._lock:
            self._require_person(body.get("person_id"))

    def create_lead(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.check_lead(body)
        with self._lock:
            now = _now()
            lead: dict[str, Any] = {
                "id": str(uuid.uuid4()),
                "owner_id": 1,
                "creator_id": 1,
                "label_ids": [],
                "person_id": None,
                "organization_id": None,
                # "Will be `API` if the lead was created through the Public API" (models/lead.ts).
                "source_name": "API",
                "origin": "API",
                "is_archived": False,
                "was_seen": False,
                "value": None,
                "expected_close_date": None,
                "next_activity_id": None,
                "add_time": now,
                "update_time": now,
            }
            self._apply_lead(lead, body)
            self._leads[lead["id"]] = lead
            self._index_lead(lead)
            return self._lead_view(lead)

    def get_lead(self, lead_id: str) -> dict[str, Any]:
        with self._lock:
            return self._lead_view(self._live_lead(lead_id))

    def update_lead(self, lead_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            lead = self._live_lead(lead_id)
            if "person_id" in body:
                self._require_person(body["person_id"])
            self._apply_lead(lead, body)
            lead["update_time"] = _now()
            self._index_lead(lead)
            return self._lead_view(lead)

    def delete_lead(self, lead_id: str) -> None:
        with self._lock:
            self._live_lead(lead_id)
            del self._leads[lead_id]
            self._index.pop(("lead", lead_id), None)

    def list_leads(self, *, start: int, limit: int, sort: str) -> tuple[list[dict[str, Any]], bool]:
        field, _, direction = sort.partition(" ")
        if field not in ("add_time", "update_time", "id", "title"):
            raise PipedriveError(400, f"Invalid sort field: {field}")
        with self._lock:
            leads = [lead for lead in self._leads.values() if not lead["is_archived"]]
            leads.sort(key=lambda lead: (lead[field], lead["id"]), reverse=direction == "DESC")
            page = [self._lead_view(lead) for lead in leads[start : start + limit]]
            return page, start + limit < len(leads)

    def search_leads(self, term: str, *, exact: bool) -> list[dict[str, Any]]:
        found = self._search("lead", "custom_fields", term, exact=exact)
        with self._lock:
            leads = [self._leads[lead_id] for lead_id in found if lead_id in self._leads]
            return [
                {
                    "result_score": 1.0,
                    "item": {
                        "id": lead["id"],
                        "type": "lead",
                        "title": lead["title"],
                        "person": {"id": lead["person_id"]} if lead["person_id"] else None,
                        "custom_fields": self._searchable_values(lead),
                        "is_archived": lead["is_archived"],
                    },
                }
                for lead in leads
            ]

    # -- activities ----------------------------------------------------------

    def create_activity(self, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            lead_id = body.get("lead_id")
            if lead_id is not None:
                self._live_lead(str(lead_id))
            activity_id = len(self._activities) + 1
            now = _now()
            activity: dict[str, Any] = {
                "id": activity_id,
                "subject": "Call",
                "type": "call",
                "owner_id": 1,
                "is_deleted": False,
                "done": False,
                "add_time": now,
                "update_time": now,
            }
            # "When value for subject is not set, it will be given a default value `Call`"
            # (client-nodejs docs/ActivityPostObject.md).
            activity.update({k: body[k] for k in _ACTIVITY_PROPERTIES if k in body})
            self._activities[activity_id] = activity
            return dict(activity)

    def get_activity(self, activity_id: int) -> dict[str, Any]:
        with self._lock:
            activity = self._activities.get(activity_id)
            if activity is None:
                raise PipedriveError(404, "Activity not found")
            return dict(activity)

    def list_activities(
        self, *, lead_id: str | None, after: int, limit: int
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Activities with id > `after`, by id; the filtered list reads the database,
        not the search index (GET /api/v2/activities, client-nodejs v2 activities-api.ts)."""
        with self._lock:
            matching = [
                dict(a)
                for a_id, a in sorted(self._activities.items())
                if a_id > after and (lead_id is None or a.get("lead_id") == lead_id)
            ]
        page = matching[:limit]
        return page, (page[-1]["id"] if len(matching) > limit else None)

    # -- inspection ----------------------------------------------------------

    def stats(self, *, detail: bool = True) -> dict[str, Any]:
        """The sandbox's keys: records are live leads, tasks their activities,
        counted by the reference field and the activity's reference line."""
        base = super().stats(detail=False)
        with self._lock:
            reference_field = self.config["reference_field"]
            leads = list(self._leads.values())
            tasks = [a for a in self._activities.values() if a.get("lead_id") in self._leads]
        result: dict[str, Any] = {"records": len(leads), "tasks": len(tasks), "messages": 0}
        if detail:
            result["records_by_external_ref"] = _count(lead.get(reference_field) for lead in leads)
            result["tasks_by_external_ref"] = _count(_activity_reference(a) for a in tasks)
            result["messages_by_recipient"] = {}
            result["messages_by_message_id"] = {}
        result["calls"] = {**dict.fromkeys(("create_person", "lookup_person"), 0), **base["calls"]}
        return result

    # -- plumbing ------------------------------------------------------------

    def _require_person(self, person_id: Any) -> None:
        if person_id is not None and person_id not in self._persons:
            raise PipedriveError(400, f"Person with id {person_id} does not exist.")

    def _live_lead(self, lead_id: str) -> dict[str, Any]:
        lead = self._leads.get(lead_id)
        if lead is None:
            # 404 LeadNotFoundResponse (client-nodejs v1 leads-api.ts, getLead).
            raise PipedriveError(404, "Lead not found")
        return lead

    def _apply_lead(self, lead: dict[str, Any], body: Mapping[str, Any]) -> None:
        custom = self.custom_lead_fields()
        for key, value in body.items():
            if key in _LEAD_PROPERTIES:
                lead[key] = value
            elif key in custom:
                # "Send null to unset a property" (v1 Leads#updateLead).
                if value is None:
                    lead.pop(key, None)
                else:
                    lead[key] = value
            # Assumed, not documented: a key naming no field is dropped without a word.
            # This is why the adapter's verify() checks the field exists.

    def _lead_view(self, lead: Mapping[str, Any]) -> dict[str, Any]:
        # "If a custom field's value hasn't been set for the lead, it won't appear in
        # the response" (client-nodejs v1 leads-api.ts, getLead): unset keys are absent.
        return dict(lead)

    def _searchable_values(self, lead: Mapping[str, Any]) -> list[str]:
        fields = self.custom_lead_fields()
        return [
            str(lead[key])
            for key, field in fields.items()
            if key in lead and field["field_type"] in SEARCHABLE_TYPES
        ]

    def _index_lead(self, lead: Mapping[str, Any]) -> None:
        self._to_index("lead", lead["id"], {"custom_fields": self._searchable_values(lead)})

    def _to_index(self, kind: str, item_id: Any, snapshot: dict[str, list[str]]) -> None:
        """The search index takes a write only after the configured lag (CRM-FACTS.md,
        Pipedrive: search freshness undocumented, treat as lagging)."""
        visible_at = time.monotonic() + self.config["search_lag_seconds"]
        self._index.setdefault((kind, item_id), []).append((visible_at, snapshot))

    def _search(self, kind: str, field: str, term: str, *, exact: bool) -> list[Any]:
        """Ids whose indexed `field` matches `term`: "exact_match ... It is not case
        sensitive" (client-nodejs v2 leads-api.ts, searchLeads); else a substring."""
        needle = term.casefold()
        now = time.monotonic()
        found = []
        with self._lock:
            for (item_kind, item_id), versions in self._index.items():
                if item_kind != kind:
                    continue
                visible = [snapshot for at, snapshot in versions if at <= now]
                if not visible:
                    continue
                values = [value.casefold() for value in visible[-1].get(field, [])]
                if any((value == needle) if exact else (needle in value) for value in values):
                    found.append(item_id)
        return found


def _clean_fields(fields: Any) -> list[dict[str, Any]]:
    if not isinstance(fields, list):
        raise InvalidInput("lead_fields must be a list of {key, name, field_type}")
    cleaned = []
    for field in fields:
        if not isinstance(field, dict) or set(field) - {"key", "name", "field_type"}:
            raise InvalidInput("each lead field is {key, name, field_type}")
        key, field_type = field.get("key"), field.get("field_type", "varchar")
        if not isinstance(key, str) or CUSTOM_KEY.fullmatch(key) is None:
            raise InvalidInput("a custom field key is 40 hex characters")
        if field_type not in FIELD_TYPES:
            raise InvalidInput(f"field_type must be one of {', '.join(sorted(FIELD_TYPES))}")
        cleaned.append({"key": key, "name": str(field.get("name", key)), "field_type": field_type})
    return cleaned


def _contact_list(value: Any, name: str) -> list[dict[str, Any]]:
    """[{value, primary, label}] (client-nodejs v2 models/add-person-request.ts)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(item, dict) and isinstance(item.get("value"), str) for item in value
    ):
        raise PipedriveError(400, f"{name} must be a list of {{value, primary, label}}")
    return [
        {
            "value": item["value"],
            "primary": bool(item.get("primary", False)),
            "label": item.get("label", "work"),
        }
        for item in value
    ]


def _activity_reference(activity: Mapping[str, Any]) -> str | None:
    match = ACTIVITY_REFERENCE.search(str(activity.get("note") or ""))
    return html.unescape(match.group(1)) if match else None


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        if value is not None:
            counts[str(value)] = counts.get(str(value), 0) + 1
    return dict(sorted(counts.items()))


_ROUTES: list[Route] = [
    (re.compile(r"/api/v2/persons"), {"POST": "persons_post"}),
    (re.compile(r"/api/v2/persons/search"), {"GET": "persons_search"}),
    (re.compile(r"/api/v2/persons/(?P<person_id>\d+)"), {"GET": "person_get"}),
    (re.compile(r"/v1/leads"), {"GET": "leads_get", "POST": "leads_post"}),
    (re.compile(r"/api/v2/leads/search"), {"GET": "leads_search"}),
    (
        re.compile(r"/v1/leads/(?P<lead_id>[^/]+)"),
        {"GET": "lead_get", "PATCH": "lead_patch", "DELETE": "lead_delete"},
    ),
    (re.compile(r"/v1/leadFields"), {"GET": "lead_fields_get"}),
    (re.compile(r"/api/v2/activities"), {"GET": "activities_get", "POST": "activities_post"}),
    (re.compile(r"/api/v2/activities/(?P<activity_id>\d+)"), {"GET": "activity_get"}),
    (re.compile(r"/_sandbox/config"), {"GET": "config_get", "POST": "config_post"}),
]


class PipedriveHandler(SandboxRequestHandler):
    """Pipedrive's paths (v1 for leads and lead fields, v2 for persons, activities and
    search) plus the sandbox's controls and `/_sandbox/config`."""

    routes = _ROUTES + CONTROL_ROUTES
    server_version = "PipedriveEmulator/1"

    @property
    def pipedrive(self) -> PipedriveStore:
        store = self.server.store
        assert isinstance(store, PipedriveStore)
        return store

    def _vendor(self, work: Callable[[], Reply]) -> Reply:
        """Authenticates, then runs `work`, answering refusals in Pipedrive's words."""
        # "The API token must be provided in the x-api-token header" or, as before, the
        # api_token query parameter (pipedrive.readme.io/docs/core-api-concepts-authentication).
        token = self.headers.get("x-api-token") or self._param("api_token")
        if token != self.pipedrive.config["api_token"]:
            reply = _failure(401, "unauthorized access")
            reply.body["errorCode"] = 401
            return reply
        return self._answer(work)

    @staticmethod
    def _answer(work: Callable[[], Reply]) -> Reply:
        """`work`'s reply, or its refusal in Pipedrive's words."""
        try:
            return work()
        except PipedriveError as exc:
            return exc.reply()
        except NotFound as exc:
            return _failure(404, exc.detail)
        except InvalidInput as exc:
            return _failure(400, exc.detail)

    def _ok(self, data: Any, status: int = 200, **additional: Any) -> Reply:
        body: dict[str, Any] = {"success": True, "data": data}
        if additional:
            body["additional_data"] = additional
        return Reply(status, body)

    def _int_param(self, name: str, default: int, *, maximum: int = 500) -> int:
        raw = self._param(name)
        try:
            value = int(raw) if raw else default
        except ValueError:
            raise PipedriveError(400, f"{name} must be an integer") from None
        if value < 0:
            raise PipedriveError(400, f"{name} must not be negative")
        return min(value, maximum)

    def _search_term(self) -> tuple[str, bool]:
        term = self._param("term") or ""
        exact = (self._param("exact_match") or "").lower() == "true"
        # "Minimum 2 characters (or 1 if using exact_match)" (v2 leads-api.ts, searchLeads).
        if len(term) < (1 if exact else 2):
            raise PipedriveError(400, "Search term must be at least 2 characters long")
        return term, exact

    # -- persons -------------------------------------------------------------

    def persons_post(self) -> Reply:
        self.store.count_call("create_person")
        return self._vendor(lambda: self._ok(self.pipedrive.create_person(self._json_body())))

    def persons_search(self) -> Reply:
        def work() -> Reply:
            self.store.count_call("lookup_person")
            term, exact = self._search_term()
            fields = self._param("fields") or "email"
            items = self.pipedrive.search_persons(term, exact=exact) if "email" in fields else []
            return self._ok({"items": items}, next_cursor=None)

        return self._vendor(work)

    def person_get(self, person_id: str) -> Reply:
        return self._vendor(lambda: self._ok(self.pipedrive.get_person(int(person_id))))

    # -- leads ---------------------------------------------------------------

    def leads_post(self) -> Reply:
        self.store.count_call("create_record")

        def work() -> Reply:
            body = self._json_body()
            self.pipedrive.check_lead(body)  # a fault only hits an otherwise valid call
            # 201 Created (client-nodejs v1 leads-api.ts, addLead; AddLeadResponse).
            return self._faulted(
                "create_record",
                lambda: self._answer(lambda: self._ok(self.pipedrive.create_lead(body), 201)),
            )

        return self._vendor(work)

    def leads_get(self) -> Reply:
        def work() -> Reply:
            self.store.count_call("list_records")
            start = self._int_param("start", 0, maximum=10**9)
            limit = self._int_param("limit", 100) or 100
            sort = self._param("sort") or "add_time ASC"
            page, more = self.pipedrive.list_leads(start=start, limit=limit, sort=sort)
            # additional_data {start, limit, more_items_in_collection}
            # (client-nodejs v1 models/get-leads-response.ts).
            return self._ok(page, start=start, limit=limit, more_items_in_collection=more)

        return self._vendor(work)

    def leads_search(self) -> Reply:
        def work() -> Reply:
            self.store.count_call("lookup_record")
            term, exact = self._search_term()
            fields = self._param("fields") or "custom_fields,notes,title"
            items = self.pipedrive.search_leads(term, exact=exact) if "custom" in fields else []
            # data.items[{result_score, item}], additional_data.next_cursor
            # (client-nodejs v2 models/get-lead-search-response-data.ts).
            return self._ok({"items": items}, next_cursor=None)

        return self._vendor(work)

    def lead_get(self, lead_id: str) -> Reply:
        return self._vendor(lambda: self._ok(self.pipedrive.get_lead(lead_id)))

    def lead_patch(self, lead_id: str) -> Reply:
        self.store.count_call("update_record")
        return self._vendor(
            lambda: self._ok(self.pipedrive.update_lead(lead_id, self._json_body()))
        )

    def lead_delete(self, lead_id: str) -> Reply:
        self.store.count_call("delete_record")

        def work() -> Reply:
            self.pipedrive.delete_lead(lead_id)
            return self._ok({"id": lead_id})

        return self._vendor(work)

    def lead_fields_get(self) -> Reply:
        def work() -> Reply:
            fields = _system_lead_fields() + [
                _field_view(field, index)
                for index, field in enumerate(self.pipedrive.config["lead_fields"], start=100)
            ]
            return self._ok(fields, start=0, limit=len(fields), more_items_in_collection=False)

        return self._vendor(work)

    # -- activities ----------------------------------------------------------

    def activities_post(self) -> Reply:
        self.store.count_call("create_task")

        def work() -> Reply:
            body = self._json_body()
            if body.get("lead_id") is not None:
                self.pipedrive.get_lead(str(body["lead_id"]))  # 404 before any fault
            return self._faulted(
                "create_task",
                lambda: self._answer(lambda: self._ok(self.pipedrive.create_activity(body))),
            )

        return self._vendor(work)

    def activities_get(self) -> Reply:
        def work() -> Reply:
            self.store.count_call("lookup_task")
            limit = self._int_param("limit", 100) or 100
            cursor = self._param("cursor")
            after = int(cursor) if cursor and cursor.isdigit() else 0
            page, last = self.pipedrive.list_activities(
                lead_id=self._param("lead_id"), after=after, limit=limit
            )
            return self._ok(page, next_cursor=str(last) if last else None)

        return self._vendor(work)

    def activity_get(self, activity_id: str) -> Reply:
        return self._vendor(lambda: self._ok(self.pipedrive.get_activity(int(activity_id))))

    # -- control -------------------------------------------------------------

    def config_get(self) -> Reply:
        return Reply(200, dict(self.pipedrive.config))

    def config_post(self) -> Reply:
        return Reply(200, self.pipedrive.set_config(self._json_body()))

    # -- faults in Pipedrive's words -------------------------------------------

    def fault_reply_before_commit(self, fault: Fault) -> Reply | None:
        seconds = str(max(0, math.ceil(fault.seconds)))
        if fault.mode == "http_429":
            # 429 with x-ratelimit-limit / -remaining / -reset, the reset in seconds
            # (pipedrive.readme.io/docs/core-api-concepts-rate-limiting; CRM-FACTS.md).
            headers = {
                "x-ratelimit-limit": "40",
                "x-ratelimit-remaining": "0",
                "x-ratelimit-reset": seconds,
            }
            return _failure(429, "Request over limit", headers)
        if fault.mode == "http_503":
            return _failure(503, "Service unavailable", {"Retry-After": seconds})
        if fault.mode == "fail_before_commit":
            return _failure(500, "Internal server error")
        if fault.mode == "http_400":
            return _failure(400, "Validation failed")
        return None

    def fault_reply_after_commit(self, fault: Fault) -> Reply:
        return _failure(500, "Internal server error")


def _system_lead_fields() -> list[dict[str, Any]]:
    """A few of the lead's own fields, as GET /v1/leadFields lists them."""
    names = [
        ("title", "Title", "varchar"),
        ("person_id", "Person", "people"),
        ("organization_id", "Organization", "org"),
        ("owner_id", "Owner", "user"),
        ("expected_close_date", "Expected close date", "date"),
    ]
    return [
        {**_field_view({"key": key, "name": name, "field_type": kind}, index), "edit_flag": False}
        for index, (key, name, kind) in enumerate(names, start=1)
    ]


def _field_view(field: Mapping[str, Any], index: int) -> dict[str, Any]:
    # Field properties: client-nodejs v1 models/field.ts (key, name, field_type,
    # active_flag, edit_flag, searchable_flag, ...).
    return {
        "id": index,
        "key": field["key"],
        "name": field["name"],
        "field_type": field["field_type"],
        "active_flag": True,
        "edit_flag": True,
        "searchable_flag": field["field_type"] in SEARCHABLE_TYPES,
        "mandatory_flag": False,
        "options": None,
    }


class PipedriveEmulator(EmulatorServer):
    """Pipedrive on loopback: `with PipedriveEmulator() as pipedrive: pipedrive.http_url`."""

    vendor = "pipedrive"
    handler_class = PipedriveHandler
    store_class = PipedriveStore

    def adapter_env(self) -> dict[str, str]:
        """The PIPEDRIVE_* variables that point the adapter at this emulator as it
        starts (after a reset): its URL, its token, its reference field's key."""
        return {
            "PIPEDRIVE_BASE_URL": self.http_url,
            "PIPEDRIVE_API_TOKEN": DEFAULT_API_TOKEN,
            "PIPEDRIVE_REFERENCE_FIELD": REFERENCE_FIELD_KEY,
            "PIPEDRIVE_MESSAGE_FIELD": MESSAGE_FIELD_KEY,
        }
