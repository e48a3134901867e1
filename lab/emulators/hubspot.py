"""A local HubSpot: the CRM v3 objects, properties and pipelines APIs and the v4
association reads, as strict as HubSpot documents them.

Each emulated behaviour names its source in a comment beside it: the HTTP side
(paths, the token, answers) here, the objects and their rules in hubspot_store.py,
the request limits in hubspot_limits.py; docs/vendor-facts.md is the
summary. State is kept in memory under the store's lock; the sandbox's fault queue,
chaos and call counters come with `SandboxStore` (lab/emulators/kit.py).

Running it
==========

In process (tests)::

    from lab.emulators.hubspot import DEFAULT_TOKEN, HubSpotEmulator

    with HubSpotEmulator() as hubspot:          # port 0: a free port
        hubspot.http_url                        # http://127.0.0.1:PORT
        hubspot.adapter_env()                   # HUBSPOT_BASE_URL and HUBSPOT_TOKEN
        hubspot.hubspot.set_config({"search_lag_seconds": 0})

Every HubSpot path needs ``Authorization: Bearer <the emulator's token>``
(``DEFAULT_TOKEN`` unless the ``token`` knob says otherwise); anything else
answers 401 ``INVALID_AUTHENTICATION``.

HubSpot API (what the adapter calls)
====================================

Object types: ``contacts``, ``deals``, ``tickets``, ``tasks``. Ids are numbers
(strings in JSON), one counter for all types, from 1001. An object is::

    {"id": "1002", "properties": {..., "hs_object_id", "createdate",
     "hs_lastmodifieddate"}, "createdAt": "...Z", "updatedAt": "...Z",
     "archived": false[, "associations": {"contacts": {"results": [{"id", "type"}]}}]}

Errors have HubSpot's shape ``{"status": "error", "message", "correlationId",
"category"}`` (plus ``errors`` or ``context`` where noted). Invalid values answer
400 ``VALIDATION_ERROR`` "Property values were not valid: [{"isValid": false,
"message", "error", "name"}, ...]" (``PROPERTY_DOESNT_EXIST``, ``INVALID_OPTION``,
``INVALID_EMAIL``); a missing required property answers "Error creating DEAL. Some
required properties were not set." with ``context.properties``.

Every answer to an authenticated request carries ``X-HubSpot-RateLimit-Max``,
``-Remaining``, ``-Interval-Milliseconds``, ``-Daily`` and ``-Daily-Remaining``;
past a limit, 429 ``{"status": "error", "message": "You have reached your
ten_secondly_rolling limit.", "errorType": "RATE_LIMIT", "policyName":
"TEN_SECONDLY_ROLLING" (or DAILY, or SECONDLY for search), "correlationId",
"requestId"}`` (hubspot_limits.py).

``POST /crm/v3/objects/{type}`` ``{"properties": {...}, "associations": [{"to": {"id"},
"types": [{"associationCategory": "HUBSPOT_DEFINED", "associationTypeId"}]}]}``
    201 with the object. Required: deals ``dealname`` and ``dealstage``; tickets
    ``subject`` and ``hs_pipeline_stage``; tasks ``hs_timestamp``. A deal's
    ``pipeline`` (default ``default``) and ``dealstage``, a ticket's ``hs_pipeline``
    (default ``0``) and ``hs_pipeline_stage`` must name a pipeline and one of its
    stages (see the pipelines path); ``hs_task_status`` and ``hs_task_priority``
    one of their options; a contact's ``email`` must be an address. Association
    type ids are checked: deal→contact 3, ticket→contact 16, task→contact 204,
    task→deal 216, task→ticket 230 (read back from the other side as 4, 15, 203,
    215, 229). Contacts are unique by email (case-insensitive): a second one
    answers 409 ``CONFLICT`` "Contact already exists. Existing ID: N" (the id only
    in the text). A value of a unique property (the enquiry's reference property
    when ``reference_unique``, ``unique_properties``, and properties created with
    ``hasUniqueValue``) held by a live object of the type answers 409
    ``CONFLICT`` "A deal with onefold_ref X already exists. Existing ID: N" with
    ``errors: [{"message", "in": "<property>"}]``, or, with ``unique_clash_status``
    400, a 400 ``VALIDATION_ERROR`` naming the property as a duplicate value.
    Runs under the fault queue: ``create_contact`` for contacts,
    ``create_record`` for deals and tickets, ``create_task`` for tasks.

``GET /crm/v3/objects/{type}/{id}[?idProperty=P][&properties=a,b][&associations=contacts]``
    200 the object, read from the objects themselves (no lag). By id, a merged-away
    id answers with the surviving object. With ``idProperty`` the value is
    looked up in P, which must be unique for the type (``email`` for contacts),
    else 400 ``VALIDATION_ERROR`` "... non-unique ...". Missing: 404
    ``OBJECT_NOT_FOUND`` "resource not found".

``POST /crm/v3/objects/{type}/batch/read`` ``{"properties", "propertiesWithHistory",
"inputs": [{"id"}][, "idProperty"]}``
    Up to 100 inputs. 200 ``{"status": "COMPLETE", "results", "startedAt",
    "completedAt"}``; 207 with ``errors`` (``OBJECT_NOT_FOUND``, the ids in
    ``context.ids``) when some are missing.

``PATCH /crm/v3/objects/{type}/{id}`` ``{"properties"}``: 200; validation and
uniqueness as on create. ``DELETE /crm/v3/objects/{type}/{id}``: 204, archived
(what staff do behind Onefold's back, and a person's erasure of its deal and tasks).

``POST /crm/v3/objects/contacts/gdpr-delete`` ``{"objectId"[, "idProperty": "email"]}``
    204: the contact permanently deleted with its associations
    (https://developers.hubspot.com/docs/api/crm/contacts, "Permanently delete a contact
    (GDPR-compliant)"). An unknown address given by email is
    blocklisted (204), an unknown id 404 (unverified). Runs under the fault queue as
    ``delete_contact``; ``stats["contacts_gdpr_deleted"]`` counts deletions applied.

``GET /crm/v3/objects/{type}?limit=N&after=C[&properties=]``
    Live objects by id, ``limit`` at most 100: ``{"results", "paging": {"next":
    {"after"}}}``, ``paging`` absent on the last page.

``POST /crm/v3/objects/{type}/search`` ``{"filterGroups": [{"filters": [{"propertyName",
"operator": "EQ", "value"}]}], "limit"}``
    ``{"total", "results"}``; an object shows only ``search_lag_seconds`` (3 by
    default) after its last write: HubSpot's search lags writes. Five a second per
    token. The adapter never uses it; tests use it to show the lag.

``POST /crm/v3/objects/{type}/merge`` ``{"primaryObjectId", "objectIdToMerge"}``
    200 the primary; the merged object's associations move to it and its id is
    added to ``hs_merged_object_ids``. Merging an object already merged: 400.

``GET /crm/v4/objects/{type}/{id}/associations/{toType}?limit=N&after=C``
    The object's associations to that type, read from the object itself (no lag):
    ``{"results": [{"toObjectId": "1003", "associationTypes": [{"category":
    "HUBSPOT_DEFINED", "typeId": 215}]}], "paging": {"next": {"after", "link"}}}``,
    ``limit`` at most 500, ``paging`` absent on the last page.

``GET /crm/v3/properties/{type}/{name}``
    200 the property (``name``, ``label``, ``type``, ``fieldType``, ``groupName``,
    ``description``, ``options``, ``hasUniqueValue``, ...); 404 when it does not
    exist on that type. The reference property exists on deals, tickets and tasks
    unless listed in ``reference_missing_on``; it has unique values on deals and
    tickets (while ``reference_unique``), never on tasks.
``POST /crm/v3/properties/{type}``: 201 a new property; ``hasUniqueValue`` true on
tasks answers 400 (unique values exist for companies, deals, tickets, custom objects
and contacts only), and so does an eleventh unique property of a type.
``PATCH /crm/v3/properties/{type}/{name}``: 200; ``hasUniqueValue`` cannot be changed (400).

``GET /crm/v3/properties/{type}``
    ``{"results": [property]}``, every property of the type, not paged (Properties v3
    spec, CollectionResponsePropertyNoPaging): HubSpot's default properties the adapter
    writes, the reference property, the unique ones, those created, and one custom
    property a fresh account has (``enquiry_budget`` on deals and tickets,
    ``preferred_language`` on contacts).

``GET /crm/v3/owners?limit=N&after=C&email=E``, ``GET /crm/v3/owners/{ownerId}``
    The account's owners (https://developers.hubspot.com/docs/api/crm/owners; Owners v3
    spec, PublicOwner: ``id``, ``email``, ``type``, ``firstName``, ``lastName``,
    ``userId``, ``createdAt``, ``updatedAt``, ``archived``, ``teams``) by id, ``limit``
    100 by default (500 at most here: HubSpot's maximum is unverified), ``paging.next``
    while more follow; ``email`` filters. Two at start: 41629779 Ana Lima
    (ana.lima@example.com) and 41629780 Ben Okafor (ben.okafor@example.com). A task's
    ``hubspot_owner_id`` is stored as given (HubSpot's check of it is unverified).

``GET /crm/v3/pipelines/{deals|tickets}``
    ``{"results": [pipeline]}``: deals' ``default`` (stages ``appointmentscheduled``
    ... ``closedlost``), tickets' ``0`` (stages ``1`` to ``4``).

Controls (tests and drills)
===========================

The sandbox's: ``POST /_sandbox/reset``, ``/_sandbox/faults`` (actions
``create_record``, ``create_task``, ``create_contact``, ``delete_contact``), ``/_sandbox/chaos``,
``POST /_sandbox/owners`` ``{"first_name", "last_name", "email"}`` (a user added to the
account, answered with its owner: the next id), ``GET /_sandbox/stats``: ``records``
are live deals and tickets, ``records_by_external_ref`` and ``tasks_by_external_ref``
count them by the reference property; plus ``contacts`` and ``contacts_by_email``; ``calls`` adds
``create_contact``, ``search``, ``get_property``, ``list_properties``,
``list_owners``, ``batch_read``, ``rate_limited``
(429s answered by the limits, not the fault queue); ``requests``: ``admitted`` (let
through by the limits) and ``window_peak`` (the most one token's window held).
``POST /_sandbox/new_day``: the account's midnight has passed (the daily allowance is
whole again).

``GET|POST /_sandbox/config``: ``token`` (``DEFAULT_TOKEN``), ``rate_limits``
(``{"ten_secondly": 100, "daily": 250000, "search_per_second": 5}``; a dict sets
some of them, null lifts one, false lifts them all; ``window_seconds``, 10 unless a
test shortens it, is the rolling window of ``ten_secondly``, as
``X-HubSpot-RateLimit-Interval-Milliseconds`` then says), ``search_lag_seconds`` (3),
``reference_property`` (``onefold_ref``), ``reference_unique`` (true; false: the
enquiry objects' property exists without hasUniqueValue and nothing refuses a
repeat: what an account whose property was re-created without it looks like),
``reference_missing_on`` ([]), ``unique_properties`` ({deals|tickets|contacts:
[names]}: clashes that are not ours), ``unique_clash_status`` (409, or 400),
``rate_limit_policy`` (``TEN_SECONDLY_ROLLING`` or ``DAILY``: how an injected
``http_429`` answers), ``retry_after_header`` (false: whether a 429 carries
Retry-After). Reset puts them back.

Faults in HubSpot's words: ``http_429`` answers as the limits do, with the
configured policy; ``http_503``, ``fail_before_commit``, ``http_400``,
``http_500_after_commit`` answer HubSpot-shaped bodies; ``drop_response_after_commit``
and ``slow`` are the sandbox's.

Not emulated (unverified or unused): batch upsert, association writes after
creation, teams of owners, and the account time zone (its day is UTC's).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Mapping
from typing import ClassVar, cast
from urllib.parse import unquote

from lab.emulators.hubspot_limits import Policy
from lab.emulators.hubspot_store import (
    DEFAULT_TOKEN,
    ENQUIRY_TYPES,
    MAX_ASSOCIATIONS_PAGE,
    OWNERS_DEFAULT_PAGE,
    HubSpotError,
    HubSpotStore,
    error_body,
    pipelines,
)
from lab.emulators.kit import EmulatorServer
from lab.sandbox.http import CONTROL_ROUTES, Reply, Route, SandboxRequestHandler
from lab.sandbox.store import Fault, InvalidInput, SandboxStore

__all__ = ["DEFAULT_TOKEN", "HubSpotEmulator", "HubSpotHandler", "HubSpotStore"]

_TYPE = r"(?P<object_type>contacts|deals|tickets|tasks)"
HUBSPOT_ROUTES: list[Route] = [
    (re.compile(rf"/crm/v3/objects/{_TYPE}"), {"GET": "objects_get", "POST": "objects_post"}),
    (re.compile(rf"/crm/v3/objects/{_TYPE}/search"), {"POST": "search_post"}),
    (re.compile(rf"/crm/v3/objects/{_TYPE}/merge"), {"POST": "merge_post"}),
    (re.compile(rf"/crm/v3/objects/{_TYPE}/batch/read"), {"POST": "batch_read_post"}),
    (re.compile(r"/crm/v3/objects/contacts/gdpr-delete"), {"POST": "gdpr_delete_post"}),
    (
        re.compile(rf"/crm/v3/objects/{_TYPE}/(?P<object_id>[^/]+)"),
        {"GET": "object_get", "PATCH": "object_patch", "DELETE": "object_delete"},
    ),
    (
        re.compile(
            rf"/crm/v4/objects/{_TYPE}/(?P<object_id>[^/]+)/associations/"
            r"(?P<to_type>contacts|deals|tickets|tasks)"
        ),
        {"GET": "associations_get"},
    ),
    (
        re.compile(rf"/crm/v3/properties/{_TYPE}"),
        {"GET": "properties_get", "POST": "properties_post"},
    ),
    (
        re.compile(rf"/crm/v3/properties/{_TYPE}/(?P<name>[^/]+)"),
        {"GET": "property_get", "PATCH": "property_patch"},
    ),
    (re.compile(r"/crm/v3/pipelines/(?P<object_type>deals|tickets)"), {"GET": "pipelines_get"}),
    (re.compile(r"/crm/v3/owners/?"), {"GET": "owners_get"}),
    (re.compile(r"/crm/v3/owners/(?P<owner_id>[^/]+)"), {"GET": "owner_get"}),
    (re.compile(r"/_sandbox/owners"), {"POST": "sandbox_owners_post"}),
    (re.compile(r"/_sandbox/config"), {"GET": "config_get", "POST": "config_post"}),
    (re.compile(r"/_sandbox/new_day"), {"POST": "new_day_post"}),
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

        return self._api(call)

    def objects_get(self, object_type: str) -> Reply:
        if object_type in ENQUIRY_TYPES:
            self.store.count_call("list_records")

        def call() -> Reply:
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

        return self._api(call)

    def object_get(self, object_type: str, object_id: str) -> Reply:
        id_property = self._param("idProperty")
        if id_property and object_type in ENQUIRY_TYPES:
            self.store.count_call("lookup_record")

        def call() -> Reply:
            found = self.hubspot.read(
                object_type,
                unquote(object_id),
                id_property=id_property,
                wanted=self._list("properties"),
                with_associations=tuple(self._list("associations") or ()),
            )
            return Reply(200, found)

        return self._api(call)

    def batch_read_post(self, object_type: str) -> Reply:
        self.store.count_call("batch_read")

        def call() -> Reply:
            status, body = self.hubspot.batch_read(object_type, self._json_body())
            return Reply(status, body)

        return self._api(call)

    def object_patch(self, object_type: str, object_id: str) -> Reply:
        self.store.count_call("update_record")

        def call() -> Reply:
            properties = self._json_body().get("properties") or {}
            if not isinstance(properties, dict):
                raise HubSpotError(400, "VALIDATION_ERROR", "properties must be an object")
            return Reply(200, self.hubspot.update(object_type, unquote(object_id), properties))

        return self._api(call)

    def object_delete(self, object_type: str, object_id: str) -> Reply:
        self.store.count_call("delete_record")

        def call() -> Reply:
            self.hubspot.archive(object_type, unquote(object_id))
            return Reply(204)

        return self._api(call)

    def gdpr_delete_post(self) -> Reply:
        """Runs under the fault queue as ``delete_contact``."""
        self.store.count_call("gdpr_delete")

        def call() -> Reply:
            body = self._json_body()
            return self._faulted(
                "delete_contact", lambda: _caught(lambda: self._gdpr_deleted(body))
            )

        return self._api(call)

    def _gdpr_deleted(self, body: dict[str, object]) -> Reply:
        self.hubspot.gdpr_delete(body)
        return Reply(204)

    def search_post(self, object_type: str) -> Reply:
        self.store.count_call("search")
        return self._api(
            lambda: Reply(200, self.hubspot.search(object_type, self._json_body())), search=True
        )

    def merge_post(self, object_type: str) -> Reply:
        self.store.count_call("merge_record")

        def call() -> Reply:
            body = self._json_body()
            merged = self.hubspot.merge(
                object_type, body.get("primaryObjectId"), body.get("objectIdToMerge")
            )
            return Reply(200, merged)

        return self._api(call)

    def associations_get(self, object_type: str, object_id: str, to_type: str) -> Reply:
        if to_type == "tasks":
            # The first read of a task lookup (the adapter's find_task).
            self.store.count_call("lookup_task")

        def call() -> Reply:
            limit = self._param("limit") or str(MAX_ASSOCIATIONS_PAGE)
            if not limit.isdigit():
                raise HubSpotError(400, "VALIDATION_ERROR", "limit must be an integer")
            found = self.hubspot.associations(
                object_type,
                unquote(object_id),
                to_type,
                limit=int(limit),
                after=self._param("after"),
            )
            return Reply(200, found)

        return self._api(call)

    # -- properties and pipelines ---------------------------------------------------

    def property_get(self, object_type: str, name: str) -> Reply:
        self.store.count_call("get_property")
        return self._api(
            lambda: Reply(200, self.hubspot.property_definition(object_type, unquote(name)))
        )

    def properties_get(self, object_type: str) -> Reply:
        self.store.count_call("list_properties")
        return self._api(lambda: Reply(200, self.hubspot.property_list(object_type)))

    def properties_post(self, object_type: str) -> Reply:
        return self._api(
            lambda: Reply(201, self.hubspot.create_property(object_type, self._json_body()))
        )

    def property_patch(self, object_type: str, name: str) -> Reply:
        return self._api(
            lambda: Reply(
                200, self.hubspot.update_property(object_type, unquote(name), self._json_body())
            )
        )

    def pipelines_get(self, object_type: str) -> Reply:
        return self._api(lambda: Reply(200, {"results": pipelines(object_type)}))

    # -- owners --------------------------------------------------------------------

    def owners_get(self) -> Reply:
        self.store.count_call("list_owners")

        def call() -> Reply:
            limit = self._param("limit") or str(OWNERS_DEFAULT_PAGE)
            if not limit.isdigit():
                raise HubSpotError(400, "VALIDATION_ERROR", "limit must be an integer")
            return Reply(
                200,
                self.hubspot.owners_page(
                    limit=int(limit), after=self._param("after"), email=self._param("email")
                ),
            )

        return self._api(call)

    def owner_get(self, owner_id: str) -> Reply:
        return self._api(lambda: Reply(200, self.hubspot.owner(unquote(owner_id))))

    def sandbox_owners_post(self) -> Reply:
        return _caught(lambda: Reply(200, self.hubspot.add_owner(self._json_body())))

    # -- control -------------------------------------------------------------------

    def config_get(self) -> Reply:
        return Reply(200, self.hubspot.config())

    def config_post(self) -> Reply:
        return Reply(200, self.hubspot.set_config(self._json_body()))

    def new_day_post(self) -> Reply:
        self.hubspot.new_day()
        return Reply(200, {"status": "new day"})

    # -- faults in HubSpot's words --------------------------------------------------

    def fault_reply_before_commit(self, fault: Fault) -> Reply | None:
        seconds = max(0, math.ceil(fault.seconds))
        if fault.mode == "http_429":
            # The request was counted; its answer gets the other headers in `_api`.
            policy = self.hubspot.config()["rate_limit_policy"]
            spent = "X-HubSpot-RateLimit-" + (
                "Daily-Remaining" if policy == Policy.DAILY else "Remaining"
            )
            return self._rate_limited(policy, {spent: "0"}, retry_after=seconds)
        if fault.mode == "http_503":
            body = error_body("SERVICE_UNAVAILABLE", "Service Unavailable (injected)")
            return Reply(503, body, {"Retry-After": str(seconds)})
        if fault.mode == "fail_before_commit":
            return Reply(500, error_body("INTERNAL_ERROR", "injected failure before commit"))
        if fault.mode == "http_400":
            return Reply(
                400, error_body("VALIDATION_ERROR", "Property values were not valid (injected)")
            )
        return None

    def fault_reply_after_commit(self, fault: Fault) -> Reply:
        return Reply(500, error_body("INTERNAL_ERROR", "injected failure after commit"))

    def _rate_limited(
        self, policy: str, headers: Mapping[str, str], *, retry_after: float | None
    ) -> Reply:
        """HubSpot's 429 (https://developers.hubspot.com/docs/api/usage-details, quoted in
        community.hubspot.com m-p/511719: {"status": "error", "message": "You have
        reached your daily limit.", "errorType": "RATE_LIMIT", "correlationId",
        "policyName": "DAILY", "requestId"}; "The message and policyName will indicate
        which limit you hit"), with the X-HubSpot-RateLimit-* headers every answer
        carries. Retry-After only when the config asks for it: HubSpot documents none."""
        body = {
            "status": "error",
            "message": f"You have reached your {policy.lower()} limit.",
            "errorType": "RATE_LIMIT",
            "correlationId": str(uuid.uuid4()),
            "policyName": policy,
            "requestId": str(uuid.uuid4()),
        }
        answer = dict(headers)
        if self.hubspot.config()["retry_after_header"] and retry_after is not None:
            answer["Retry-After"] = str(max(1, math.ceil(retry_after)))
        return Reply(429, body, answer)

    # -- plumbing ------------------------------------------------------------------

    def _api(self, call: Callable[[], Reply], *, search: bool = False) -> Reply:
        """A HubSpot API request: the token checked, the request counted against the
        limits (refused with 429 past one), then `call`, its answer carrying the
        X-HubSpot-RateLimit-* headers."""
        try:
            token = self._authorize()
        except HubSpotError as exc:
            return exc.reply()
        verdict = self.hubspot.take_request(token, search=search)
        if verdict.refused_by is not None:
            self.store.count_call("rate_limited")
            return self._rate_limited(
                verdict.refused_by, verdict.headers, retry_after=verdict.retry_after
            )
        reply = _caught(call)
        reply.headers = {**verdict.headers, **reply.headers}
        return reply

    def _authorize(self) -> str:
        """The private app's token from `Authorization: Bearer`; any other answers 401
        INVALID_AUTHENTICATION with HubSpot's message (as quoted from HubSpot's answer to
        a private app token it did not take, community.hubspot.com, "Authentication
        credentials not found" thread; https://developers.hubspot.com/docs/api/error-handling)."""
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme != "Bearer" or token.strip() != self.hubspot.token():
            raise HubSpotError(
                401,
                "INVALID_AUTHENTICATION",
                "Authentication credentials not found. This API supports OAuth 2.0 "
                "authentication and you can find more details at "
                "https://developers.hubspot.com/docs/methods/auth/oauth-overview",
            )
        return token.strip()

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

    def adapter_env(self) -> dict[str, str]:
        """The HUBSPOT_* variables that point the adapter at this emulator as it starts
        (after a reset): its URL and its default token."""
        return {"HUBSPOT_BASE_URL": self.http_url, "HUBSPOT_TOKEN": DEFAULT_TOKEN}
