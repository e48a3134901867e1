"""HubSpot's objects, properties and pipelines in memory: the HubSpot emulator's state.

What is stored and how each rule is checked, with the source of each behaviour in a
comment beside it; the HTTP side (paths, authentication, limits) is in hubspot.py,
whose docstring describes the emulated API as a whole.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lab.emulators.hubspot_limits import (
    DEFAULT_LIMITS,
    NO_LIMITS,
    Limits,
    Policy,
    RequestLimiter,
    Verdict,
)
from lab.sandbox.http import Reply
from lab.sandbox.store import FAULT_MODES, InvalidInput, SandboxStore

OBJECT_TYPES = ("contacts", "deals", "tickets", "tasks")
ENQUIRY_TYPES = ("deals", "tickets")
# The private app's token the emulator accepts unless the `token` knob names another.
DEFAULT_TOKEN = "pat-na1-onefold-emulator-0000"
_SINGULAR = {"contacts": "contact", "deals": "deal", "tickets": "ticket", "tasks": "task"}
# Default properties of each object type that the adapter writes or reads
# (https://developers.hubspot.com/docs/api/crm/properties, "Default properties").
_KNOWN_PROPERTIES = {
    # `company` ("Company name") is a default contact property too: a configured
    # contact property writes it.
    "contacts": {"email", "firstname", "lastname", "phone", "company"},
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
# Custom properties a fresh account has (created by its admin, as any account's are):
# one per object the adapter writes, so that a configured custom property can be shown
# on a fresh emulator; tests create others with POST /crm/v3/properties/{objectType}.
_SEEDED_CUSTOM_PROPERTIES = {
    "contacts": {"preferred_language"},
    "deals": {"enquiry_budget"},
    "tickets": {"enquiry_budget"},
    "tasks": set(),
}
# The account's owners at start (GET /crm/v3/owners, the PublicOwner shape of the
# Owners v3 spec, crmOwners.json: id, email, type PERSON, firstName, lastName, userId,
# createdAt, updatedAt, archived); tests add others with POST /_sandbox/owners.
SEEDED_OWNERS = (
    ("41629779", "Ana", "Lima", "ana.lima@example.com"),
    ("41629780", "Ben", "Okafor", "ben.okafor@example.com"),
)
# "The maximum number of results to display per page": default 100 (crmOwners.json);
# the largest page HubSpot serves is unverified, 500 here.
OWNERS_DEFAULT_PAGE = 100
_MAX_OWNERS_PAGE = 500
# Required on create: deals dealname and dealstage (the pipeline defaults to the default
# one), https://developers.hubspot.com/docs/api/crm/deals; tickets subject and stage,
# /docs/api/crm/tickets; tasks hs_timestamp ("Required. This field marks the task's due
# date", https://developers.hubspot.com/docs/api/crm/tasks).
_REQUIRED = {
    "contacts": (),
    "deals": ("dealname", "dealstage"),
    "tickets": ("subject", "hs_pipeline_stage"),
    "tasks": ("hs_timestamp",),
}
# Enumerations the adapter writes, with their options. The tasks guide
# (https://developers.hubspot.com/docs/api/crm/tasks) lists hs_task_status "COMPLETED
# or NOT_STARTED" and sends WAITING in its own example; IN_PROGRESS and DEFERRED are
# the property's other default options in HubSpot's task editor (unverified in the
# API docs, accepted so that the emulator is never stricter than HubSpot); priority:
# "LOW, MEDIUM, or HIGH".
_OPTIONS = {
    ("tasks", "hs_task_status"): ("NOT_STARTED", "IN_PROGRESS", "WAITING", "COMPLETED", "DEFERRED"),
    ("tasks", "hs_task_priority"): ("LOW", "MEDIUM", "HIGH"),
}
# The pipeline and stage properties of the objects that have pipelines.
_PIPELINE_PROPERTIES = {
    "deals": ("pipeline", "dealstage"),
    "tickets": ("hs_pipeline", "hs_pipeline_stage"),
}
# Every account starts with one pipeline per object: deals' "default" ("Every account
# initially contains a default pipeline with the pipelineId 'default'",
# https://developers.hubspot.com/docs/methods/pipelines/pipelines_overview) with seven
# stages (https://knowledge.hubspot.com/object-settings/set-up-and-customize-pipelines:
# Appointment scheduled 20% ... Closed lost 0%), and tickets' "0" with stages 1-4
# (New, Waiting on contact, Waiting on us, Closed); GET /crm/v3/pipelines/{objectType}
# answers them in the Pipeline shape (https://developers.hubspot.com/docs/api/crm/pipelines).
_DEAL_STAGES = (
    ("appointmentscheduled", "Appointment Scheduled", "0.2"),
    ("qualifiedtobuy", "Qualified To Buy", "0.4"),
    ("presentationscheduled", "Presentation Scheduled", "0.6"),
    ("decisionmakerboughtin", "Decision Maker Bought-In", "0.8"),
    ("contractsent", "Contract Sent", "0.9"),
    ("closedwon", "Closed Won", "1.0"),
    ("closedlost", "Closed Lost", "0.0"),
)
_TICKET_STAGES = (
    ("1", "New", "OPEN"),
    ("2", "Waiting on contact", "OPEN"),
    ("3", "Waiting on us", "OPEN"),
    ("4", "Closed", "CLOSED"),
)
DEFAULT_PIPELINES = {"deals": "default", "tickets": "0"}
# HUBSPOT_DEFINED association type ids, each with its inverse (the v4 associations
# guide's table of default type ids, https://developers.hubspot.com/docs/api/crm/
# associations/associations-v4, and docs/vendor-facts.md): deal→contact 3 / contact→deal 4,
# ticket→contact 16 / 15, task→contact 204 / 203, task→deal 216 / deal→task 215,
# task→ticket 230 / 229 (this last pair from third-party tables, unverified).
ASSOCIATION_TYPES = {
    ("deals", "contacts"): 3,
    ("tickets", "contacts"): 16,
    ("tasks", "contacts"): 204,
    ("tasks", "deals"): 216,
    ("tasks", "tickets"): 230,
}
_INVERSE_TYPES = {3: 4, 16: 15, 204: 203, 216: 215, 230: 229}
DEFAULT_CONFIG: dict[str, Any] = {
    "token": DEFAULT_TOKEN,
    # hubspot_limits.py; false lifts them all.
    "rate_limits": {
        "ten_secondly": DEFAULT_LIMITS.ten_secondly,
        "daily": DEFAULT_LIMITS.daily,
        "search_per_second": DEFAULT_LIMITS.search_per_second,
    },
    # Search sees a write only this long after it ("may take a few moments", the
    # search guide's limitations; docs/vendor-facts.md).
    "search_lag_seconds": 3.0,
    "reference_property": "onefold_ref",
    # Whether the enquiry objects' reference property has unique values (tasks' never has).
    "reference_unique": True,
    # Object types on which the reference property was never created.
    "reference_missing_on": [],
    # Other unique properties, {object type: [names]}: a clash there is not ours.
    "unique_properties": {},
    # How a create or update that repeats a unique value is answered: 409 as HubSpot
    # documents for contacts, or 400, a variant its docs do not rule out.
    "unique_clash_status": 409,
    # The policy an injected http_429 answers with: TEN_SECONDLY_ROLLING or DAILY.
    "rate_limit_policy": Policy.TEN_SECONDLY_ROLLING,
    # Whether a 429 carries Retry-After (HubSpot documents none).
    "retry_after_header": False,
}
_RATE_LIMIT_NAMES = ("ten_secondly", "daily", "search_per_second", "window_seconds")
# List endpoints take limit <= 100 (objects API reference, "limit"); the v4 association
# read 500 ("Limit 500 per call", associations v4 spec); batch reads 100 inputs.
_MAX_PAGE = 100
MAX_ASSOCIATIONS_PAGE = 500
_MAX_BATCH = 100
# "the contact object type can only have a maximum of 10 unique properties", "Similar
# to the other object types" (https://developers.hubspot.com/changelog/unique-properties-for-contacts).
_MAX_UNIQUE_PROPERTIES = 10
# Objects that may have unique-value properties: "HubSpot has provided unique property
# support for Companies, Deals, Tickets, and Custom Objects" and now contacts (same
# changelog). Tasks, activities, are not among them.
_UNIQUE_CAPABLE = ("contacts", "deals", "tickets")
# RFC 5322's shape, no quotes in the local part, and a top-level domain of letters (the
# community answer "contacts integration - invalid e-mails", community.hubspot.com
# td-p/833439: RFC 2822, no quotation marks, a TLD from IANA's list; the TLD is
# checked here for its shape only, so this is more lenient than HubSpot there).
_EMAIL = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+"
    r"[A-Za-z]{2,63}"
)
# Calls counted in stats["calls"] beside the sandbox's.
_HUBSPOT_CALLS = (
    "create_contact",
    "search",
    "get_property",
    "list_properties",
    "list_owners",
    "batch_read",
    "rate_limited",
    "gdpr_delete",
)


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


def _invalid_values(problems: list[dict[str, Any]]) -> HubSpotError:
    """400 VALIDATION_ERROR with each problem in the message as JSON, as HubSpot words
    it (developer changelog "Property Validations Rules will be enforced for APIs and
    Integrations", 2023: "Property values were not valid: [{"isValid":false,...}]")."""
    listed = json.dumps(problems, separators=(",", ":"))
    return HubSpotError(400, "VALIDATION_ERROR", f"Property values were not valid: {listed}")


def _problem(name: str, message: str, error: str) -> dict[str, Any]:
    return {
        "isValid": False,
        "message": message,
        "error": error,
        "name": name,
        "localizedErrorMessage": message,
    }


def _not_an_option(name: str, value: str, options: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """INVALID_OPTION, worded as HubSpot's answer quoted in gregorspan/csc-frodx#21:
    "reports was not one of the allowed options: [PRODUCT_ISSUE, BILLING_ISSUE, ...]"."""
    return _problem(
        name,
        f"{value} was not one of the allowed options: [{', '.join(options)}]",
        "INVALID_OPTION",
    )


def _iso(stamp: float) -> str:
    moment = datetime.fromtimestamp(stamp, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def pipelines(object_type: str) -> list[dict[str, Any]]:
    """The account's pipelines of `object_type` in HubSpot's Pipeline shape."""
    created = "2020-01-01T00:00:00.000Z"
    if object_type == "deals":
        pipeline_id, label = DEFAULT_PIPELINES["deals"], "Sales Pipeline"
        stages = [
            {
                "id": s,
                "label": text,
                "metadata": {"isClosed": str(s.startswith("closed")).lower(), "probability": p},
            }
            for s, text, p in _DEAL_STAGES
        ]
    else:
        pipeline_id, label = DEFAULT_PIPELINES["tickets"], "Support Pipeline"
        stages = [
            {"id": s, "label": text, "metadata": {"ticketState": state}}
            for s, text, state in _TICKET_STAGES
        ]
    return [
        {
            "id": pipeline_id,
            "label": label,
            "displayOrder": 0,
            "archived": False,
            "createdAt": created,
            "updatedAt": created,
            "stages": [
                {
                    **stage,
                    "displayOrder": n,
                    "archived": False,
                    "createdAt": created,
                    "updatedAt": created,
                }
                for n, stage in enumerate(stages)
            ],
        }
    ]


@dataclass
class HubObject:
    id: int
    type: str
    properties: dict[str, str]
    created: float
    updated: float
    merged_into: int | None = None
    archived: bool = False
    # {to object type: {to id: association type id, in this direction}}
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

    Uniqueness (contacts by email, properties with unique values) is checked against
    the objects themselves, at once; only search sees writes late.
    """

    def __init__(self, db_path: str | None = None) -> None:
        super().__init__(db_path)
        self._objects: dict[int, HubObject] = {}
        self._next_id = 1001
        self._config: dict[str, Any] = _copied(DEFAULT_CONFIG)
        self._limiter = RequestLimiter()
        # Properties created through POST /crm/v3/properties/{type}: {(type, name): body}.
        self._created_properties: dict[tuple[str, str], dict[str, Any]] = {}
        # What PATCH /crm/v3/properties/{type}/{name} changed: {(type, name): fields}.
        self._property_edits: dict[tuple[str, str], dict[str, Any]] = {}
        self._owners: list[dict[str, Any]] = _seeded_owners()
        # GDPR deletions applied, and the addresses a deletion by email did not find.
        self._gdpr_deleted = 0
        self._blocklist: set[str] = set()

    # -- control ---------------------------------------------------------------

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self._objects.clear()
            self._next_id = 1001
            self._config = _copied(DEFAULT_CONFIG)
            self._created_properties.clear()
            self._property_edits.clear()
            self._owners = _seeded_owners()
            self._gdpr_deleted = 0
            self._blocklist.clear()
        self._limiter.reset()

    def config(self) -> dict[str, Any]:
        with self._lock:
            return _copied(self._config)

    def set_config(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(changes) - set(DEFAULT_CONFIG)
        if unknown:
            raise InvalidInput(f"unknown config: {', '.join(sorted(unknown))}")
        checks: dict[str, Callable[[Any], bool]] = {
            "token": lambda v: isinstance(v, str) and bool(v.strip()),
            "rate_limits": _valid_rate_limits,
            "search_lag_seconds": lambda v: (
                isinstance(v, int | float)
                and not isinstance(v, bool)
                and math.isfinite(v)
                and v >= 0
            ),
            "reference_property": lambda v: isinstance(v, str) and bool(v),
            "reference_unique": lambda v: isinstance(v, bool),
            "reference_missing_on": lambda v: isinstance(v, list) and set(v) <= set(OBJECT_TYPES),
            # Only objects that may have unique values (no tasks: see _UNIQUE_CAPABLE).
            "unique_properties": lambda v: (
                isinstance(v, dict)
                and all(k in _UNIQUE_CAPABLE and isinstance(n, list) for k, n in v.items())
            ),
            "unique_clash_status": lambda v: v in (409, 400) and not isinstance(v, bool),
            "rate_limit_policy": lambda v: v in (Policy.TEN_SECONDLY_ROLLING, Policy.DAILY),
            "retry_after_header": lambda v: isinstance(v, bool),
        }
        for name, value in changes.items():
            if not checks[name](value):
                raise InvalidInput(f"invalid value for {name}: {value!r}")
        with self._lock:
            for name, value in changes.items():
                if name == "rate_limits":
                    value = _merged_rate_limits(self._config["rate_limits"], value)
                self._config[name] = value
        return self.config()

    def add_fault(
        self, *, action: Any, mode: Any, times: Any = 1, seconds: Any = 1
    ) -> list[dict[str, Any]]:
        """As the sandbox's, with two more actions: create_contact, delete_contact."""
        if action not in ("create_contact", "delete_contact"):
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

    # -- authentication and limits -------------------------------------------------

    def token(self) -> str:
        with self._lock:
            return str(self._config["token"])

    def limits(self) -> Limits:
        with self._lock:
            configured = self._config["rate_limits"]
        return Limits(**configured) if configured else NO_LIMITS

    def take_request(self, token: str, *, search: bool = False) -> Verdict:
        """Counts one request against the limits (hubspot_limits.RequestLimiter.take)."""
        return self._limiter.take(token, limits=self.limits(), search=search)

    def new_day(self) -> None:
        self._limiter.new_day()

    # -- properties --------------------------------------------------------------

    def has_property(self, object_type: str, name: str) -> bool:
        config = self._config
        if (object_type, name) in self._created_properties:
            return True
        if name == config["reference_property"]:
            return object_type != "contacts" and object_type not in config["reference_missing_on"]
        return (
            name in _KNOWN_PROPERTIES[object_type]
            or name in _SEEDED_CUSTOM_PROPERTIES[object_type]
            or name in config["unique_properties"].get(object_type, [])
        )

    def property_list(self, object_type: str) -> dict[str, Any]:
        """GET /crm/v3/properties/{objectType}: every property of the type, not paged
        (CollectionResponsePropertyNoPaging, {"results": [Property]}, Properties v3 spec;
        https://developers.hubspot.com/docs/api/crm/properties, "Retrieve properties")."""
        with self._lock:
            config = self._config
            names = (
                set(_KNOWN_PROPERTIES[object_type])
                | _SEEDED_CUSTOM_PROPERTIES[object_type]
                | set(config["unique_properties"].get(object_type, []))
                | {n for (t, n) in self._created_properties if t == object_type}
            )
            if self.has_property(object_type, config["reference_property"]):
                names.add(config["reference_property"])
            return {"results": [self.property_definition(object_type, n) for n in sorted(names)]}

    # -- owners ------------------------------------------------------------------

    def owners_page(self, *, limit: int, after: str | None, email: str | None) -> dict[str, Any]:
        """GET /crm/v3/owners?limit=&after=&email=: the account's owners by id, paged
        with `paging.next.after` (CollectionResponsePublicOwnerForwardPaging, Owners v3
        spec; "To retrieve the current owners in your account, make a GET request to
        /crm/v3/owners", https://developers.hubspot.com/docs/api/crm/owners); `email`
        filters them ("Filter by email address")."""
        start = int(after) if after and after.isdigit() else 0
        with self._lock:
            rows = [
                dict(o)
                for o in sorted(self._owners, key=lambda o: int(o["id"]))
                if int(o["id"]) > start
                and (email is None or o["email"].lower() == email.strip().lower())
            ]
        page = rows[: max(1, min(limit, _MAX_OWNERS_PAGE))]
        body: dict[str, Any] = {"results": page}
        if len(rows) > len(page):
            cursor = page[-1]["id"]
            body["paging"] = {"next": {"after": cursor, "link": f"/crm/v3/owners?after={cursor}"}}
        return body

    def owner(self, owner_id: str) -> dict[str, Any]:
        """GET /crm/v3/owners/{ownerId}: one owner, 404 when there is none."""
        with self._lock:
            for owner in self._owners:
                if owner["id"] == owner_id:
                    return dict(owner)
        raise HubSpotError(404, "OBJECT_NOT_FOUND", "resource not found")

    def add_owner(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """A user added to the account (tests: POST /_sandbox/owners {"first_name",
        "last_name", "email"}): HubSpot creates its owner; its id is the next number."""
        names = {k: request.get(k) for k in ("first_name", "last_name", "email")}
        if not all(isinstance(v, str) and v.strip() for v in names.values()):
            raise InvalidInput("an owner needs first_name, last_name and email")
        with self._lock:
            next_id = max(int(o["id"]) for o in self._owners) + 1 if self._owners else 41629779
            owner = _owner_json(
                str(next_id), names["first_name"], names["last_name"], names["email"]
            )
            self._owners.append(owner)
            return dict(owner)

    def unique_properties(self, object_type: str) -> set[str]:
        config = self._config
        names = set(config["unique_properties"].get(object_type, []))
        names |= {
            n
            for (t, n), body in self._created_properties.items()
            if t == object_type and body.get("hasUniqueValue") is True
        }
        reference = config["reference_property"]
        if (
            object_type in ENQUIRY_TYPES
            and config["reference_unique"]
            and self.has_property(object_type, reference)
        ):
            names.add(reference)
        return names

    def property_definition(self, object_type: str, name: str) -> dict[str, Any]:
        """GET /crm/v3/properties/{objectType}/{propertyName}'s body, with the Property
        schema's required fields (name, label, type, fieldType, groupName, description,
        options), https://developers.hubspot.com/docs/api-reference/crm-properties-v3/
        core/get-crm-v3-properties-objectType-propertyName."""
        with self._lock:
            if not self.has_property(object_type, name):
                # Wording unverified; the status and category are the documented 404's.
                raise HubSpotError(
                    404, "OBJECT_NOT_FOUND", f"Unable to find property {name} for {object_type}"
                )
            created = self._created_properties.get((object_type, name))
            options = self._options(object_type, name)
            body: dict[str, Any] = {
                "name": name,
                "label": name.replace("_", " ").title(),
                "type": "enumeration" if options else "string",
                "fieldType": "select" if options else "text",
                "groupName": f"{_SINGULAR[object_type]}information",
                "description": "",
                "options": [
                    {
                        "label": value.replace("_", " ").title(),
                        "value": value,
                        "displayOrder": n,
                        "hidden": False,
                    }
                    for n, value in enumerate(options)
                ],
                "hasUniqueValue": name in self.unique_properties(object_type),
                "hidden": False,
                "formField": False,
                "displayOrder": -1,
                "calculated": False,
                "externalOptions": False,
                "hubspotDefined": name in _KNOWN_PROPERTIES[object_type],
                "archived": False,
                "createdAt": "2020-01-01T00:00:00.000Z",
                "updatedAt": "2020-01-01T00:00:00.000Z",
                "modificationMetadata": {
                    "archivable": True,
                    "readOnlyDefinition": False,
                    "readOnlyValue": False,
                },
            }
            if created is not None:
                body.update({k: v for k, v in created.items() if k in body})
            body.update(self._property_edits.get((object_type, name), {}))
            return body

    def create_property(self, object_type: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """POST /crm/v3/properties/{objectType} (PropertyCreate: name, label, type,
        fieldType and groupName required). hasUniqueValue is refused where HubSpot has
        no unique values (tasks: changelog "Unique Properties support for newly created
        Contact properties"), and past ten unique properties of a type; the wording of
        both refusals is this emulator's."""
        missing = [
            n for n in ("name", "label", "type", "fieldType", "groupName") if not request.get(n)
        ]
        if missing:
            raise HubSpotError(
                400, "VALIDATION_ERROR", f"Missing required fields: {', '.join(missing)}"
            )
        name = str(request["name"])
        unique = request.get("hasUniqueValue") is True
        with self._lock:
            if self.has_property(object_type, name):
                raise HubSpotError(
                    409, "CONFLICT", f"A property named {name} already exists for {object_type}"
                )
            if unique and object_type not in _UNIQUE_CAPABLE:
                raise HubSpotError(
                    400,
                    "VALIDATION_ERROR",
                    f"Unique value properties are not supported for {object_type}",
                )
            if unique and len(self.unique_properties(object_type)) >= _MAX_UNIQUE_PROPERTIES:
                raise HubSpotError(
                    400,
                    "VALIDATION_ERROR",
                    f"{object_type} already has {_MAX_UNIQUE_PROPERTIES} unique value properties",
                )
            self._created_properties[(object_type, name)] = {**request, "hasUniqueValue": unique}
        return self.property_definition(object_type, name)

    def update_property(
        self, object_type: str, name: str, changes: Mapping[str, Any]
    ) -> dict[str, Any]:
        """PATCH /crm/v3/properties/{objectType}/{propertyName} (PropertyUpdate, which has
        no hasUniqueValue: "Whether or not the property's value must be unique. Once set,
        this can't be changed", the Properties v3 spec)."""
        if "hasUniqueValue" in changes:
            raise HubSpotError(
                400, "VALIDATION_ERROR", "hasUniqueValue cannot be changed once the property exists"
            )
        editable = ("label", "description", "groupName", "hidden", "displayOrder", "formField")
        with self._lock:
            if not self.has_property(object_type, name):
                raise HubSpotError(
                    404, "OBJECT_NOT_FOUND", f"Unable to find property {name} for {object_type}"
                )
            edits = self._property_edits.setdefault((object_type, name), {})
            edits.update({k: v for k, v in changes.items() if k in editable})
        return self.property_definition(object_type, name)

    def _options(self, object_type: str, name: str) -> tuple[str, ...]:
        if (object_type, name) in _OPTIONS:
            return _OPTIONS[(object_type, name)]
        pipeline_name, stage_name = _PIPELINE_PROPERTIES.get(object_type, ("", ""))
        if name == pipeline_name:
            return tuple(p["id"] for p in pipelines(object_type))
        if name == stage_name:
            return tuple(s["id"] for p in pipelines(object_type) for s in p["stages"])
        return ()

    # -- objects -----------------------------------------------------------------

    def create(
        self, object_type: str, properties: dict[str, str], associations: list[Any]
    ) -> dict[str, Any]:
        """POST /crm/v3/objects/{objectType} (docs/vendor-facts.md)."""
        with self._lock:
            if object_type in DEFAULT_PIPELINES:
                pipeline_name = _PIPELINE_PROPERTIES[object_type][0]
                properties = {pipeline_name: DEFAULT_PIPELINES[object_type], **properties}
            self._validate(object_type, properties, current={})
            missing = [name for name in _REQUIRED[object_type] if not properties.get(name)]
            if missing:
                # As HubSpot answered in PipedreamHQ/pipedream#12366: "Error creating TASK.
                # Some required properties were not set.", context {"properties": [...]}.
                raise HubSpotError(
                    400,
                    "VALIDATION_ERROR",
                    f"Error creating {_SINGULAR[object_type].upper()}. "
                    "Some required properties were not set.",
                    context={"properties": missing},
                )
            links = self._check_associations(object_type, associations)
            self._refuse_duplicates(object_type, properties, exclude=None)
            now = time.time()
            obj = HubObject(self._next_id, object_type, dict(properties), now, now)
            self._next_id += 1
            self._objects[obj.id] = obj
            for target, type_id in links:
                obj.associations.setdefault(target.type, {})[target.id] = type_id
                target.associations.setdefault(object_type, {})[obj.id] = _INVERSE_TYPES[type_id]
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
        themselves, so a write is seen at once (docs/vendor-facts.md)."""
        with self._lock:
            obj = self._by_reference(object_type, value, id_property)
            return obj.as_json(wanted, with_associations)

    def batch_read(
        self, object_type: str, request: Mapping[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        """POST /crm/v3/objects/{objectType}/batch/read (BatchReadInputSimplePublicObjectId:
        inputs, properties, propertiesWithHistory; idProperty optional): 200
        BatchResponseSimplePublicObject, or 207 with the missing ids in `errors`
        (BatchResponseSimplePublicObjectWithErrors), per the objects v3 spec."""
        inputs = request.get("inputs")
        wanted = request.get("properties")
        if not isinstance(inputs, list) or not all(
            isinstance(i, dict) and isinstance(i.get("id"), str) for i in inputs
        ):
            raise HubSpotError(400, "VALIDATION_ERROR", "inputs must be a list of {id}")
        if wanted is not None and not (
            isinstance(wanted, list) and all(isinstance(w, str) for w in wanted)
        ):
            raise HubSpotError(400, "VALIDATION_ERROR", "properties must be a list of names")
        if len(inputs) > _MAX_BATCH:
            raise HubSpotError(
                400, "VALIDATION_ERROR", f"Batch input may contain at most {_MAX_BATCH} inputs"
            )
        started = _iso(time.time())
        id_property = request.get("idProperty")
        found, missing = [], []
        with self._lock:
            for item in inputs:
                try:
                    obj = self._by_reference(object_type, item["id"], id_property)
                except HubSpotError as exc:
                    if exc.status != 404:
                        raise
                    missing.append(item["id"])
                    continue
                found.append(obj.as_json(wanted))
        body: dict[str, Any] = {
            "status": "COMPLETE",
            "results": found,
            "startedAt": started,
            "completedAt": _iso(time.time()),
        }
        if not missing:
            return 200, body
        # "Could not get some CONTACT objects, they may be deleted or not exist" is the
        # wording integrations report for a batch read with unknown ids (unverified here).
        body["numErrors"] = 1
        body["errors"] = [
            {
                "status": "error",
                "category": "OBJECT_NOT_FOUND",
                "message": f"Could not get some {_SINGULAR[object_type].upper()} objects, "
                "they may be deleted or not exist. Check that ids are valid.",
                "context": {"ids": missing},
                "errors": [],
                "links": {},
            }
        ]
        return 207, body

    def update(
        self, object_type: str, object_id: str, properties: dict[str, str]
    ) -> dict[str, Any]:
        """PATCH /crm/v3/objects/{objectType}/{objectId}: the properties given change."""
        with self._lock:
            obj = self._by_id(object_type, object_id)
            self._validate(object_type, properties, current=obj.properties)
            self._refuse_duplicates(object_type, properties, exclude=obj.id)
            obj.properties.update(properties)
            obj.updated = time.time()
            return obj.as_json()

    def gdpr_delete(self, request: Mapping[str, Any]) -> None:
        """POST /crm/v3/objects/contacts/gdpr-delete (PublicGdprDeleteInput: `objectId`,
        optional `idProperty`; 204): "Permanently delete a contact and all associated
        content to follow GDPR ... If email address is not found, the email address will
        be added to a blocklist and prevent it from being used in the future" (HubSpot's
        Contacts v3 API, https://developers.hubspot.com/docs/api/crm/contacts,
        "Permanently delete a contact (GDPR-compliant)"; hubspot-api-client's
        PublicGdprDeleteInput). The contact is gone, not archived: no read, list or
        search finds it, and its associations go with it. An id that names no contact
        answers 404 OBJECT_NOT_FOUND (HubSpot's answer to it is unverified); a
        blocklisted address cannot be given to a new contact (the refusal's wording is
        unverified)."""
        object_id = request.get("objectId")
        id_property = request.get("idProperty")
        if not isinstance(object_id, str) or not object_id:
            raise HubSpotError(400, "VALIDATION_ERROR", "objectId is required")
        with self._lock:
            try:
                contact = self._by_reference("contacts", object_id, id_property)
            except HubSpotError as exc:
                if exc.status == 404 and id_property == "email":
                    self._blocklist.add(object_id.lower())
                    return
                raise
            del self._objects[contact.id]
            for linked in contact.associations.values():
                for other_id in linked:
                    other = self._objects.get(other_id)
                    if other is not None:
                        other.associations.get("contacts", {}).pop(contact.id, None)
            self._gdpr_deleted += 1

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

    def associations(
        self, object_type: str, object_id: str, to_type: str, *, limit: int, after: str | None
    ) -> dict[str, Any]:
        """GET /crm/v4/objects/{objectType}/{objectId}/associations/{toObjectType}
        (associations v4 spec: CollectionResponseMultiAssociatedObjectWithLabelForwardPaging,
        "Limit 500 per call"): read from the object itself, so an association made by
        a create shows at once. `label` is left out of unlabeled associations: the spec
        types it as a string and does not require it."""
        start = int(after) if after and after.isdigit() else 0
        with self._lock:
            obj = self._by_id(object_type, object_id)
            linked = sorted(
                (other_id, type_id)
                for other_id, type_id in obj.associations.get(to_type, {}).items()
                if other_id > start and self._objects[other_id].live
            )
            page = linked[: max(1, min(limit, MAX_ASSOCIATIONS_PAGE))]
            body: dict[str, Any] = {
                "results": [
                    {
                        "toObjectId": str(other_id),
                        "associationTypes": [{"category": "HUBSPOT_DEFINED", "typeId": type_id}],
                    }
                    for other_id, type_id in page
                ]
            }
            if len(linked) > len(page):
                cursor = str(page[-1][0])
                body["paging"] = {
                    "next": {
                        "after": cursor,
                        "link": f"/crm/v4/objects/{object_type}/{obj.id}/associations/"
                        f"{to_type}?after={cursor}",
                    }
                }
            return body

    def search(self, object_type: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """POST /crm/v3/objects/{objectType}/search with EQ filters. A write shows only
        `search_lag_seconds` after it was made (docs/vendor-facts.md:
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
                    back = self._objects[other_id].associations.setdefault(object_type, {})
                    back[primary.id] = back.pop(merged.id, _INVERSE_TYPES.get(type_id, type_id))
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
        result["requests"] = self._limiter.counts()
        with self._lock:
            ref = self._config["reference_property"]
            live = [o for o in self._objects.values() if o.live]
            records = [o for o in live if o.type in ENQUIRY_TYPES]
            tasks = [o for o in live if o.type == "tasks"]
            contacts = [o for o in live if o.type == "contacts"]
            result.update(records=len(records), tasks=len(tasks), contacts=len(contacts))
            result["contacts_gdpr_deleted"] = self._gdpr_deleted
            if detail:
                result["records_by_external_ref"] = _count_by(records, ref)
                result["tasks_by_external_ref"] = _count_by(tasks, ref)
                result["contacts_by_email"] = _count_by(contacts, "email")
        return result

    # -- helpers (call with the lock held) ----------------------------------------

    def _validate(
        self, object_type: str, properties: Mapping[str, Any], *, current: Mapping[str, str]
    ) -> None:
        """Every value checked at once, answered as one list, as HubSpot does: unknown
        properties (https://developers.hubspot.com/docs/api/error-handling), options of
        enumerations, the pipeline and its stage, the email's format."""
        if any(not isinstance(v, str) for v in properties.values()):
            raise HubSpotError(400, "VALIDATION_ERROR", "Property values must be strings")
        problems = [
            _problem(n, f'Property "{n}" does not exist', "PROPERTY_DOESNT_EXIST")
            for n in properties
            if not self.has_property(object_type, n)
        ]
        for (typ, name), options in _OPTIONS.items():
            value = properties.get(name)
            if typ == object_type and value is not None and value not in options:
                problems.append(_not_an_option(name, value, options))
        problems += _pipeline_problems(object_type, properties, current)
        email = properties.get("email")
        if object_type == "contacts" and email is not None and not _EMAIL.fullmatch(email):
            # INVALID_EMAIL, "Email address ... is invalid" (community.hubspot.com td-p/833439,
            # quoted in Portuguese there: "Endereço de e-mail ... inválido").
            problems.append(_problem("email", f"Email address {email} is invalid", "INVALID_EMAIL"))
        if problems:
            raise _invalid_values(problems)

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
            if email in self._blocklist:
                raise HubSpotError(
                    400, "VALIDATION_ERROR", f"Email address {email} is blocklisted (GDPR delete)"
                )
            for other in others:
                if other.properties.get("email", "").lower() == email:
                    # The id is only in the message text (docs/vendor-facts.md;
                    # hubspot-api-nodejs#545, hubspot-api-php#59).
                    raise HubSpotError(
                        409, "CONFLICT", f"Contact already exists. Existing ID: {other.id}"
                    )
        for name in sorted(self.unique_properties(object_type)):
            value = properties.get(name)
            holder = next((o for o in others if value and o.properties.get(name) == value), None)
            if holder is not None:
                text = (
                    f"A {_SINGULAR[object_type]} with {name} {value} already exists. "
                    f"Existing ID: {holder.id}"
                )
                raise _unique_clash(name, text, status=self._config["unique_clash_status"])

    def _by_reference(self, object_type: str, value: str, id_property: Any) -> HubObject:
        if id_property in (None, "hs_object_id"):
            return self._by_id(object_type, value)
        return self._by_unique_value(object_type, str(id_property), value)

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


def _owner_json(owner_id: str, first: Any, last: Any, email: Any) -> dict[str, Any]:
    created = "2024-01-15T09:00:00.000Z"
    return {
        "id": owner_id,
        "email": str(email),
        "type": "PERSON",
        "firstName": str(first),
        "lastName": str(last),
        "userId": int(owner_id) % 10_000_000,
        "userIdIncludingInactive": int(owner_id) % 10_000_000,
        "createdAt": created,
        "updatedAt": created,
        "archived": False,
        "teams": [],
    }


def _seeded_owners() -> list[dict[str, Any]]:
    return [_owner_json(*owner) for owner in SEEDED_OWNERS]


def _copied(config: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy (the config holds lists and dicts, all JSON)."""
    copied: dict[str, Any] = json.loads(json.dumps(config))
    return copied


def _valid_rate_limits(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if not isinstance(value, dict) or not set(value) <= set(_RATE_LIMIT_NAMES):
        return False
    window = value.get("window_seconds", 1.0)
    if not isinstance(window, int | float) or isinstance(window, bool) or not window > 0:
        return False
    return all(
        v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0)
        for name, v in value.items()
        if name != "window_seconds"
    )


def _merged_rate_limits(current: Any, value: Any) -> Any:
    """False lifts every limit, True puts HubSpot's back, a dict changes those it names."""
    if value is False:
        return False
    defaults = DEFAULT_CONFIG["rate_limits"]
    if value is True:
        return dict(defaults)
    return {**(current or defaults), **value}


def _unique_clash(name: str, text: str, *, status: int) -> HubSpotError:
    """A repeated unique value. 409 names the property in errors[].in, as HubSpot's newer
    409 bodies do (community.hubspot.com "Updated 409 Conflict responses", m-p/951534);
    the wording for a custom unique property is unverified. The 400 variant is the
    validation shape with the property named and the clash in its message: the shape a
    400 from HubSpot would plausibly have, since its docs do not rule one out."""
    if status == 409:
        return HubSpotError(409, "CONFLICT", text, errors=[{"message": text, "in": name}])
    error = _invalid_values([_problem(name, text, "DUPLICATE_VALUE")])
    error.extra["errors"] = [{"message": text, "in": name, "code": "DUPLICATE_VALUE"}]
    return error


def _pipeline_problems(
    object_type: str, properties: Mapping[str, str], current: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The pipeline must exist and the stage be one of its stages."""
    if object_type not in _PIPELINE_PROPERTIES:
        return []
    pipeline_name, stage_name = _PIPELINE_PROPERTIES[object_type]
    known = {p["id"]: p for p in pipelines(object_type)}
    pipeline_id = properties.get(pipeline_name) or current.get(pipeline_name)
    pipeline = known.get(pipeline_id or DEFAULT_PIPELINES[object_type])
    if pipeline is None:
        return [_not_an_option(pipeline_name, str(pipeline_id), list(known))]
    stages = [s["id"] for s in pipeline["stages"]]
    stage = properties.get(stage_name)
    if stage is not None and stage not in stages:
        return [_not_an_option(stage_name, stage, stages)]
    return []


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
