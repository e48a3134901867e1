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
freshness is undocumented (docs/vendor-facts.md, Pipedrive). So the adapter claims
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
(pipedrive.readme.io/docs/core-api-concepts-authentication), or an OAuth access
token as ``Authorization: Bearer``; the emulator's are ``DEFAULT_API_TOKEN`` and
``DEFAULT_ACCESS_TOKEN`` unless ``/_sandbox/config`` changes them. Any other: 401
``{"success": false, "error": "unauthorized access", "errorCode": 401, ...}``
(the `unathorizedResponse` of Pipedrive's OpenAPI document).

Rate limits
===========

As pipedrive.readme.io/docs/core-api-concepts-rate-limiting describes them, on
by default (``rate_limits``):

* **Daily token budget** of the company: "30,000 base tokens x subscription plan
  multiplier x number of seats" (Lite 1, Growth 2, Premium 5, Ultimate 7); each
  request spends its endpoint's cost in tokens (``x-token-cost`` in Pipedrive's
  OpenAPI documents: v2 POST persons 5, v2 searches 20, POST /v1/leads 10, ...).
  "Once the daily budget is fully depleted, all further API requests will be
  rejected with a 429 ... until the budget resets the following day", at
  midnight in the server's time zone (``budget_timezone``, UTC here).
* **Burst limits**, "per token" on "a rolling 2-second window": Lite 20 requests
  with an api_token, 80 with an OAuth token (Growth 40/160, Premium 100/400,
  Ultimate 120/480); "the Search API has unique burst limits": 10 per 2 seconds.
* Every answer carries ``x-ratelimit-limit``, ``x-ratelimit-remaining`` and
  ``x-ratelimit-reset`` (seconds until room comes back) of the 2-second window
  the request counted in (the search window for searches). A burst refusal
  shows that window with no room left; a budget refusal shows a window with room
  (the page names no header of the budget, so that is how a client tells them
  apart). Both are 429 ``"Request over limit"`` (the page shows no body); a
  refused request spends no tokens.

