"""The Salesforce emulator over HTTP: the REST API paths Onefold's adapter calls.

Routing, bearer-token checks and faults live here; the org's state and every
answer's shape live in `salesforce_store.py` (whose docstring names the documentation each
behaviour comes from). The API is described below.

The emulated API
================

Salesforce: Onefold's adapter (`adapter.py`) and a local emulator of the REST API.

The emulator is a real HTTP server on loopback, built from the sandbox's server,
fault queue and controls (`lab/emulators/kit.py`). Each behaviour below
is documented with its source in `salesforce_store.py` ([UPSERT], [ERRORS], [VENDOR],
[DUPRULE], [ASSIGN], [QUERY], [IDS], [LIMITS], [OAUTH], [FIELDS]).

Running it
==========

In process (tests)::

    from lab.emulators.salesforce import SalesforceEmulator

    with SalesforceEmulator() as sf:          # port 0: a free port
        sf.http_url                            # the instance URL

Credentials it accepts by default: client id ``DEFAULT_CLIENT_ID``
(``onefold-emulator``), secret ``DEFAULT_CLIENT_SECRET`` (``emulator-secret``);
change them with ``POST /_sandbox/config``. Anything else is refused ([OAUTH]).

API (what the adapter calls)
============================

Every ``/services/data/vXX.X/...`` call needs ``Authorization: Bearer <token>``;
without a live token it answers 401 ``[{"message": "Session expired or invalid",
"errorCode": "INVALID_SESSION_ID"}]``. Errors are JSON arrays of ``{"message",
"errorCode", "fields"?}``. Every API answer carries ``Sforce-Limit-Info:
api-usage=N/M``. Objects: ``Lead`` (ids ``00Q...``), ``Contact`` (``003...``),
``Task`` (``00T...``); ids are 18 characters, case-safe suffix included, and a
15-character id names the same row.

``POST /services/oauth2/token``
    Form ``grant_type=client_credentials``, ``client_id``, ``client_secret``:
    200 ``{"access_token", "instance_url", "id", "token_type": "Bearer",
    "issued_at", "signature", "scope"}`` (no ``expires_in``, as Salesforce).
    An unknown client id: 400 ``{"error": "invalid_client_id", ...}``; a wrong
    secret: 400 ``{"error": "invalid_client", ...}``.

``GET .../sobjects/{Lead|Contact|Task|User}/describe``
    200 ``{"name", "keyPrefix", "fields": [{"name", "label", "type", "custom",
    "createable", "externalId", "unique", "idLookup", ...}]}`` ([DESCRIBE]): the
    standard fields the emulator keeps, the custom ones (``custom_fields``: a fresh
    org has ``Budget__c`` on Lead and Contact) and the reference field, whose flags
    are the org settings below. Writing a field the describe does not list is 400
    ``INVALID_FIELD``.

Users ([USERS])
    ``User`` rows (ids ``005...``): the integration user (``0055g00000ApIUsAAN``,
    integration@example.com), Ana Lima (``0055g00000AnaLiAAJ``,
    ana.lima@example.com) and Ben Okafor (``0055g00000BenOkAAJ``,
    ben.okafor@example.com), all active; read with SOQL (``SELECT Id, Name, Email
    FROM User WHERE IsActive = true``, boolean literals unquoted).

``GET .../sobjects/{object}/{field}/{value}``
    By external id: 200 the record (with ``attributes``), 404 ``NOT_FOUND``, or
    300 with the list of the matching records' URLs when several hold the value.
    A field that is not the reference field, or not marked External ID: 404.

``PATCH .../sobjects/{object}/{field}/{value}`` (upsert)
    No match: creates, 201 ``{"id", "success": true, "errors": [], "created":
    true}``. One match: updates it, 200 ``{..., "created": false}`` (API 46.0 and
    later; 204 without a body before). Several: 300 as above, nothing written.
    Not atomic, like Salesforce: the match is read, then, after
    ``upsert_race_seconds``, the row inserted. With the field Unique the loser of
    a race gets 400 ``DUPLICATE_VALUE`` "duplicate value found: <field>
    duplicates value on record with id: <id>"; without it both inserts stand
    (later upserts of that value answer 300). Unknown fields: 400
    ``INVALID_FIELD``; Lead needs ``LastName`` and ``Company``, Contact
    ``LastName`` (400 ``REQUIRED_FIELD_MISSING``); a Task's ``WhoId`` must name a
    Lead or Contact (400 ``INVALID_CROSS_REFERENCE_KEY``). Values ([FIELDS]): an
    Email that is no address, 400 ``INVALID_EMAIL_ADDRESS``; a Status, LeadSource
    or Priority outside the picklist's values, 400
    ``INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST``; text past its length, 400
    ``STRING_TOO_LONG``. Each error lists the field in ``fields``.

``POST .../sobjects/{object}``
    Plain create: 201 ``{"id", "success": true, "errors": []}``; the unique and
    duplicate rules apply as on upsert.

``GET|PATCH|DELETE .../sobjects/{object}/{id}``
    200 the record / 204 / 204; 404 ``NOT_FOUND``.

``GET .../query?q=SOQL`` and ``GET .../query/{locator}-{offset}``
    The SOQL the adapter sends: ``SELECT f, ... FROM object [WHERE field op
    literal [AND ...]] [ORDER BY f, ...]`` (dateTime literals unquoted). 200
    ``{"totalSize", "done", "records", "nextRecordsUrl"?}``; pages of
    ``Sforce-Query-Options: batchSize=N`` records (200 to 2,000, default 2,000).
    Anything else: 400 ``MALFORMED_QUERY``.

Quirks emulated
---------------

* Lead assignment: ``Sforce-Auto-Assign`` absent or TRUE runs the org's
  assignment rule on a Lead's create *and* update (the owner becomes a queue,
  ``00G...``); FALSE does not. Stats count the runs per reference
  (``assignments_by_external_ref``).
* Duplicate rule (``duplicate_rule``: ``off``, ``alert``, ``block``): on create
  of a Lead or Contact whose Email (any case) another record of that object
  holds: 400 ``[{"duplicateResut": {"allowSave", "duplicateRule",
  "matchResults": [{"matchRecords": [{"record": {"Id"}}]}]}, "errorCode":
  "DUPLICATES_DETECTED", "message"}]`` (``duplicateResut`` sic). An alerting
  rule lets the create through with ``Sforce-Duplicate-Rule-Header:
  allowSave=true``; a blocking one never does. The rule runs on create only.
* Rate limit ([LIMITS]): the org's API requests of the last 24 hours are counted
  (``api_usage_limit``, 15,000 by default, Developer Edition's allocation); with
  them spent every API call answers 403 ``REQUEST_LIMIT_EXCEEDED`` "TotalRequests
  Limit exceeded." with no ``Retry-After`` and is not counted, until the oldest
  requests age out of the 24 hours. Token requests are not counted.

Simplified: no Recycle Bin (DELETE removes the row) and a deleted Lead's Tasks
stay (whether Salesforce deletes a record's activities with it is *unverified*
here; the drill accepts either); Email matching is exact apart from case; the
duplicate rule runs on create, not on edit; queries understand only the SOQL
above; field values are not type-checked.

Control and inspection (tests and drills only)
==============================================

The sandbox's own: ``POST /_sandbox/reset`` (also ends every token and puts the
org settings back), ``/_sandbox/faults``, ``/_sandbox/chaos``, ``GET
/_sandbox/stats``. Faults apply to upserts and creates: ``create_record`` for
Lead and Contact, ``create_task`` for Task, in Salesforce's words:
``fail_before_commit`` and ``http_500_after_commit`` are 500
``UNKNOWN_EXCEPTION``; ``http_429`` is Salesforce's rate limit, 403
``REQUEST_LIMIT_EXCEEDED``; ``http_503`` is 503 ``SERVER_UNAVAILABLE`` with
``Retry-After``; ``http_400`` is 400 ``FIELD_CUSTOM_VALIDATION_EXCEPTION``;
``drop_response_after_commit`` and ``slow`` as in the sandbox. Faults are taken
before the body is read.

``GET /_sandbox/stats``
    The sandbox's keys: ``records`` (Leads and Contacts), ``tasks``,
    ``messages`` (always 0: no mail here), ``records_by_external_ref`` and
    ``tasks_by_external_ref`` (by the reference field), ``messages_by_recipient``,
    ``messages_by_message_id``, ``calls`` (``create_record``, ``create_task``,
    ``lookup_record``, ``lookup_task``, ``update_record``, ``delete_record``,
    ``list_records``, plus ``token`` and ``describe``), and
    ``assignments_by_external_ref``.

``GET|POST /_sandbox/config``
    The org's settings; POST any of ``client_id``, ``client_secret``,
    ``reference_field`` (default ``Onefold_Ref__c``), ``reference_external_id``
    and ``reference_unique`` (the field's flags on Lead and Contact),
    ``task_reference_external_id`` and ``task_reference_unique`` (on Task), all
    true by default; ``duplicate_rule``; ``upsert_race_seconds`` (0);
    ``api_usage_limit`` (15,000; a test lowers it to spend the day, or lifts it);
    ``restricted_picklists`` (true); ``custom_fields`` (``{"Lead": ["Budget__c"],
    "Contact": ["Budget__c"]}``: the custom fields of each object, replaced whole).
    Unknown names or wrong types: 400.

``POST /_sandbox/seed``
    ``{"sobject": "Lead", "records": [{field: value}, ...]}`` or
    ``{"sobject", "count", "prefix"}``: 200 ``{"created": [ids]}``. Rows are
    stored as given, past the unique field and the duplicate rule (records from
    before the field was Unique, or an import): how tests make a reference
    match several records.

``POST /_sandbox/owners``
    ``{"first_name", "last_name", "email"}``: 200 the new active user's row.

``POST /_sandbox/expire_tokens``
    200 ``{"expired": n}``: every session ends; the next API call answers 401.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, ClassVar
from urllib.parse import parse_qs, unquote

from lab.emulators.kit import EmulatorServer
from lab.emulators.salesforce_store import (
    DEFAULT_CLIENT_ID,
    DEFAULT_CLIENT_SECRET,
    RECORD_OBJECTS,
    Refused,
    SalesforceStore,
    sf_error,
)
from lab.sandbox.http import CONTROL_ROUTES, Reply, Route, SandboxRequestHandler
from lab.sandbox.store import Fault

_API = r"/services/data/v(?P<version>\d+\.\d)"
_ROUTES: list[Route] = [
    (re.compile(r"/services/oauth2/token"), {"POST": "token_post"}),
    (re.compile(_API + r"/sobjects/(?P<sobject>\w+)/describe"), {"GET": "describe_get"}),
    (
        re.compile(_API + r"/sobjects/(?P<sobject>\w+)/(?P<field>\w+)/(?P<value>[^/]+)"),
        {"GET": "by_ref_get", "PATCH": "by_ref_patch"},
    ),
    (
        re.compile(_API + r"/sobjects/(?P<sobject>\w+)/(?P<record_id>[A-Za-z0-9]+)"),
        {"GET": "row_get", "PATCH": "row_patch", "DELETE": "row_delete"},
    ),
    (re.compile(_API + r"/sobjects/(?P<sobject>\w+)"), {"POST": "sobject_post"}),
    (re.compile(_API + r"/query"), {"GET": "query_get"}),
    (re.compile(_API + r"/query/(?P<locator>[\w-]+)"), {"GET": "query_more_get"}),
    (re.compile(r"/_sandbox/config"), {"GET": "config_get", "POST": "config_post"}),
    (re.compile(r"/_sandbox/seed"), {"POST": "seed_post"}),
    (re.compile(r"/_sandbox/owners"), {"POST": "owners_post"}),
    (re.compile(r"/_sandbox/expire_tokens"), {"POST": "expire_tokens_post"}),
    *CONTROL_ROUTES,
]
# [QUERY] in store.py: batchSize is 200 to 2,000, default 2,000.
_BATCH_MIN, _BATCH_MAX = 200, 2000


def _errors(exc: Refused) -> Reply:
    return Reply(exc.status, exc.body, dict(exc.headers))


class SalesforceRequestHandler(SandboxRequestHandler):
    """Salesforce's REST paths plus the sandbox's controls."""

    routes = _ROUTES
    server_version = "SalesforceEmulator/1"

    @property
    def org(self) -> SalesforceStore:
        store = self.server.store
        assert isinstance(store, SalesforceStore)
        return store

    # -- plumbing ----------------------------------------------------------------

    def _api(self, call: Callable[[], tuple[int, Any]], *, auth: bool = True) -> Reply:
        """Runs `call` for an authenticated request; Salesforce's error shapes out."""
        if auth and not self.org.token_valid(self.headers.get("Authorization")):
            # [ERRORS] in store.py: an expired or invalid session answers 401.
            return _errors(sf_error(401, "INVALID_SESSION_ID", "Session expired or invalid"))
        spent = self.org.spend_api_request() if auth else None
        if spent is not None:
            return _errors(spent)
        try:
            status, body = call()
        except Refused as exc:
            reply = _errors(exc)
        else:
            reply = Reply(status, body)
        if auth:
            reply.headers["Sforce-Limit-Info"] = self.org.limit_info()
        return reply

    def _body(self) -> dict[str, Any]:
        try:
            body = json.loads(self.raw_body or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise sf_error(400, "JSON_PARSER_ERROR", f"Unexpected character: {exc}") from None
        if not isinstance(body, dict):
            raise sf_error(400, "JSON_PARSER_ERROR", "Cannot deserialize instance of SObject")
        return body

    def _auto_assign(self) -> bool:
        """[ASSIGN] in store.py: TRUE unless the header says FALSE (any case)."""
        return (self.headers.get("Sforce-Auto-Assign") or "TRUE").strip().upper() != "FALSE"

    def _allow_save(self) -> bool:
        header = self.headers.get("Sforce-Duplicate-Rule-Header") or ""
        options = dict(
            part.strip().partition("=")[::2] for part in header.split(";") if "=" in part
        )
        return options.get("allowSave", "").strip().lower() == "true"

    def _batch_size(self) -> int:
        header = self.headers.get("Sforce-Query-Options") or ""
        match = re.search(r"batchSize=(\d+)", header)
        size = int(match.group(1)) if match else _BATCH_MAX
        return max(_BATCH_MIN, min(_BATCH_MAX, size))

    def fault_reply_before_commit(self, fault: Fault) -> Reply | None:
        """The sandbox's faults in Salesforce's words ([ERRORS] in store.py)."""
        limit = {"Sforce-Limit-Info": "api-usage=15000/15000"}
        answers = {
            "fail_before_commit": sf_error(
                500, "UNKNOWN_EXCEPTION", "An unexpected error occurred (injected before commit)"
            ),
            # Salesforce's rate limit is a 403, not a 429, and carries no Retry-After.
            "http_429": Refused(
                403,
                [
                    {
                        "message": "TotalRequests Limit exceeded.",
                        "errorCode": "REQUEST_LIMIT_EXCEEDED",
                    }
                ],
                limit,
            ),
            "http_503": Refused(
                503,
                [{"message": "Server unavailable (injected)", "errorCode": "SERVER_UNAVAILABLE"}],
                {"Retry-After": str(max(0, math.ceil(fault.seconds)))},
            ),
            # A validation rule's refusal is Salesforce's everyday 400.
            "http_400": sf_error(
                400, "FIELD_CUSTOM_VALIDATION_EXCEPTION", "injected validation error", []
            ),
        }
        refusal = answers.get(fault.mode)
        return _errors(refusal) if refusal is not None else None

    def fault_reply_after_commit(self, fault: Fault) -> Reply:
        return _errors(
            sf_error(
                500, "UNKNOWN_EXCEPTION", "An unexpected error occurred (injected after commit)"
            )
        )

    def _write_action(self, sobject: str) -> str:
        return "create_task" if sobject == "Task" else "create_record"

    def _faulted_api(self, sobject: str, call: Callable[[], tuple[int, Any]]) -> Reply:
        """A write that may create: counted, and under the sandbox's fault queue.
        Faults apply to authenticated, well-formed calls only."""
        if not self.org.token_valid(self.headers.get("Authorization")):
            return self._api(call)
        action = self._write_action(sobject)
        self.store.count_call(action)
        return self._faulted(action, lambda: self._api(call))

    # -- OAuth -------------------------------------------------------------------

    def token_post(self) -> Reply:
        form = {k: v[-1] for k, v in parse_qs(self.raw_body.decode("latin-1")).items()}
        self.store.count_call("token")
        host = self.headers.get("Host") or f"{self.server.server_name}:{self.server.server_port}"
        return self._api(lambda: (200, self.org.issue_token(form, f"http://{host}")), auth=False)

    # -- sObjects ------------------------------------------------------------------

    def describe_get(self, version: str, sobject: str) -> Reply:
        self.store.count_call("describe")
        return self._api(lambda: self.org.describe(sobject))

    def by_ref_get(self, version: str, sobject: str, field: str, value: str) -> Reply:
        self.store.count_call("lookup_task" if sobject == "Task" else "lookup_record")
        return self._api(
            lambda: self.org.get_by_ref(sobject, field, unquote(value), version=version)
        )

    def by_ref_patch(self, version: str, sobject: str, field: str, value: str) -> Reply:
        def call() -> tuple[int, Any]:
            return self.org.upsert(
                sobject,
                field,
                unquote(value),
                self._body(),
                version=version,
                auto_assign=self._auto_assign(),
                allow_save=self._allow_save(),
            )

        return self._faulted_api(sobject, call)

    def sobject_post(self, version: str, sobject: str) -> Reply:
        def call() -> tuple[int, Any]:
            return self.org.create(
                sobject,
                self._body(),
                version=version,
                auto_assign=self._auto_assign(),
                allow_save=self._allow_save(),
            )

        return self._faulted_api(sobject, call)

    def row_get(self, version: str, sobject: str, record_id: str) -> Reply:
        return self._api(lambda: self.org.get(sobject, record_id, version=version))

    def row_patch(self, version: str, sobject: str, record_id: str) -> Reply:
        self.store.count_call("update_record")
        return self._api(
            lambda: self.org.update(
                sobject, record_id, self._body(), auto_assign=self._auto_assign()
            )
        )

    def row_delete(self, version: str, sobject: str, record_id: str) -> Reply:
        self.store.count_call("delete_record")
        return self._api(lambda: self.org.delete(sobject, record_id))

    def query_get(self, version: str) -> Reply:
        self.store.count_call("list_records")
        soql = self._param("q") or ""
        return self._api(
            lambda: self.org.query(soql, version=version, batch_size=self._batch_size())
        )

    def query_more_get(self, version: str, locator: str) -> Reply:
        self.store.count_call("list_records")
        return self._api(
            lambda: self.org.query_more(locator, version=version, batch_size=self._batch_size())
        )

    # -- controls (tests and drills) -------------------------------------------------

    def config_get(self) -> Reply:
        return Reply(200, dict(self.org.config))

    def config_post(self) -> Reply:
        return self._api(lambda: (200, self.org.set_config(self._body())), auth=False)

    def seed_post(self) -> Reply:
        def call() -> tuple[int, Any]:
            body = self._body()
            sobject = str(body.get("sobject") or "Lead")
            rows = body.get("records")
            if rows is None:
                count = int(body.get("count") or 0)
                prefix = str(body.get("prefix") or "seed-")
                field = str(self.org.config["reference_field"])
                required = {"LastName": "Seeded", "Company": "Seeded"} if sobject == "Lead" else {}
                if sobject in RECORD_OBJECTS and sobject != "Lead":
                    required = {"LastName": "Seeded"}
                rows = [{**required, field: f"{prefix}{i}"} for i in range(count)]
            return 200, {"created": self.org.seed_rows(sobject, list(rows))}

        return self._api(call, auth=False)

    def owners_post(self) -> Reply:
        return self._api(lambda: (200, self.org.add_user(self._body())), auth=False)

    def expire_tokens_post(self) -> Reply:
        return Reply(200, {"expired": self.org.expire_tokens()})


class SalesforceEmulator(EmulatorServer):
    """`with SalesforceEmulator() as sf: sf.http_url` (a free port on loopback)."""

    vendor: ClassVar[str] = "salesforce"
    handler_class = SalesforceRequestHandler
    store_class = SalesforceStore

    def adapter_env(self) -> dict[str, str]:
        """The SALESFORCE_* variables that point the adapter at this emulator as it
        starts (after a reset): its URL and its default client credentials."""
        return {
            "SALESFORCE_INSTANCE_URL": self.http_url,
            "SALESFORCE_CLIENT_ID": DEFAULT_CLIENT_ID,
            "SALESFORCE_CLIENT_SECRET": DEFAULT_CLIENT_SECRET,
        }
