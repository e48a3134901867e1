"""A local HubSpot: the CRM v3 objects and properties APIs, with HubSpot's quirks.

What it answers and why is described below; each
emulated behaviour names its source in a comment here. State is kept in memory
under the store's lock; the sandbox's fault queue, chaos and call counters come
with `SandboxStore` (lab/emulators/kit.py).

The emulated API
================

HubSpot: the adapter (adapter.py) and a local emulator of HubSpot's CRM API (emulator.py).

The emulator is a real HTTP server on loopback built from the sandbox's parts
(lab/emulators/kit.py): the same fault queue, chaos, call counts and
``/_sandbox/`` controls, and HubSpot's own paths, bodies and quirks. Each
emulated behaviour names its source in a comment in emulator.py; CRM-FACTS.md
("HubSpot CRM") is the summary.

Running it
==========

In process (tests)::

    from lab.emulators.hubspot import HubSpotEmulator

    with HubSpotEmulator() as hubspot:          # port 0: a free port
        hubspot.http_url                        # http://127.0.0.1:PORT
        hubspot.hubspot.set_config({"search_lag_seconds": 5})

Every HubSpot path needs ``Authorization: Bearer <token>`` (any token, or the
one set with the ``token`` knob); otherwise 401 ``INVALID_AUTHENTICATION``.

HubSpot API (what the adapter calls)
====================================

Object types: ``contacts``, ``deals``, ``tickets``, ``tasks``. Ids are numbers
(strings in JSON), one counter for all types, from 1001. An object is::

    {"id": "1002", "properties": {..., "hs_object_id", "createdate",
     "hs_lastmodifieddate"}, "createdAt": "...Z", "updatedAt": "...Z",
     "archived": false[, "associations": {"contacts": {"results": [{"id", "type"}]}}]}

Errors have HubSpot's shape ``{"status": "error", "message", "correlationId",
"category"}`` (plus ``errors`` where noted).

``POST /crm/v3/objects/{type}`` ``{"properties": {...}, "associations": [{"to": {"id"},
"types": [{"associationCategory": "HUBSPOT_DEFINED", "associationTypeId"}]}]}``
    201 with the object. Unknown properties: 400 ``VALIDATION_ERROR``. Required:
    deals ``dealname``; tickets ``subject``, ``hs_pipeline_stage``; tasks
    ``hs_timestamp``. Association type ids are checked: deal→contact 3,
    ticket→contact 16, task→contact 204, task→deal 216, task→ticket 230.
    Contacts are unique by email (case-insensitive): a second one answers 409
    ``CONFLICT`` "Contact already exists. Existing ID: N" (the id only in the
    text). A value of a unique property (the reference property when
    ``reference_unique``, and ``unique_properties``) held by a live object of
    the type answers 409 ``CONFLICT`` "A deal with onefold_ref X already
    exists. Existing ID: N" with ``errors: [{"message", "in": "<property>"}]``.
    Runs under the fault queue: ``create_contact`` for contacts,
    ``create_record`` for deals and tickets, ``create_task`` for tasks.

``GET /crm/v3/objects/{type}/{id}[?idProperty=P][&properties=a,b][&associations=contacts]``
    200 the object, read from the objects themselves (no lag). By id, a merged-away
    id answers with the surviving object. With ``idProperty`` the value is
    looked up in P, which must be unique for the type (``email`` for contacts),
    else 400 ``VALIDATION_ERROR`` "... non-unique ...". Missing: 404
    ``OBJECT_NOT_FOUND`` "resource not found".

``PATCH /crm/v3/objects/{type}/{id}`` ``{"properties"}``: 200; uniqueness as on create.
``DELETE /crm/v3/objects/{type}/{id}``: 204, archived (what staff do behind Onefold's back).

``GET /crm/v3/objects/{type}?limit=N&after=C[&properties=]``
    Live objects by id, ``limit`` at most 100: ``{"results", "paging": {"next":
    {"after"}}}``, ``paging`` absent on the last page.

``POST /crm/v3/objects/{type}/search`` ``{"filterGroups": [{"filters": [{"propertyName",
"operator": "EQ", "value"}]}], "limit"}``
    ``{"total", "results"}``; an object shows only ``search_lag_seconds`` after
    its last write (HubSpot's search lags writes). The adapter never uses it;
    tests use it to show the lag.

``POST /crm/v3/objects/{type}/merge`` ``{"primaryObjectId", "objectIdToMerge"}``
    200 the primary; the merged object's associations move to it and its id is
    added to ``hs_merged_object_ids``. Merging an object already merged: 400.

``GET /crm/v3/properties/{type}/{name}``
    200 ``{"name", "type": "string", "hasUniqueValue", ...}``; 404 when the
    property does not exist on that type. The reference property exists on
    deals, tickets and tasks unless listed in ``reference_missing_on``.

Controls (tests and drills)
===========================

The sandbox's: ``POST /_sandbox/reset``, ``/_sandbox/faults`` (actions
``create_record``, ``create_task``, ``create_contact``), ``/_sandbox/chaos``,
``GET /_sandbox/stats``: ``records`` are live deals and tickets,
``records_by_external_ref`` and ``tasks_by_external_ref`` count them by the
reference property; plus ``contacts`` and ``contacts_by_email``; ``calls``
adds ``create_contact``, ``search``, ``get_property``.

``GET|POST /_sandbox/config``: ``search_lag_seconds`` (0), ``reference_property``
(``onefold_ref``), ``reference_unique`` (true; false: the property exists
without hasUniqueValue and nothing refuses a repeat), ``reference_missing_on``
([]), ``unique_properties`` ({type: [names]}: clashes that are not ours),
``rate_limit_policy`` (``TEN_SECONDLY_ROLLING`` or ``DAILY``: how an injected
``http_429`` answers), ``retry_after_header`` (false), ``token`` (null).
Reset puts them back.

Faults in HubSpot's words: ``http_429`` answers ``{"status": "error", "message":
"You have reached your ... limit.", "errorType": "RATE_LIMIT", "policyName",
"correlationId", "requestId"}`` with ``X-HubSpot-RateLimit-*`` headers;
``http_503``, ``fail_before_commit``, ``http_400``, ``http_500_after_commit``
answer HubSpot-shaped bodies; ``drop_response_after_commit`` and ``slow`` are
the sandbox's.

Not emulated (unverified or unused): batch upsert, the v4 associations API,
owners and pipelines (any value is stored), HubSpot's real rate counting.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, cast
from urllib.parse import unquote

from lab.emulators.kit import EmulatorServer
from lab.sandbox.http import CONTROL_ROUTES, Reply, Route, SandboxRequestHandler
from lab.sandbox.store import (
    ACTIONS,
    FAULT_MODES,
    Fault,
    InvalidInput,
    SandboxStore,
)

OBJECT_TYPES = ("contacts", "deals", "tickets", "tasks")
ENQUIRY_TYPES = ("deals", "tickets")
# The sandbox's three actions, plus the contact create (its own fault queue).
FAULT_ACTIONS = (*ACTIONS, "create_contact")
_SINGULAR = {"contacts": "contact", "deals": "deal", "tickets": "ticket", "tasks": "task"}
# Default properties of each object type that the adapter writes or reads
# (https://developers.hubspot.com/docs/api/crm/properties, "Default properties").
_KNOWN_PROPERTIES = {
    "contacts": {"email", "firstname", "lastname", "phone"},
    "deals": {"dealname", "pipeline", "dealstage", "description", "amount", "closedate"},
    "tickets": {"subject", "content", "hs_pipeline", "hs_pipeline_stage", "hs_ticket_priority"},
    "tasks": {
        "hs_timestamp",
        "hs_task_subject",
        "hs_task_body",
        "hs_task_status",
        "hs_task_priority",
        "hubspot_owner_id",
    },
}
# Required on create (deals: dealname; tickets: subject and stage; tasks: hs_timestamp),
# https://developers.hubspot.com/docs/api/crm/deals, /tickets, /engagements/tasks.
_REQUIRED = {
    "contacts": (),
    "deals": ("dealname",),
    "tickets": ("subject", "hs_pipeline_stage"),
    "tasks": ("hs_timestamp",),
}
# HUBSPOT_DEFINED association type ids (CRM-FACTS.md, HubSpot: deal→contact 3,
# task→deal 216, task→contact 204; ticket→contact 16 as the reverse of contact→ticket 15
# in https://developers.hubspot.com/docs/methods/crm-associations/crm-associations-overview;
# task→ticket 230 from third-party tables, unverified).
ASSOCIATION_TYPES = {
    ("deals", "contacts"): 3,
    ("tickets", "contacts"): 16,
    ("tasks", "contacts"): 204,
    ("tasks", "deals"): 216,
    ("tasks", "tickets"): 230,
}
DEFAULT_CONFIG: dict[str, Any] = {
    # Search sees a write only this long after it (CRM-FACTS.md: "Search lags writes").
    "search_lag_seconds": 0.0,
    "reference_property": "onefold_ref",
    # False: the property exists without hasUniqueValue (nothing refuses a repeat).
    "reference_unique": True,
    # Object types on which the reference property was never created.
    "reference_missing_on": [],
    # Other unique properties, {object type: [names]}: a clash there is not ours.
    "unique_properties": {},
    # The policy an injected http_429 answers with: TEN_SECONDLY_ROLLING or DAILY.
    "rate_limit_policy": "TEN_SECONDLY_ROLLING",
    # Whether that 429 carries Retry-After (the fault's seconds, rounded up).
    "retry_after_header": False,
    # When set, the only Bearer token accepted; otherwise any Bearer token is.
    "token": None,
}
_MAX_PAGE = 100
# Calls counted in stats["calls"] beside the sandbox's.
_HUBSPOT_CALLS = (
    "create_contact",
    "search",
    "get_property",
)  # list endpoints take limit <= 100 (objects API reference, "limit")


class HubSpotError(Exception):
    """An answer in HubSpot's error shape: status, message, correlationId, category
    (https://developers.hubspot.com/docs/api/error-handling)."""

    def __init__(self, status: int, category: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.category = category
        self.message = message
        self.extra = extra

    def reply(self, headers: dict[str, str] | None = None) -> Reply:
        return Reply(
            self.status, error_body(self.category, self.message, **self.extra), headers or {}
        )


def error_body(category: str, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "status": "error",
        "message": message,
        "correlationId": str(uuid.uuid4()),
        "category": category,
        **extra,
    }


def _iso(stamp: float) -> str:
    moment = datetime.fromtimestamp(stamp, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@dataclass
class HubObject:
    id: int
    type: str
    properties: dict[str, str]
    created: float
    updated: float
    merged_into: int | None = None
    archived: bool = False
    # {to object type: {to id: association type id}}
    associations: dict[str, dict[int, int]] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.merged_into is None and not self.archived

    def as_json(
        self, wanted: list[str] | None = None, with_associations: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        stamps = {
            "hs_object_id": str(self.id),
            "createdate": _iso(self.created),
            "hs_lastmodifieddate": _iso(self.updated),
        }
        props = dict(self.properties)
        if wanted is not None:
            props = {k: v for k, v in props.items() if k in wanted}
        body: dict[str, Any] = {
            "id": str(self.id),
            "properties": {**props, **stamps},
            "createdAt": _iso(self.created),
            "updatedAt": _iso(self.updated),
            "archived": self.archived,
        }
        if with_associations:
            body["associations"] = {
                to: {
                    "results": [
                        {"id": str(i), "type": f"{_SINGULAR[self.type]}_to_{_SINGULAR[to]}"}
                        for i in sorted(self.associations.get(to, {}))
                    ]
                }
                for to in with_associations
                if self.associations.get(to)
            }
        return body


class HubSpotStore(SandboxStore):
    """HubSpot's objects in memory, behind the sandbox store's lock.

    Uniqueness (contacts by email, the reference property when it has unique
    values) is checked against the objects themselves, at once; only search
    sees writes late.
    """

    def __init__(self, db_path: str | None = None) -> None:
        super().__init__(db_path)
        self._objects: dict[int, HubObject] = {}
        self._next_id = 1001
        self._config: dict[str, Any] = dict(DEFAULT_CONFIG)

    # -- control ---------------------------------------------------------------

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self._objects.clear()
            self._next_id = 1001
            self._config = dict(DEFAULT_CONFIG)

    def config(self) -> dict[str, Any]:
        with self._lock:
            return {k: (list(v) if isinstance(v, list) else v) for k, v in self._config.items()}

    def set_config(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(changes) - set(DEFAULT_CONFIG)
        if unknown:
            raise InvalidInput(f"unknown config: {', '.join(sorted(unknown))}")
        checks: dict[str, Callable[[Any], bool]] = {
            "search_lag_seconds": lambda v: (
                isinstance(v, int | float)
                and not isinstance(v, bool)
                and math.isfinite(v)
                and v >= 0
            ),
            "reference_property": lambda v: isinstance(v, str) and bool(v),
            "reference_unique": lambda v: isinstance(v, bool),
            "reference_missing_on": lambda v: isinstance(v, list) and set(v) <= set(OBJECT_TYPES),
            "unique_properties": lambda v: (
                isinstance(v, dict)
                and all(k in OBJECT_TYPES and isinstance(n, list) for k, n in v.items())
            ),
            "rate_limit_policy": lambda v: v in ("TEN_SECONDLY_ROLLING", "DAILY"),
            "retry_after_header": lambda v: isinstance(v, bool),
            "token": lambda v: v is None or (isinstance(v, str) and bool(v)),
        }
        for name, value in changes.items():
            if not checks[name](value):
                raise InvalidInput(f"invalid value for {name}: {value!r}")
        with self._lock:
            self._config.update(changes)
        return self.config()

    def add_fault(
        self, *, action: Any, mode: Any, times: Any = 1, seconds: Any = 1
    ) -> list[dict[str, Any]]:
        """As the sandbox's, with one more action: create_contact."""
        if action != "create_contact":
            return super().add_fault(action=action, mode=mode, times=times, seconds=seconds)
        if mode not in FAULT_MODES:
            raise InvalidInput(f"mode must be one of {', '.join(FAULT_MODES)}")
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise InvalidInput("times must be a positive integer")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise InvalidInput("seconds must be a number")
        with self._transaction() as db:
            db.execute(
                "INSERT INTO faults (action, mode, seconds, remaining) VALUES (?, ?, ?, ?)",
                (action, mode, float(seconds), times),
            )
        return self.faults()

    # -- properties --------------------------------------------------------------

    def has_property(self, object_type: str, name: str) -> bool:
        config = self._config
        if name == config["reference_property"]:
            return object_type != "contacts" and object_type not in config["reference_missing_on"]
        return name in _KNOWN_PROPERTIES[object_type] or name in config["unique_properties"].get(
            object_type, []
        )

    def unique_properties(self, object_type: str) -> set[str]:
        config = self._config
        names = set(config["unique_properties"].get(object_type, []))
        if config["reference_unique"] and self.has_property(
            object_type, config["reference_property"]
        ):
            names.add(config["reference_property"])
        return names

    def property_definition(self, object_type: str, name: str) -> dict[str, Any]:
        """GET /crm/v3/properties/{objectType}/{propertyName}'s body
        (https://developers.hubspot.com/docs/api-reference/crm-properties-v3/core/get-crm-v3-properties-objectType-propertyName)."""
        with self._lock:
            if not self.has_property(object_type, name):
                # Wording unverified; the status and category are the documented 404's.
                raise HubSpotError(
                    404, "OBJECT_NOT_FOUND", f"Unable to find property {name} for {object_type}"
                )
            unique = name in self.unique_properties(object_type)
        return {
            "name": name,
            "label": name.replace("_", " ").title(),
            "type": "string",
            "fieldType": "text",
            "groupName": f"{_SINGULAR[object_type]}information",
            # Required by the Properties v3 document (Property: "description", "options",
            # lab/specs/hubspot/properties.json); options "will be empty for other
            # property types" than enumerations (its description of `options`).
            "description": "",
            "options": [],
            "hasUniqueValue": unique,
            "hidden": False,
            "formField": False,
            "displayOrder": -1,
            "modificationMetadata": {
                "archivable": True,
                "readOnlyDefinition": False,
                "readOnlyValue": False,
            },
        }

    # -- objects -----------------------------------------------------------------

    def create(
        self, object_type: str, properties: dict[str, str], associations: list[Any]
    ) -> dict[str, Any]:
        """POST /crm/v3/objects/{objectType} (CRM-FACTS.md, HubSpot: "Create")."""
        with self._lock:
            self._check_properties(object_type, properties)
            missing = [name for name in _REQUIRED[object_type] if not properties.get(name)]
            if missing:
                raise HubSpotError(
                    400,
                    "VALIDATION_ERROR",
                    f"Property values were not valid: {missing} are required",
                )
            links = self._check_associations(object_type, associations)
            self._refuse_duplicates(object_type, properties, exclude=None)
            now = time.time()
            obj = HubObject(self._next_id, object_type, dict(properties), now, now)
            self._next_id += 1
            self._objects[obj.id] = obj
            for target, type_id in links:
                obj.associations.setdefault(target.type, {})[target.id] = type_id
                target.associations.setdefault(object_type, {})[obj.id] = type_id
            return obj.as_json()

    def read(
        self,
        object_type: str,
        value: str,
        *,
        id_property: str | None,
        wanted: list[str] | None,
        with_associations: tuple[str, ...],
    ) -> dict[str, Any]:
        """GET /crm/v3/objects/{objectType}/{id}[?idProperty=]: read from the objects
        themselves, so a write is seen at once (CRM-FACTS.md: "Read by key without search")."""
        with self._lock:
            if id_property in (None, "hs_object_id"):
                obj = self._by_id(object_type, value)
            else:
                obj = self._by_unique_value(object_type, str(id_property), value)
            return obj.as_json(wanted, with_associations)

    def update(
        self, object_type: str, object_id: str, properties: dict[str, str]
    ) -> dict[str, Any]:
        """PATCH /crm/v3/objects/{objectType}/{objectId}: the properties given change."""
        with self._lock:
            obj = self._by_id(object_type, object_id)
            self._check_properties(object_type, properties)
            self._refuse_duplicates(object_type, properties, exclude=obj.id)
            obj.properties.update(properties)
            obj.updated = time.time()
            return obj.as_json()

    def archive(self, object_type: str, object_id: str) -> None:
        """DELETE /crm/v3/objects/{objectType}/{objectId}: to the recycling bin."""
        with self._lock:
            self._by_id(object_type, object_id).archived = True

    def page(
        self, object_type: str, *, limit: int, after: str | None, wanted: list[str] | None
    ) -> dict[str, Any]:
        """GET /crm/v3/objects/{objectType}?limit=&after=: live objects by id, paged with
        `paging.next.after` (HubSpot/hubspot-api-python, crm/objects basic_api get_page)."""
        start = int(after) if after and after.isdigit() else 0
        with self._lock:
            rows = sorted(
                (
                    o
                    for o in self._objects.values()
                    if o.type == object_type and o.live and o.id > start
                ),
                key=lambda o: o.id,
            )
            page = rows[: max(1, min(limit, _MAX_PAGE))]
            body: dict[str, Any] = {"results": [o.as_json(wanted) for o in page]}
            if len(rows) > len(page):
                body["paging"] = {"next": {"after": str(page[-1].id)}}
            return body

    def search(self, object_type: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """POST /crm/v3/objects/{objectType}/search with EQ filters. A write shows only
        `search_lag_seconds` after it was made (CRM-FACTS.md: "Search lags writes",
        "may take a few moments", official search limits)."""
        groups = request.get("filterGroups") or [{"filters": []}]
        with self._lock:
            horizon = time.time() - float(self._config["search_lag_seconds"])
            found = [
                o
                for o in sorted(self._objects.values(), key=lambda o: o.id)
                if o.type == object_type
                and o.live
                and o.updated <= horizon
                and any(_matches(o, group.get("filters") or []) for group in groups)
            ]
            limit = int(request.get("limit") or 10)
            return {"total": len(found), "results": [o.as_json() for o in found[:limit]]}

    def merge(self, object_type: str, primary_id: Any, merged_id: Any) -> dict[str, Any]:
        """POST /crm/v3/objects/{objectType}/merge {primaryObjectId, objectIdToMerge}
        (HubSpot/hubspot-api-python, crm/objects public_object_api merge): the merged
        object's associations move to the primary; reading its id gives the primary."""
        with self._lock:
            primary = self._by_id(object_type, str(primary_id))
            merged = self._objects.get(int(merged_id)) if str(merged_id).isdigit() else None
            if merged is None or merged.type != object_type or merged.archived:
                raise HubSpotError(404, "OBJECT_NOT_FOUND", "resource not found")
            if merged.id == primary.id or merged.merged_into is not None:
                # A repeat of a merge already made: refused (wording unverified).
                raise HubSpotError(
                    400,
                    "VALIDATION_ERROR",
                    f"Object {merged.id} cannot be merged into {primary.id}",
                )
            merged.merged_into = primary.id
            for to_type, links in merged.associations.items():
                for other_id, type_id in links.items():
                    other = self._objects[other_id]
                    other.associations.get(object_type, {}).pop(merged.id, None)
                    other.associations.setdefault(object_type, {})[primary.id] = type_id
                    primary.associations.setdefault(to_type, {})[other_id] = type_id
            ids = [i for i in primary.properties.get("hs_merged_object_ids", "").split(";") if i]
            primary.properties["hs_merged_object_ids"] = ";".join([*ids, str(merged.id)])
            primary.updated = time.time()
            return primary.as_json()

    # -- inspection ---------------------------------------------------------------

    def stats(self, *, detail: bool = True) -> dict[str, Any]:
        """The sandbox's keys: records are the live enquiry objects (deals and tickets),
        counted by the reference property; plus contacts."""
        result = super().stats(detail=detail)
        result["calls"] = {**dict.fromkeys(_HUBSPOT_CALLS, 0), **result["calls"]}
        with self._lock:
            ref = self._config["reference_property"]
            live = [o for o in self._objects.values() if o.live]
            records = [o for o in live if o.type in ENQUIRY_TYPES]
            tasks = [o for o in live if o.type == "tasks"]
            contacts = [o for o in live if o.type == "contacts"]
            result.update(records=len(records), tasks=len(tasks), contacts=len(contacts))
            if detail:
                result["records_by_external_ref"] = _count_by(records, ref)
                result["tasks_by_external_ref"] = _count_by(tasks, ref)
                result["contacts_by_email"] = _count_by(contacts, "email")
        return result

    # -- helpers (call with the lock held) ----------------------------------------

    def _check_properties(self, object_type: str, properties: Mapping[str, Any]) -> None:
        # Unknown properties are refused whole (https://developers.hubspot.com/docs/api/
        # error-handling: VALIDATION_ERROR, "Property values were not valid").
        unknown = [name for name in properties if not self.has_property(object_type, name)]
        if unknown:
            details = [
                {"isValid": False, "message": f'Property "{n}" does not exist', "name": n}
                for n in unknown
            ]
            raise HubSpotError(
                400, "VALIDATION_ERROR", f"Property values were not valid: {details}"
            )
        if any(not isinstance(v, str) for v in properties.values()):
            raise HubSpotError(400, "VALIDATION_ERROR", "Property values must be strings")

    def _check_associations(
        self, object_type: str, associations: list[Any]
    ) -> list[tuple[HubObject, int]]:
        links = []
        for item in associations:
            to = item.get("to") if isinstance(item, dict) else None
            target_id = str((to or {}).get("id", ""))
            target = self._objects.get(int(target_id)) if target_id.isdigit() else None
            if target is None or not target.live:
                raise HubSpotError(
                    400, "VALIDATION_ERROR", f"Association target {target_id} does not exist"
                )
            expected = ASSOCIATION_TYPES.get((object_type, target.type))
            types = [t.get("associationTypeId") for t in item.get("types") or []]
            if expected is None or types != [expected]:
                raise HubSpotError(
                    400,
                    "VALIDATION_ERROR",
                    f"Association type {types} is not valid from {object_type} to {target.type}",
                )
            links.append((target, expected))
        return links

    def _refuse_duplicates(
        self, object_type: str, properties: Mapping[str, str], *, exclude: int | None
    ) -> None:
        others = [
            o
            for o in self._objects.values()
            if o.type == object_type and o.live and o.id != exclude
        ]
        if object_type == "contacts" and properties.get("email"):
            email = properties["email"].lower()
            for other in others:
                if other.properties.get("email", "").lower() == email:
                    # The id is only in the message text (CRM-FACTS.md, HubSpot;
                    # hubspot-api-nodejs#545, hubspot-api-php#59).
                    raise HubSpotError(
                        409, "CONFLICT", f"Contact already exists. Existing ID: {other.id}"
                    )
        for name in sorted(self.unique_properties(object_type)):
            value = properties.get(name)
            holder = next((o for o in others if value and o.properties.get(name) == value), None)
            if holder is not None:
                # Names the property in errors[].in, as HubSpot's newer 409 bodies do
                # (community.hubspot.com "Updated 409 Conflict responses", m-p/951534);
                # the wording for a custom unique property is unverified.
                text = (
                    f"A {_SINGULAR[object_type]} with {name} {value} already exists. "
                    f"Existing ID: {holder.id}"
                )
                raise HubSpotError(409, "CONFLICT", text, errors=[{"message": text, "in": name}])

    def _by_id(self, object_type: str, value: str) -> HubObject:
        obj = self._objects.get(int(value)) if value.isdigit() else None
        while obj is not None and obj.merged_into is not None:
            obj = self._objects.get(obj.merged_into)
        if obj is None or obj.type != object_type or obj.archived:
            # Body as quoted in segmentio/segment-docs#6244 ("resource not found", 404).
            raise HubSpotError(404, "OBJECT_NOT_FOUND", "resource not found")
        return obj

    def _by_unique_value(self, object_type: str, id_property: str, value: str) -> HubObject:
        unique = self.unique_properties(object_type) | (
            {"email"} if object_type == "contacts" else set()
        )
        if id_property not in unique:
            # segmentio/action-destinations#3957: "Unable to perform update/upsert by
            # non-unique 0-2 property ..." (400 VALIDATION_ERROR).
            raise HubSpotError(
                400,
                "VALIDATION_ERROR",
                f"Unable to perform lookup by non-unique {object_type} property {id_property}",
            )
        for obj in self._objects.values():
            if obj.type != object_type or not obj.live:
                continue
            held = obj.properties.get(id_property, "")
            if held == value or (id_property == "email" and held.lower() == value.lower()):
                return obj
        raise HubSpotError(404, "OBJECT_NOT_FOUND", "resource not found")


def _matches(obj: HubObject, filters: list[Any]) -> bool:
    for item in filters:
        if not isinstance(item, dict) or item.get("operator", "EQ") != "EQ":
            raise HubSpotError(400, "VALIDATION_ERROR", "only EQ filters are emulated")
        if obj.properties.get(str(item.get("propertyName"))) != str(item.get("value")):
            return False
    return True


def _count_by(objects: list[HubObject], name: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for obj in objects:
        value = obj.properties.get(name)
        if value:
            key = value.lower() if name == "email" else value
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


_TYPE = r"(?P<object_type>contacts|deals|tickets|tasks)"
HUBSPOT_ROUTES: list[Route] = [
    (re.compile(rf"/crm/v3/objects/{_TYPE}"), {"GET": "objects_get", "POST": "objects_post"}),
    (re.compile(rf"/crm/v3/objects/{_TYPE}/search"), {"POST": "search_post"}),
    (re.compile(rf"/crm/v3/objects/{_TYPE}/merge"), {"POST": "merge_post"}),
    (
        re.compile(rf"/crm/v3/objects/{_TYPE}/(?P<object_id>[^/]+)"),
        {"GET": "object_get", "PATCH": "object_patch", "DELETE": "object_delete"},
    ),
    (re.compile(rf"/crm/v3/properties/{_TYPE}/(?P<name>[^/]+)"), {"GET": "property_get"}),
    (re.compile(r"/_sandbox/config"), {"GET": "config_get", "POST": "config_post"}),
    *CONTROL_ROUTES,
]
_CREATE_ACTIONS = {"contacts": "create_contact", "tasks": "create_task"}


class HubSpotHandler(SandboxRequestHandler):
    """HubSpot's paths (HUBSPOT_ROUTES) plus the sandbox's controls."""

    routes = HUBSPOT_ROUTES
    server_version = "OnefoldHubSpotEmulator/1"

    @property
    def hubspot(self) -> HubSpotStore:
        return cast(HubSpotStore, self.server.store)

    # -- objects -------------------------------------------------------------------

    def objects_post(self, object_type: str) -> Reply:
        action = _CREATE_ACTIONS.get(object_type, "create_record")
        self.store.count_call(action)

        def call() -> Reply:
            self._authorize()
            body = self._json_body()
            properties = body.get("properties") or {}
            associations = body.get("associations") or []
            if not isinstance(properties, dict) or not isinstance(associations, list):
                raise HubSpotError(400, "VALIDATION_ERROR", "properties must be an object")
            return self._faulted(
                action,
                lambda: _caught(
                    lambda: Reply(201, self.hubspot.create(object_type, properties, associations))
                ),
            )

        return _caught(call)

    def objects_get(self, object_type: str) -> Reply:
        if object_type in ENQUIRY_TYPES:
            self.store.count_call("list_records")

        def call() -> Reply:
            self._authorize()
            limit = self._param("limit") or "10"
            if not limit.isdigit():
                raise HubSpotError(400, "VALIDATION_ERROR", "limit must be an integer")
            return Reply(
                200,
                self.hubspot.page(
                    object_type,
                    limit=int(limit),
                    after=self._param("after"),
                    wanted=self._list("properties"),
                ),
            )

        return _caught(call)

    def object_get(self, object_type: str, object_id: str) -> Reply:
        id_property = self._param("idProperty")
        if id_property and object_type in ENQUIRY_TYPES:
            self.store.count_call("lookup_record")
        elif id_property and object_type == "tasks":
            self.store.count_call("lookup_task")

        def call() -> Reply:
            self._authorize()
            found = self.hubspot.read(
                object_type,
                unquote(object_id),
                id_property=id_property,
                wanted=self._list("properties"),
                with_associations=tuple(self._list("associations") or ()),
            )
            return Reply(200, found)

        return _caught(call)

    def object_patch(self, object_type: str, object_id: str) -> Reply:
        self.store.count_call("update_record")

        def call() -> Reply:
            self._authorize()
            properties = self._json_body().get("properties") or {}
            if not isinstance(properties, dict):
                raise HubSpotError(400, "VALIDATION_ERROR", "properties must be an object")
            return Reply(200, self.hubspot.update(object_type, unquote(object_id), properties))

        return _caught(call)

    def object_delete(self, object_type: str, object_id: str) -> Reply:
        self.store.count_call("delete_record")

        def call() -> Reply:
            self._authorize()
            self.hubspot.archive(object_type, unquote(object_id))
            return Reply(204)

        return _caught(call)

    def search_post(self, object_type: str) -> Reply:
        self.store.count_call("search")

        def call() -> Reply:
            self._authorize()
            return Reply(200, self.hubspot.search(object_type, self._json_body()))

        return _caught(call)

    def merge_post(self, object_type: str) -> Reply:
        self.store.count_call("merge_record")

        def call() -> Reply:
            self._authorize()
            body = self._json_body()
            merged = self.hubspot.merge(
                object_type, body.get("primaryObjectId"), body.get("objectIdToMerge")
            )
            return Reply(200, merged)

        return _caught(call)

    def property_get(self, object_type: str, name: str) -> Reply:
        self.store.count_call("get_property")

        def call() -> Reply:
            self._authorize()
            return Reply(200, self.hubspot.property_definition(object_type, unquote(name)))

        return _caught(call)

    # -- control -------------------------------------------------------------------

    def config_get(self) -> Reply:
        return Reply(200, self.hubspot.config())

    def config_post(self) -> Reply:
        return Reply(200, self.hubspot.set_config(self._json_body()))

    # -- faults in HubSpot's words --------------------------------------------------

    def fault_reply_before_commit(self, fault: Fault) -> Reply | None:
        seconds = str(max(0, math.ceil(fault.seconds)))
        if fault.mode == "http_429":
            return self._rate_limited(seconds)
        if fault.mode == "http_503":
            body = error_body("SERVICE_UNAVAILABLE", "Service Unavailable (injected)")
            return Reply(503, body, {"Retry-After": seconds})
        if fault.mode == "fail_before_commit":
            return Reply(500, error_body("INTERNAL_ERROR", "injected failure before commit"))
        if fault.mode == "http_400":
            return Reply(
                400, error_body("VALIDATION_ERROR", "Property values were not valid (injected)")
            )
        return None

    def fault_reply_after_commit(self, fault: Fault) -> Reply:
        return Reply(500, error_body("INTERNAL_ERROR", "injected failure after commit"))

    def _rate_limited(self, seconds: str) -> Reply:
        """HubSpot's 429 (https://developers.hubspot.com/docs/api/usage-details, quoted in
        community.hubspot.com m-p/511719): errorType RATE_LIMIT, policyName DAILY or
        TEN_SECONDLY_ROLLING; X-HubSpot-RateLimit-* headers (developer changelog
        2018-11-06). Retry-After only when the config asks for it."""
        config = self.hubspot.config()
        policy = config["rate_limit_policy"]
        daily = policy == "DAILY"
        body = {
            "status": "error",
            "message": f"You have reached your {policy.lower()} limit.",
            "errorType": "RATE_LIMIT",
            "correlationId": str(uuid.uuid4()),
            "policyName": policy,
            "requestId": str(uuid.uuid4()),
        }
        if daily:
            headers = {
                "X-HubSpot-RateLimit-Daily": "250000",
                "X-HubSpot-RateLimit-Daily-Remaining": "0",
            }
        else:
            headers = {
                "X-HubSpot-RateLimit-Interval-Milliseconds": "10000",
                "X-HubSpot-RateLimit-Max": "100",
                "X-HubSpot-RateLimit-Remaining": "0",
            }
        if config["retry_after_header"]:
            headers["Retry-After"] = seconds
        return Reply(429, body, headers)

    # -- plumbing ------------------------------------------------------------------

    def _authorize(self) -> None:
        """A private app's token as `Authorization: Bearer` (401 INVALID_AUTHENTICATION
        otherwise, https://developers.hubspot.com/docs/api/error-handling)."""
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        expected = self.hubspot.config()["token"]
        if scheme != "Bearer" or not token.strip():
            raise HubSpotError(
                401, "INVALID_AUTHENTICATION", "Authentication credentials not found."
            )
        if expected and token.strip() != expected:
            raise HubSpotError(
                401, "INVALID_AUTHENTICATION", "The access token provided is invalid."
            )

    def _list(self, name: str) -> list[str] | None:
        values = self.query.get(name)
        if not values:
            return None
        return [item for value in values for item in value.split(",") if item]


def _caught(call: Callable[[], Reply]) -> Reply:
    """`call`'s reply, or its refusal in HubSpot's error shape."""
    try:
        return call()
    except HubSpotError as exc:
        return exc.reply()
    except InvalidInput as exc:
        return HubSpotError(400, "VALIDATION_ERROR", exc.detail).reply()


class HubSpotEmulator(EmulatorServer):
    """`with HubSpotEmulator() as hubspot: hubspot.http_url, hubspot.hubspot.stats()`."""

    vendor: ClassVar[str] = "hubspot"
    handler_class: ClassVar[type[SandboxRequestHandler]] = HubSpotHandler
    store_class: ClassVar[type[SandboxStore]] = HubSpotStore

    @property
    def hubspot(self) -> HubSpotStore:
        if self.store is None:
            raise RuntimeError("the HubSpot emulator is not running")
        return cast(HubSpotStore, self.store)