Knobs (``/_sandbox/config``): ``plan`` (``lite``), ``seats`` (1),
``daily_token_budget`` (null: the formula; a number: another budget, as a top-up
would make it), ``burst_limit`` and ``search_burst_limit`` (null: the plan's),
``rate_limits`` (false lifts all three).
Successes are ``{"success": true, "data": ..., "additional_data"?: ...}``;
refusals ``{"success": false, "error", "error_info", "data": null,
"additional_data": null}`` (client-nodejs v1 models/lead-not-found-response.ts).
Timestamps are ISO 8601 UTC with a ``Z``.

Vendor API
==========

``POST /api/v2/persons`` ``{"name", "emails": [{"value", "primary", "label"}], "phones"?,
"custom_fields"?}``
    200 with the person (``id`` an integer). No uniqueness: the same email twice
    is two persons, as in Pipedrive (docs/vendor-facts.md: concurrent webhooks made 2-3
    copies of a contact). ``custom_fields`` holds values by person field key; a key
    naming no person field is 400 (Pipedrive's answer to that is unverified).

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
    models/field.ts). Leads take the deals' custom fields, which this lists
    (https://developers.pipedrive.com/docs/api/v1/LeadFields).

``GET /v1/personFields?start=&limit=``
    The person's own fields and the custom ones (``person_fields``: by default
    "Preferred language", ``LANGUAGE_FIELD_KEY``), paged by ``start`` and ``limit``
    (100 by default, 500 at most) with ``additional_data.pagination``
    (https://developers.pipedrive.com/docs/api/v1/PersonFields).

``GET /v1/users``
    Every user of the company, not paged (https://developers.pipedrive.com/docs/api/v1/Users):
    ``id``, ``name``, ``email``, ``active_flag``, ...; at start 1 Onefold Integration
    (the token's user), 2 Ana Lima (ana.lima@example.com), 3 Ben Okafor
    (ben.okafor@example.com). An activity's ``owner_id`` is stored as given.

``POST /api/v2/activities`` ``{"subject", "type", "lead_id", "note", "owner_id"?, ...}``
    200 with the activity (``id`` an integer); 404 when ``lead_id`` names no
    lead. ``type`` must be the ``key_string`` of one of the company's activity
    types (``activity_types``: Pipedrive's default call, meeting, task, deadline,
    email, lunch; pipedrive.readme.io/docs/adding-an-activity); numbers must be
    JSON numbers ("Numeric fields no longer coerce string input to number and
    instead throw a validation error", pipedrive-api-v2-migration-guide): 400
    otherwise. Faultable as ``create_task``.

``GET /api/v2/activities?lead_id=&limit=&cursor=``
    The lead's activities by id, ``additional_data.next_cursor``. A filtered
    list, read from the store: no lag.

``GET /api/v2/activities/<id>``
    200 activity, 404. ``DELETE``: 200 ``{"id"}``, the activity gone; 404.

``DELETE /v1/persons/<id>``
    200 ``{"id"}``: the person marked deleted, its details gone, 404 to reads,
    searches and a second delete
    (https://developers.pipedrive.com/docs/api/v1/Persons#deletePerson: "Marks a
    person as deleted. After 30 days, the person will be permanently deleted").
    Faultable as ``delete_person``; stats count ``persons`` (live) and
    ``persons_deleted``.

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
``/_sandbox/stats`` (``daily_tokens_left``: the day's budget left; records: live
leads; tasks: activities of live leads;
``records_by_external_ref`` by the value of the reference field,
``tasks_by_external_ref`` by the "Onefold reference: KEY" line of the
activity's note; messages always 0; ``calls`` adds ``create_person`` and
``lookup_person``), and:

``GET|POST /_sandbox/config``
    ``{"search_lag_seconds": 1.0, "api_token": "...", "lead_fields": [{"key",
    "name", "field_type"}], "reference_field": "<key stats count by>"}``.
    POST changes any of them (400 for unknown keys or bad values);
    ``lead_fields`` replaces the custom lead fields, by default the reference
    field (``REFERENCE_FIELD_KEY``, varchar), a message field
    (``MESSAGE_FIELD_KEY``, text) and "Budget" (``BUDGET_FIELD_KEY``); ``[]``: all
    are gone; ``field_type: "enum"``: the field exists but search cannot find it.
    ``person_fields`` replaces the custom person fields likewise.
    ``POST /_sandbox/owners`` ``{"first_name", "last_name", "email"}`` adds an active
    user (the next id).
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
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lab.emulators.kit import EmulatorServer
from lab.emulators.limits import RollingWindow
from lab.sandbox.http import CONTROL_ROUTES, Reply, Route, SandboxRequestHandler
from lab.sandbox.store import Fault, InvalidInput, NotFound, SandboxStore

DEFAULT_API_TOKEN = "pipedrive-emulator-token"
DEFAULT_ACCESS_TOKEN = "pipedrive-emulator-oauth-access-token"
# pipedrive.readme.io/docs/core-api-concepts-rate-limiting: plan multiplier of the daily
# token budget, and burst requests per 2 seconds with an api_token and with OAuth.
PLANS: dict[str, tuple[int, int, int]] = {
    "lite": (1, 20, 80),
    "growth": (2, 40, 160),
    "premium": (5, 100, 400),
    "ultimate": (7, 120, 480),
}
BASE_TOKENS = 30_000
BURST_SECONDS = 2.0
SEARCH_BURST_LIMIT = 10
# Pipedrive's default activity types (their key_string); ActivityTypes lists a company's.
DEFAULT_ACTIVITY_TYPES = ("call", "meeting", "task", "deadline", "email", "lunch")
# Fields of an activity that v2 takes as numbers only (pipedrive-api-v2-migration-guide).
_ACTIVITY_NUMBERS = ("owner_id", "deal_id", "person_id", "org_id", "project_id", "priority")
# Custom field keys are 40 hex characters, generated by Pipedrive when the field is
# created (client-nodejs v1 models/field.ts: "For custom fields this is generated upon
# creation"). The emulator's reference field has a fixed one so that tests can name it.
REFERENCE_FIELD_KEY = hashlib.sha1(b"onefold reference").hexdigest()
REFERENCE_FIELD_NAME = "Onefold reference"
MESSAGE_FIELD_KEY = hashlib.sha1(b"onefold message").hexdigest()
# A custom field of each kind a fresh company has beside Onefold's own: the lead's
# "Budget" and the person's "Preferred language" (custom fields are named by people and
# keyed by Pipedrive: https://pipedrive.readme.io/docs/core-api-concepts-custom-fields).
BUDGET_FIELD_KEY = hashlib.sha1(b"onefold budget").hexdigest()
LANGUAGE_FIELD_KEY = hashlib.sha1(b"onefold preferred language").hexdigest()
# The company's users at start (GET /v1/users, https://developers.pipedrive.com/docs/api/v1/Users:
# id, name, email, active_flag, ...): the token's own user, id 1, owns what it creates.
SEEDED_USERS = (
    (1, "Onefold Integration", "integration@example.com"),
    (2, "Ana Lima", "ana.lima@example.com"),
    (3, "Ben Okafor", "ben.okafor@example.com"),
)
# v1 field lists page by start and limit (additional_data.pagination, "limit" at most
# 500: https://pipedrive.readme.io/docs/core-api-concepts-pagination).
_FIELDS_PAGE_MAX = 500
# Search freshness is undocumented (docs/vendor-facts.md, Pipedrive).
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
        {"key": BUDGET_FIELD_KEY, "name": "Budget", "field_type": "varchar"},
    ]


def default_person_fields() -> list[dict[str, Any]]:
    """The custom person fields a fresh emulator has."""
    return [{"key": LANGUAGE_FIELD_KEY, "name": "Preferred language", "field_type": "varchar"}]


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

    extra_fault_actions = ("delete_person",)

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
                "access_token": DEFAULT_ACCESS_TOKEN,
                "lead_fields": default_lead_fields(),
                "person_fields": default_person_fields(),
                "reference_field": REFERENCE_FIELD_KEY,
                "activity_types": list(DEFAULT_ACTIVITY_TYPES),
                "rate_limits": True,
                "plan": "lite",
                "seats": 1,
                "daily_token_budget": None,
                "burst_limit": None,
                "search_burst_limit": None,
                "budget_timezone": "UTC",
            }
            self._bursts = {
                "api": RollingWindow(0, BURST_SECONDS),
                "search": RollingWindow(0, BURST_SECONDS),
            }
            self._budget_day: date | None = None
            self._tokens_spent = 0
            self._persons: dict[int, dict[str, Any]] = {}
            self._users: list[dict[str, Any]] = [_user(*user) for user in SEEDED_USERS]
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
        for name in ("lead_fields", "person_fields"):
            if name in cleaned:
                cleaned[name] = _clean_fields(cleaned[name])
        for name in ("api_token", "access_token", "reference_field"):
            if name in cleaned and not isinstance(cleaned[name], str):
                raise InvalidInput(f"{name} must be a string")
        _check_limit_config(cleaned)
        with self._lock:
            self.config.update(cleaned)
            return dict(self.config)

    # -- rate limits (pipedrive.readme.io/docs/core-api-concepts-rate-limiting) -----------

    def admit(self, token: str, *, kind: str, cost: int, search: bool) -> Admission:
        """One request of `token` (an api_token or OAuth `kind`) costing `cost` tokens:
        counted in its 2-second window, then charged to the day's budget. A refusal
        spends no tokens."""
        with self._lock:
            if not self.config["rate_limits"]:
                return Admission(headers={})
            window = self._bursts["search" if search else "api"]
            window.limit = self._burst_limit(kind, search=search)
            waited = window.take(token)
            headers = {
                "x-ratelimit-limit": str(window.limit),
                "x-ratelimit-remaining": str(window.remaining(token)),
                "x-ratelimit-reset": str(window.reset_seconds(token)),
            }
            if waited is not None:
                return Admission(headers=headers, refused=True)
            self._roll_budget_day()
            if self._tokens_spent + cost > self._daily_budget():
                return Admission(headers=headers, refused=True)
            self._tokens_spent += cost
            return Admission(headers=headers)

    def tokens_left(self) -> int:
        with self._lock:
            self._roll_budget_day()
            return max(0, self._daily_budget() - self._tokens_spent)

    def _burst_limit(self, kind: str, *, search: bool) -> int:
        if search:
            override = self.config["search_burst_limit"]
            return int(override) if override is not None else SEARCH_BURST_LIMIT
        override = self.config["burst_limit"]
        if override is not None:
            return int(override)
        _, api_token, oauth = PLANS[self.config["plan"]]
        return oauth if kind == "oauth" else api_token

    def _daily_budget(self) -> int:
        override = self.config["daily_token_budget"]
        if override is not None:
            return int(override)
        multiplier, _, _ = PLANS[self.config["plan"]]
        return BASE_TOKENS * multiplier * int(self.config["seats"])

    def _roll_budget_day(self) -> None:
        """ "Tokens budget resets at midnight at server's timezone"."""
        today = datetime.now(ZoneInfo(self.config["budget_timezone"])).date()
        if today != self._budget_day:
            self._budget_day, self._tokens_spent = today, 0

    def custom_lead_fields(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {field["key"]: field for field in self.config["lead_fields"]}

    def custom_person_fields(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {field["key"]: field for field in self.config["person_fields"]}

    # -- users ---------------------------------------------------------------

    def users(self) -> list[dict[str, Any]]:
        """GET /v1/users: "Returns data about all users within the company" (not paged,
        https://developers.pipedrive.com/docs/api/v1/Users#getUsers)."""
        with self._lock:
            return [dict(user) for user in self._users]

    def add_user(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """A user added to the company (tests: POST /_sandbox/owners {"first_name",
        "last_name", "email"}), active, with the next id."""
        names = [request.get(k) for k in ("first_name", "last_name", "email")]
        if not all(isinstance(v, str) and v.strip() for v in names):
            raise InvalidInput("an owner needs first_name, last_name and email")
        with self._lock:
            user = _user(
                max(u["id"] for u in self._users) + 1, f"{names[0]} {names[1]}", str(names[2])
            )
            self._users.append(user)
            return dict(user)

    # -- persons -------------------------------------------------------------

    def create_person(self, body: Mapping[str, Any]) -> dict[str, Any]:
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            raise PipedriveError(400, "Name must be given.")
        emails = _contact_list(body.get("emails"), "emails")
        phones = _contact_list(body.get("phones"), "phones")
        custom = body.get("custom_fields") or {}
        if not isinstance(custom, dict):
            raise PipedriveError(400, "Validation failed: custom_fields: Expected object")
        # v2 persons take custom field values under `custom_fields`, by key
        # (client-nodejs v2 models/add-person-request.ts); a key naming no person field
        # is refused here (Pipedrive's answer to it is unverified).
        unknown = sorted(set(custom) - set(self.custom_person_fields()))
        if unknown:
            raise PipedriveError(
                400, f"Validation failed: custom_fields: unknown field {', '.join(unknown)}"
            )
        with self._lock:
            person_id = len(self._persons) + 1
            now = _now()
            person = {
                "id": person_id,
                "name": name,
                "emails": emails,
                "phones": phones,
                "owner_id": 1,
                "custom_fields": dict(custom),
                "add_time": now,
                "update_time": now,
            }
            self._persons[person_id] = person
            self._to_index("person", person_id, {"email": [e["value"] for e in emails]})
            return dict(person)

    def get_person(self, person_id: int) -> dict[str, Any]:
        with self._lock:
            person = self._persons.get(person_id)
            if person is None or person.get("is_deleted"):
                raise PipedriveError(404, "Person not found")
            return dict(person)

    def delete_person(self, person_id: int) -> None:
        """DELETE /v1/persons/{id}: "Marks a person as deleted. After 30 days, the person
        will be permanently deleted" (https://developers.pipedrive.com/docs/api/v1/Persons#deletePerson).
        Here the person's details go at once and the row stays, marked, so ids are never
        reused; a deleted person is 404 to reads, searches and a second delete (what
        Pipedrive answers within the 30 days is unverified)."""
        with self._lock:
            person = self._persons.get(person_id)
            if person is None or person.get("is_deleted"):
                raise PipedriveError(404, "Person not found")
            self._persons[person_id] = {
                "id": person_id,
                "is_deleted": True,
                "update_time": _now(),
            }
            self._index.pop(("person", person_id), None)

    def delete_activity(self, activity_id: int) -> None:
        """DELETE /api/v2/activities/{id}: "Marks an activity as deleted. After 30 days, the
        activity will be permanently deleted" (https://developers.pipedrive.com/docs/api/v1/Activities#deleteActivity);
        gone at once here."""
        with self._lock:
            if self._activities.pop(activity_id, None) is None:
                raise PipedriveError(404, "Activity not found")

    def search_persons(self, term: str, *, exact: bool) -> list[dict[str, Any]]:
        found = self._search("person", "email", term, exact=exact)
        with self._lock:
            persons = [
                self._persons[pid]
                for pid in found
                if pid in self._persons and not self._persons[pid].get("is_deleted")
            ]
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

    def check_activity(self, body: Mapping[str, Any]) -> None:
        """v2's validation of an activity, storing nothing (the module's docstring)."""
        kind = body.get("type")
        if kind is not None and kind not in self.config["activity_types"]:
            raise PipedriveError(400, f"Validation failed: type: {kind!r} is not an activity type")
        for name in _ACTIVITY_NUMBERS:
            value = body.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise PipedriveError(400, f"Validation failed: {name}: Expected number")
        if body.get("lead_id") is not None and not isinstance(body["lead_id"], str):
            raise PipedriveError(400, "Validation failed: lead_id: Expected string")

    def create_activity(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.check_activity(body)
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
        result["calls"] = {
            **dict.fromkeys(("create_person", "lookup_person", "delete_person"), 0),
            **base["calls"],
        }
        with self._lock:
            persons = list(self._persons.values())
        result["persons"] = sum(1 for p in persons if not p.get("is_deleted"))
        result["persons_deleted"] = sum(1 for p in persons if p.get("is_deleted"))
        result["daily_tokens_left"] = self.tokens_left()
        return result

    # -- plumbing ------------------------------------------------------------

    def _require_person(self, person_id: Any) -> None:
        if person_id is not None and (
            person_id not in self._persons or self._persons[person_id].get("is_deleted")
        ):
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
        """The search index takes a write only after the configured lag (docs/vendor-facts.md,
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


def _user(user_id: int, name: str, email: str) -> dict[str, Any]:
    # The User shape of GET /v1/users (https://developers.pipedrive.com/docs/api/v1/Users).
    return {
        "id": user_id,
        "name": name,
        "email": email,
        "active_flag": True,
        "is_admin": 1 if user_id == 1 else 0,
        "role_id": 1,
        "timezone_name": "Europe/London",
        "lang": 1,
        "locale": "en_GB",
        "created": "2024-01-15 09:00:00",
        "modified": "2024-01-15 09:00:00",
        "has_created_company": user_id == 1,
        "icon_url": None,
        "is_you": user_id == 1,
    }


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


@dataclass(frozen=True)
class Admission:
    """A request's standing against the rate limits: the x-ratelimit-* headers of its
    2-second window, and whether a limit refused it."""

    headers: dict[str, str]
    refused: bool = False


def _check_limit_config(changes: Mapping[str, Any]) -> None:
    if "rate_limits" in changes and not isinstance(changes["rate_limits"], bool):
        raise InvalidInput("rate_limits must be true or false")
    if "plan" in changes and changes["plan"] not in PLANS:
        raise InvalidInput(f"plan must be one of {', '.join(PLANS)}")
    for name in ("seats", "daily_token_budget", "burst_limit", "search_burst_limit"):
        value = changes.get(name)
        nullable = name != "seats"
        if name in changes and not (
            (value is None and nullable)
            or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
        ):
            raise InvalidInput(f"{name} must be a whole number >= 0")
    if "activity_types" in changes:
        types = changes["activity_types"]
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise InvalidInput("activity_types must be a list of key strings")
    if "budget_timezone" in changes:
        try:
            ZoneInfo(str(changes["budget_timezone"]))
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidInput("budget_timezone must be an IANA time zone") from None


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
    (re.compile(r"/v1/persons/(?P<person_id>\d+)"), {"DELETE": "person_delete"}),
    (re.compile(r"/v1/leads"), {"GET": "leads_get", "POST": "leads_post"}),
    (re.compile(r"/api/v2/leads/search"), {"GET": "leads_search"}),
    (
        re.compile(r"/v1/leads/(?P<lead_id>[^/]+)"),
        {"GET": "lead_get", "PATCH": "lead_patch", "DELETE": "lead_delete"},
    ),
    (re.compile(r"/v1/leadFields"), {"GET": "lead_fields_get"}),
    (re.compile(r"/v1/personFields"), {"GET": "person_fields_get"}),
    (re.compile(r"/v1/users"), {"GET": "users_get"}),
    (re.compile(r"/_sandbox/owners"), {"POST": "owners_post"}),
    (re.compile(r"/api/v2/activities"), {"GET": "activities_get", "POST": "activities_post"}),
    (
        re.compile(r"/api/v2/activities/(?P<activity_id>\d+)"),
        {"GET": "activity_get", "DELETE": "activity_delete"},
    ),
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

    def _vendor(self, work: Callable[[], Reply], *, cost: int, search: bool = False) -> Reply:
        """Authenticates, admits the request under the rate limits (`cost`: the
        endpoint's x-token-cost), then runs `work`, answering refusals in Pipedrive's
        words; every admitted answer carries the x-ratelimit-* headers."""
        credential = self._credential()
        if credential is None:
            reply = _failure(401, "unauthorized access")
            reply.body["errorCode"] = 401
            return reply
        token, kind = credential
        admission = self.pipedrive.admit(token, kind=kind, cost=cost, search=search)
        if admission.refused:
            return _failure(429, "Request over limit", admission.headers)
        reply = self._answer(work)
        for name, value in admission.headers.items():
            reply.headers.setdefault(name, value)
        return reply

    def _credential(self) -> tuple[str, str] | None:
        """The request's token and its kind ("api_token" or "oauth"), when it is one the
        company issued. "The API token must be provided in the x-api-token header" or,
        as before, the api_token query parameter; an OAuth app sends its access token as
        a bearer (pipedrive.readme.io/docs/core-api-concepts-authentication)."""
        config = self.pipedrive.config
        scheme, _, bearer = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer":
            return (bearer, "oauth") if bearer == config["access_token"] else None
        token = self.headers.get("x-api-token") or self._param("api_token")
        return (token, "api_token") if token and token == config["api_token"] else None

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
        # x-token-cost: 5 (v2 POST /persons) in Pipedrive's OpenAPI documents, as below.
        return self._vendor(
            lambda: self._ok(self.pipedrive.create_person(self._json_body())), cost=5
        )

    def persons_search(self) -> Reply:
        def work() -> Reply:
            self.store.count_call("lookup_person")
            term, exact = self._search_term()
            fields = self._param("fields") or "email"
            items = self.pipedrive.search_persons(term, exact=exact) if "email" in fields else []
            return self._ok({"items": items}, next_cursor=None)

        return self._vendor(work, cost=20, search=True)

    def person_get(self, person_id: str) -> Reply:
        return self._vendor(lambda: self._ok(self.pipedrive.get_person(int(person_id))), cost=1)

    def person_delete(self, person_id: str) -> Reply:
        """200 ``{"success": true, "data": {"id"}}`` (client-nodejs v1 persons-api.ts,
        deletePerson); faultable as ``delete_person``."""
        self.store.count_call("delete_person")

        def work() -> Reply:
            def delete() -> Reply:
                self.pipedrive.delete_person(int(person_id))
                return self._ok({"id": int(person_id)})

            return self._faulted("delete_person", lambda: self._answer(delete))

        return self._vendor(work, cost=6)

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

        return self._vendor(work, cost=10)

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

        return self._vendor(work, cost=20)

    def leads_search(self) -> Reply:
        def work() -> Reply:
            self.store.count_call("lookup_record")
            term, exact = self._search_term()
            fields = self._param("fields") or "custom_fields,notes,title"
            items = self.pipedrive.search_leads(term, exact=exact) if "custom" in fields else []
            # data.items[{result_score, item}], additional_data.next_cursor
            # (client-nodejs v2 models/get-lead-search-response-data.ts).
            return self._ok({"items": items}, next_cursor=None)

        return self._vendor(work, cost=20, search=True)

    def lead_get(self, lead_id: str) -> Reply:
        return self._vendor(lambda: self._ok(self.pipedrive.get_lead(lead_id)), cost=2)

    def lead_patch(self, lead_id: str) -> Reply:
        self.store.count_call("update_record")
        return self._vendor(
            lambda: self._ok(self.pipedrive.update_lead(lead_id, self._json_body())), cost=10
        )

    def lead_delete(self, lead_id: str) -> Reply:
        self.store.count_call("delete_record")

        def work() -> Reply:
            self.pipedrive.delete_lead(lead_id)
            return self._ok({"id": lead_id})

        return self._vendor(work, cost=6)

    def lead_fields_get(self) -> Reply:
        def work() -> Reply:
            fields = _system_lead_fields() + [
                _field_view(field, index)
                for index, field in enumerate(self.pipedrive.config["lead_fields"], start=100)
            ]
            return self._ok(fields, start=0, limit=len(fields), more_items_in_collection=False)

        # "Get list of entities": 20 (the rate-limiting page's table of costs).
        return self._vendor(work, cost=20)

    def person_fields_get(self) -> Reply:
        """GET /v1/personFields?start=&limit=: the person's own fields and the custom
        ones, paged (additional_data.pagination {start, limit, more_items_in_collection};
        https://developers.pipedrive.com/docs/api/v1/PersonFields#getPersonFields)."""

        def work() -> Reply:
            start = self._int_param("start", 0, maximum=10**9)
            limit = self._int_param("limit", 100, maximum=_FIELDS_PAGE_MAX) or 100
            fields = _system_person_fields() + [
                _field_view(field, index)
                for index, field in enumerate(self.pipedrive.config["person_fields"], start=100)
            ]
            page = fields[start : start + limit]
            more = start + limit < len(fields)
            pagination: dict[str, Any] = {
                "start": start,
                "limit": limit,
                "more_items_in_collection": more,
            }
            if more:
                pagination["next_start"] = start + limit
            return self._ok(page, pagination=pagination)

        return self._vendor(work, cost=20)

    def users_get(self) -> Reply:
        # "Get all users", cost 20 (https://developers.pipedrive.com/docs/api/v1/Users).
        return self._vendor(lambda: self._ok(self.pipedrive.users()), cost=20)

    def owners_post(self) -> Reply:
        return self._answer(lambda: self._ok(self.pipedrive.add_user(self._json_body())))

    # -- activities ----------------------------------------------------------

    def activities_post(self) -> Reply:
        self.store.count_call("create_task")

        def work() -> Reply:
            body = self._json_body()
            self.pipedrive.check_activity(body)
            if body.get("lead_id") is not None:
                self.pipedrive.get_lead(str(body["lead_id"]))  # 404 before any fault
            return self._faulted(
                "create_task",
                lambda: self._answer(lambda: self._ok(self.pipedrive.create_activity(body))),
            )

        return self._vendor(work, cost=5)

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

        return self._vendor(work, cost=10)

    def activity_get(self, activity_id: str) -> Reply:
        return self._vendor(lambda: self._ok(self.pipedrive.get_activity(int(activity_id))), cost=1)

    def activity_delete(self, activity_id: str) -> Reply:
        """200 ``{"success": true, "data": {"id"}}`` (client-nodejs v2 activities-api.ts,
        deleteActivity)."""
        self.store.count_call("delete_task")

        def work() -> Reply:
            self.pipedrive.delete_activity(int(activity_id))
            return self._ok({"id": int(activity_id)})

        return self._vendor(work, cost=6)

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
            # (pipedrive.readme.io/docs/core-api-concepts-rate-limiting).
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


def _system_person_fields() -> list[dict[str, Any]]:
    """A few of the person's own fields, as GET /v1/personFields lists them."""
    names = [
        ("name", "Name", "varchar"),
        ("email", "Email", "varchar"),
        ("phone", "Phone", "phone"),
        ("org_id", "Organization", "org"),
        ("owner_id", "Owner", "user"),
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
