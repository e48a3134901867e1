"""A local stand-in for Microsoft Dataverse's Web API and its Entra ID token endpoint.

Leads, tasks regarding a lead, the alternate key on the reference column, the
Merge action, OData paging, and the client-credentials token that every call
needs; answers in Dataverse's words, plus the `/_sandbox/` controls every
emulator shares (lab/emulators/kit.py). The part below
describes the API, the controls and what is simplified.

The emulated API
================

Microsoft Dataverse (Dynamics 365 Sales): its CRM adapter and a local emulator.

The adapter (`adapter.py`, `DataverseCrm`) makes the enquiry a lead and the
task a task regarding it, each created once under a GUID derived from the
operation key (`PATCH .../leads(<guid>)` with `If-None-Match: *`; a repeat
answers 412 and is adopted). Capabilities: `unique_external_ref`, `lookup` and
`merge`; no idempotency key. `adapter_from_env()` reads `DATAVERSE_URL` (the org
URL), `DATAVERSE_CLIENT_ID`, `DATAVERSE_CLIENT_SECRET`, `DATAVERSE_TOKEN_URL`
(all required; token by client credentials, scope `<DATAVERSE_URL>/.default`),
`DATAVERSE_REF_COLUMN` (default `onefold_ref`) and `DATAVERSE_TASK_REF_COLUMN`
(default the same name; empty: tasks carry no reference column).

Running the emulator
====================

In-process (tests)::

    from lab.emulators.dataverse import DataverseEmulator

    with DataverseEmulator() as dataverse:      # port 0: a free port
        dataverse.http_url      # the org URL (DATAVERSE_URL)
        dataverse.token_url     # {http_url}/emulator-tenant/oauth2/v2.0/token

A real HTTP/1.1 server on loopback; its state lives in memory, never in the
app's database.

Token endpoint (Microsoft Entra ID)
===================================

``POST /{tenant}/oauth2/v2.0/token`` (form: `grant_type=client_credentials`,
`client_id`, `client_secret`, `scope` ending in `/.default`;
https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow)
    200 ``{"token_type": "Bearer", "expires_in", "ext_expires_in",
    "access_token"}``. Only the app registration's own id and secret
    (``DEFAULT_CLIENT_ID``, ``DEFAULT_CLIENT_SECRET`` unless configured): another
    client id 400 ``{"error": "unauthorized_client", ...}`` (AADSTS700016, "not
    found in the directory"), a wrong secret 401 ``{"error": "invalid_client",
    ...}`` (AADSTS7000215); another scope 400 `invalid_scope`; another grant 400
    `unsupported_grant_type` (the page's error table).

Web API (``/api/data/v9.2``; every call needs ``Authorization: Bearer <token>``)
==============================================================================

A missing, expired or revoked token: 401 with `WWW-Authenticate`. Errors are
Dataverse's ``{"error": {"code", "message"}}``
(https://learn.microsoft.com/power-apps/developer/data-platform/webapi/compose-http-requests-handle-errors).
Date-times are UTC whole seconds with a Z.

Service protection limits
(https://learn.microsoft.com/power-apps/developer/data-platform/api-limits), per
user (the app's client id), on by default (``rate_limits``):

* requests: 6000 within a 300-second sliding window (``requests_per_window``,
  ``window_seconds``); past it 429 code ``0x80072322`` "Number of requests
  exceeded the limit of 6000 over time window of 300 seconds." with
  ``Retry-After`` in seconds (until room comes back);
* concurrent requests: 52 (``concurrent_requests``); past it 429 code
  ``0x80072326`` "Number of concurrent requests exceeded the limit of 52." at
  once, with ``Retry-After: 1``;
* every answer carries ``x-ms-ratelimit-burst-remaining-xrm-requests``, the
  requests left in the window ("for debugging purposes").

Not emulated: the combined execution time limit (1,200 seconds per 300; code
``0x80072321``): the emulator's requests take milliseconds.

Values (the lead and task column references,
https://learn.microsoft.com/power-apps/developer/data-platform/reference/entities/lead
and .../task): a choice column takes only its options (lead ``leadsourcecode``
1-10, task ``prioritycode`` 0 Low, 1 Normal, 2 High): 400 "A validation error
occurred. The value 7 of 'prioritycode' on record of type 'task' is outside the
valid range. Accepted Values: 0,1,2" (the wording Microsoft's Project Operations
docs quote); text past a column's MaxLength (lead ``lastname`` 50, ``subject``
300, ``description`` 2000, ...; task ``subject`` 200) is 400 "A validation error
occurred. The length of the 'description' attribute of the 'lead' entity
exceeded the maximum allowed length of '2000'." (wording as commonly reported,
unverified). Business-required columns are not checked: the Web API enforces only
system-required ones, which the platform fills (ownerid).

``PATCH /leads(<guid>)`` (lead columns `subject`, `firstname`, `lastname`,
`emailaddress1`, `telephone1`, `description`, `companyname` and the reference
column; another property is 400 "Invalid property")
    204 with `OData-EntityId`. `If-None-Match: *` only creates: an existing GUID
    is 412 "A record with matching key values already exists."; `If-Match: *`
    only updates: a missing lead is 404 "lead With Id = ... Does Not Exist";
    neither: an upsert (perform-conditional-operations-using-web-api). While the
    alternate key is Active, a reference value held by another unmerged lead is
    412 "A record that has the attribute values ... already exists. The entity
    key ... requires ..." (code 0x80060892); not Active, it is not enforced.

``GET /leads(<guid>)``, ``GET /leads(<column>='<value>')`` (the alternate key;
400 while it is not Active; the value URL-encoded, quotes doubled), ``DELETE
/leads(<guid>)`` (its tasks too), with ``$select``
    The lead: its columns, `leadid`, the reference column, `fullname`,
    `createdon`, `modifiedon`, `statecode`, `merged`, `_masterid_value`,
    `@odata.etag`.

``GET /leads?$filter=...`` with ``Prefer: odata.maxpagesize=N`` (default and
maximum 5000)
    ``{"value": [...], "@odata.nextLink"?}`` in (createdon, leadid) order;
    `$filter` takes comparisons (eq ne ge gt le lt) joined by `and` on any
    column, with date-time, 'string', true/false and null literals; the
    next link carries a `$skiptoken`. `$orderby` is accepted and not applied.

``PATCH /tasks(<guid>)`` (`subject`, `description`, `scheduledend`,
`prioritycode`, `regardingobjectid_lead_task@odata.bind: "/leads(<guid>)"`,
`ownerid@odata.bind`, the reference column), ``GET /tasks(<guid>)``, ``GET
/tasks?$filter=_regardingobjectid_value eq <guid>``
    As for leads (404 when the bound lead does not exist).

``POST /Merge`` ``{"Target": {"@odata.type": "Microsoft.Dynamics.CRM.lead",
"leadid"}, "Subordinate": {...}, "UpdateContent"?: {...},
"PerformParentingChecks": bool}``
    204: the subordinate is marked `merged`, its `_masterid_value` set to the
    target and `statecode` 2; its tasks now regard the target (the Lead_Tasks
    relationship cascades Merge). Merging a merged lead is 400.

``GET /EntityDefinitions(LogicalName='lead')/Keys``
    ``{"value": [{"LogicalName": "<column>_key", "KeyAttributes": [<column>],
    "EntityKeyIndexStatus": <alternate_key_status>, ...}]}``; for `task`, none.

``GET /EntityDefinitions(LogicalName='lead')/Attributes`` (``$select``)
    ``{"value": [{"LogicalName", "SchemaName", "AttributeType", "IsCustomAttribute",
    "IsValidForCreate", "MetadataId"}]}``: the lead columns above, the custom ones
    (``custom_columns``, by default ``new_budget``), the reference column, and the
    columns Dataverse sets (``IsValidForCreate`` false). Not paged
    (https://learn.microsoft.com/power-apps/developer/data-platform/webapi/query-metadata-web-api).
    Writing a lead column it does not list is 400 "Invalid property".

``GET /systemusers`` (``$select``, ``$filter``, ``Prefer: odata.maxpagesize=N``)
    The org's users by ``systemuserid``, paged with ``@odata.nextLink``:
    ``fullname``, ``firstname``, ``lastname``, ``internalemailaddress``,
    ``isdisabled``. At start the application user (WhoAmI's UserId, ``# onefold-app``),
    Ana Lima (``5d1e1c2a-6b7f-4c8e-9a01-0a11ce000001``, ana.lima@example.com) and Ben
    Okafor (``...000002``, ben.okafor@example.com). A task's ``ownerid@odata.bind``
    is stored as given (the check that it names a user is not emulated).

``GET /WhoAmI``: ``{"UserId"}``.

Controls (tests and drills)
===========================

The sandbox's `/_sandbox/reset`, `/_sandbox/faults` and `/_sandbox/chaos`
(actions `create_record`: a lead created with `If-None-Match: *`, and
`create_task`: likewise a task; `http_429` answers 429 with `Retry-After` and
code 0x80072322, "Number of requests exceeded the limit of 6000 over time window
of 300 seconds." (https://learn.microsoft.com/power-apps/developer/data-platform/api-limits);
500s are code 0x80040216), and `/_sandbox/stats`: `records` the unmerged leads,
`tasks` the tasks regarding them, each counted by reference value in
`records_by_external_ref` / `tasks_by_external_ref`; `messages` 0; `calls`
counts each action's calls whose token was accepted, `token` requests, and as
`unauthorized` the calls refused 401.

``GET|POST /_sandbox/config`` ``{"alternate_key_status": "Active" | "Pending" |
"InProgress" | "Failed", "reference_column", "client_id", "client_secret",
"token_lifetime_seconds", "rate_limits", "requests_per_window", "window_seconds",
"concurrent_requests", "custom_columns": ["new_x", ...], "revoke_tokens": true}``:
`revoke_tokens` forgets every issued token (the next call answers 401);
`custom_columns` replaces the lead's custom columns.

``POST /_sandbox/owners`` ``{"first_name", "last_name", "email"}``: 200 a new enabled
systemuser.

Simplified: only leads and tasks; no business rules, plug-ins, duplicate
detection rules, batch ($batch) requests, or lead qualification; `$select`
filters the answer's keys; a merged lead's state is set without its status
reason being checked against Dataverse's (unverified).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import secrets
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode

from lab.emulators.kit import EmulatorServer
from lab.emulators.limits import RollingWindow
from lab.sandbox.http import CONTROL_ROUTES, Reply, Route, SandboxRequestHandler
from lab.sandbox.store import Fault, InvalidInput, SandboxStore

API = "/api/data/v9.2"
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_ALTERNATE_KEY = re.compile(r"(?P<column>\w+)='(?P<value>.*)'")
# The columns this emulator knows (Web API lead/task EntityType references,
# https://learn.microsoft.com/power-apps/developer/data-platform/webapi/reference/lead
# and .../task); the configured reference column is added to both.
LEAD_COLUMNS = frozenset(
    {
        "subject",
        "firstname",
        "lastname",
        "emailaddress1",
        "telephone1",
        "description",
        "companyname",
        "leadsourcecode",
    }
)
# MaxLength of the text columns (the lead and task references above).
MAX_LENGTHS: dict[str, dict[str, int]] = {
    "lead": {
        "subject": 300,
        "firstname": 50,
        "lastname": 50,
        "emailaddress1": 100,
        "telephone1": 50,
        "description": 2000,
        "companyname": 100,
    },
    "task": {"subject": 200, "description": 2000},
}
# Choice columns and their options (the same references).
OPTIONS: dict[str, dict[str, tuple[int, ...]]] = {
    "lead": {"leadsourcecode": tuple(range(1, 11))},
    "task": {"prioritycode": (0, 1, 2)},
}
# The app registration the token endpoint knows.
DEFAULT_CLIENT_ID = "onefold-emulator"
DEFAULT_CLIENT_SECRET = "emulator-secret"
# Service protection limits per user and web server (api-limits).
REQUESTS_PER_WINDOW = 6000
WINDOW_SECONDS = 300
CONCURRENT_REQUESTS = 52
TASK_COLUMNS = frozenset(
    {
        "subject",
        "description",
        "scheduledend",
        "prioritycode",
        "regardingobjectid_lead_task@odata.bind",
        "ownerid@odata.bind",
    }
)
KEY_STATUSES = ("Pending", "InProgress", "Active", "Failed")
DEFAULT_CONFIG: dict[str, Any] = {
    # EntityKeyIndexStatus of the alternate key on the reference column: Pending,
    # InProgress, Active, Failed (EntityKeyIndexStatus EnumType,
    # https://learn.microsoft.com/power-apps/developer/data-platform/webapi/reference/entitykeyindexstatus).
    "alternate_key_status": "Active",
    "reference_column": "onefold_ref",
    # The one app registration the token endpoint accepts.
    "client_id": DEFAULT_CLIENT_ID,
    "client_secret": DEFAULT_CLIENT_SECRET,
    "token_lifetime_seconds": 3599,
    "rate_limits": True,
    "requests_per_window": REQUESTS_PER_WINDOW,
    "window_seconds": WINDOW_SECONDS,
    "concurrent_requests": CONCURRENT_REQUESTS,
    # Custom columns an admin added to the lead table (publisher prefix, `new_`): a
    # fresh org has one; a test sets others.
    "custom_columns": ["new_budget"],
}
MAX_PAGE_SIZE = 5000
# Lead columns Dataverse sets itself: listed by the Attributes query, never writable
# on create (AttributeMetadata.IsValidForCreate false).
_SYSTEM_LEAD_COLUMNS = ("leadid", "fullname", "createdon", "modifiedon", "statecode", "ownerid")
# The org's users at start (the systemuser table: systemuserid, fullname,
# internalemailaddress, isdisabled;
# https://learn.microsoft.com/power-apps/developer/data-platform/reference/entities/systemuser):
# the application user the app registration runs as (WhoAmI's UserId) and two people.
SEEDED_USERS = (
    (str(uuid.uuid5(uuid.NAMESPACE_URL, "onefold-app")), "# onefold-app", ""),
    ("5d1e1c2a-6b7f-4c8e-9a01-0a11ce000001", "Ana Lima", "ana.lima@example.com"),
    ("5d1e1c2a-6b7f-4c8e-9a01-0a11ce000002", "Ben Okafor", "ben.okafor@example.com"),
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS dv_leads (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    leadid TEXT NOT NULL UNIQUE,
    ref TEXT,
    data TEXT NOT NULL,
    createdon TEXT NOT NULL,
    modifiedon TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    statecode INTEGER NOT NULL DEFAULT 0,
    merged INTEGER NOT NULL DEFAULT 0,
    masterid TEXT
);
CREATE TABLE IF NOT EXISTS dv_tasks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    activityid TEXT NOT NULL UNIQUE,
    regarding TEXT,
    ref TEXT,
    data TEXT NOT NULL,
    createdon TEXT NOT NULL,
    modifiedon TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS dv_config (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class DataverseError(Exception):
    """An answer in Dataverse's error shape {"error": {"code", "message"}}
    (https://learn.microsoft.com/power-apps/developer/data-platform/webapi/compose-http-requests-handle-errors)."""

    def __init__(self, status: int, message: str, code: str = "", **headers: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers

    def reply(self) -> Reply:
        body = {"error": {"code": self.code, "message": self.message}}
        return Reply(self.status, body, {"OData-Version": "4.0", **self.headers})


def now_stamp() -> str:
    """Dataverse date-times: UTC, whole seconds, a Z."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def not_found(entity: str, record_id: str) -> DataverseError:
    # "account With Id = ... Does Not Exist" (Prevent create in upsert,
    # https://learn.microsoft.com/power-apps/developer/data-platform/webapi/perform-conditional-operations-using-web-api).
    return DataverseError(404, f"{entity} With Id = {record_id} Does Not Exist", "0x80040217")


def record_exists() -> DataverseError:
    # If-None-Match: * on an existing record: 412 (Prevent update in upsert, same page).
    return DataverseError(412, "A record with matching key values already exists.")


class DataverseStore(SandboxStore):
    """The sandbox store (faults, chaos, calls) plus leads, tasks, config and tokens."""

    def __init__(self, db_path: str | None = None) -> None:
        super().__init__(db_path)
        with self._lock:
            self._conn.executescript(_SCHEMA)
        # token -> (expiry, the client id it was issued to: the "user" limits count).
        self._tokens: dict[str, tuple[float, str]] = {}
        self._tokens_lock = threading.Lock()
        self._window = RollingWindow(REQUESTS_PER_WINDOW, WINDOW_SECONDS)
        self._in_flight: dict[str, int] = {}
        self._users: list[dict[str, Any]] = _seeded_users()

    def reset(self) -> None:
        super().reset()
        with self._transaction() as db:
            for table in ("dv_leads", "dv_tasks", "dv_config"):
                db.execute(f"DELETE FROM {table}")
        self.revoke_tokens()
        self._window.clear()
        with self._lock:
            self._users = _seeded_users()

    # -- metadata and users ----------------------------------------------------

    def lead_columns(self) -> frozenset[str]:
        """The lead columns a create may write: the known ones, the custom ones and the
        reference column."""
        config = self.config()
        return LEAD_COLUMNS | set(config["custom_columns"]) | {config["reference_column"]}

    def lead_attributes(self) -> list[dict[str, Any]]:
        """EntityDefinitions(LogicalName='lead')/Attributes: each column's AttributeMetadata
        (LogicalName, SchemaName, AttributeType, IsCustomAttribute, IsValidForCreate;
        https://learn.microsoft.com/power-apps/developer/data-platform/webapi/query-metadata-web-api)."""
        config = self.config()
        custom = set(config["custom_columns"]) | {config["reference_column"]}
        writable = sorted(self.lead_columns())
        return [
            {
                "@odata.type": "#Microsoft.Dynamics.CRM.StringAttributeMetadata",
                "LogicalName": name,
                "SchemaName": name,
                "AttributeType": "String",
                "IsCustomAttribute": name in custom,
                "IsValidForCreate": name not in _SYSTEM_LEAD_COLUMNS,
                "MetadataId": str(uuid.uuid5(uuid.NAMESPACE_URL, f"lead.{name}")),
            }
            for name in [*writable, *_SYSTEM_LEAD_COLUMNS]
        ]

    def users(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(user) for user in self._users]

    def add_user(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """A user added to the org (tests: POST /_sandbox/owners {"first_name",
        "last_name", "email"}), enabled, with a new GUID."""
        names = [request.get(k) for k in ("first_name", "last_name", "email")]
        if not all(isinstance(v, str) and v.strip() for v in names):
            raise InvalidInput("an owner needs first_name, last_name and email")
        user = _user(str(uuid.uuid4()), f"{names[0]} {names[1]}", str(names[2]))
        with self._lock:
            self._users.append(user)
        return dict(user)

    # -- configuration and tokens --------------------------------------------

    def config(self) -> dict[str, Any]:
        with self._lock:
            rows = self._conn.execute("SELECT name, value FROM dv_config").fetchall()
        current = dict(DEFAULT_CONFIG)
        current.update({row["name"]: json.loads(row["value"]) for row in rows})
        return current

    def set_config(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        changes = dict(changes)
        if changes.pop("revoke_tokens", False) is True:
            self.revoke_tokens()
        unknown = set(changes) - set(DEFAULT_CONFIG)
        if unknown:
            raise InvalidInput(f"unknown settings: {', '.join(sorted(unknown))}")
        if changes.get("alternate_key_status", "Active") not in KEY_STATUSES:
            raise InvalidInput(f"alternate_key_status must be one of {', '.join(KEY_STATUSES)}")
        for name in (
            "token_lifetime_seconds",
            "requests_per_window",
            "window_seconds",
            "concurrent_requests",
        ):
            value = changes.get(name, 1)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(f"{name} must be a whole number >= 0")
        if not isinstance(changes.get("rate_limits", True), bool):
            raise InvalidInput("rate_limits must be true or false")
        columns = changes.get("custom_columns", [])
        if not isinstance(columns, list) or not all(
            isinstance(c, str) and re.fullmatch(r"[a-z]+_[a-z0-9_]+", c) for c in columns
        ):
            raise InvalidInput("custom_columns is a list of logical names with a prefix (new_x)")
        for name in ("client_id", "client_secret"):
            if name in changes and not isinstance(changes[name], str):
                raise InvalidInput(f"{name} must be a string")
        with self._transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO dv_config (name, value) VALUES (?, ?)",
                [(name, json.dumps(value)) for name, value in changes.items()],
            )
        return self.config()

    def issue_token(self, client_id: str) -> tuple[str, int]:
        lifetime = int(self.config()["token_lifetime_seconds"])
        token = "eyJ0eXAiOiJKV1Qi." + secrets.token_urlsafe(32)
        with self._tokens_lock:
            self._tokens[token] = (time.monotonic() + lifetime, client_id)
        return token, lifetime

    def token_user(self, token: str) -> str | None:
        """The client id a live token was issued to, else None."""
        with self._tokens_lock:
            issued = self._tokens.get(token)
        if issued is None or time.monotonic() >= issued[0]:
            return None
        return issued[1]

    # -- service protection limits (api-limits) --------------------------------------------

    def enter(self, user: str) -> DataverseError | None:
        """One request of `user` begins: counted among its concurrent requests and in its
        sliding window, or refused as the module's docstring says (then not counted).
        A request admitted must `leave`."""
        config = self.config()
        if not config["rate_limits"]:
            return None
        with self._tokens_lock:
            limit = int(config["concurrent_requests"])
            if self._in_flight.get(user, 0) >= limit:
                return DataverseError(
                    429,
                    f"Number of concurrent requests exceeded the limit of {limit}.",
                    "0x80072326",
                    **{"Retry-After": "1"},
                )
            self._window.limit = int(config["requests_per_window"])
            self._window.seconds = float(config["window_seconds"])
            waited = self._window.take(user)
            if waited is not None:
                return DataverseError(
                    429,
                    f"Number of requests exceeded the limit of {self._window.limit} over time "
                    f"window of {config['window_seconds']} seconds.",
                    "0x80072322",
                    **{"Retry-After": str(max(1, math.ceil(waited)))},
                )
            self._in_flight[user] = self._in_flight.get(user, 0) + 1
        return None

    def leave(self, user: str) -> None:
        with self._tokens_lock:
            if self._in_flight.get(user, 0) > 0:
                self._in_flight[user] -= 1

    def requests_left(self, user: str) -> int:
        return self._window.remaining(user)

    def revoke_tokens(self) -> None:
        with self._tokens_lock:
            self._tokens.clear()

    # -- leads ---------------------------------------------------------------

    def lead(self, key: str) -> dict[str, Any]:
        """A lead by its GUID or by `column='value'` on the alternate key."""
        with self._lock:
            row = self._lead_row(self._conn, key)
        return self._dv_lead_dict(row)

    def put_lead(self, leadid: str, body: Mapping[str, Any], *, condition: str) -> bool:
        """PATCH leads(id): `condition` "create" (If-None-Match: *), "update" (If-Match:
        *) or "upsert" (neither). Returns True when it created the lead."""
        ref_column = self.config()["reference_column"]
        _check_columns(body, self.lead_columns(), "lead")
        _check_values(body, "lead")
        stamp = now_stamp()
        with self._transaction() as db:
            row = db.execute("SELECT * FROM dv_leads WHERE leadid = ?", (leadid,)).fetchone()
            if row is not None and condition == "create":
                raise record_exists()
            if row is None and condition == "update":
                raise not_found("lead", leadid)
            ref = body.get(ref_column, row["ref"] if row is not None else None)
            self._check_unique_ref(db, ref, leadid)
            if row is None:
                db.execute(
                    "INSERT INTO dv_leads (leadid, ref, data, createdon, modifiedon) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (leadid, ref, json.dumps(dict(body)), stamp, stamp),
                )
                return True
            data = {**json.loads(row["data"]), **body}
            db.execute(
                "UPDATE dv_leads SET ref = ?, data = ?, modifiedon = ?, version = version + 1 "
                "WHERE leadid = ?",
                (ref, json.dumps(data), stamp, leadid),
            )
        return False

    def delete_lead(self, leadid: str) -> None:
        with self._transaction() as db:
            if db.execute("DELETE FROM dv_leads WHERE leadid = ?", (leadid,)).rowcount == 0:
                raise not_found("lead", leadid)
            # Lead_Tasks cascades Delete (lead EntityType relationships).
            db.execute("DELETE FROM dv_tasks WHERE regarding = ?", (leadid,))

    def list_leads(
        self, conditions: list[tuple[str, str, Any]], after: tuple[str, str] | None, size: int
    ) -> tuple[list[dict[str, Any]], tuple[str, str] | None]:
        """A page of leads matching every condition, by (createdon, leadid)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM dv_leads ORDER BY createdon, leadid"
            ).fetchall()
        leads = [self._dv_lead_dict(row) for row in rows]
        matching = [lead for lead in leads if all(_holds(lead, *c) for c in conditions)]
        if after is not None:
            matching = [lead for lead in matching if (lead["createdon"], lead["leadid"]) > after]
        page = matching[:size]
        more = len(matching) > size
        return page, ((page[-1]["createdon"], page[-1]["leadid"]) if more else None)

    def merge(self, target: str, subordinate: str, update: Mapping[str, Any]) -> None:
        """The Merge action (https://learn.microsoft.com/power-apps/developer/data-platform/webapi/merge-entity-using-web-api):
        the subordinate is deactivated, marked merged, its master set; its tasks move to
        the target (Lead_Tasks cascades Merge)."""
        if target == subordinate:
            raise DataverseError(400, "The target and the subordinate must differ.")
        _check_columns(update, self.lead_columns(), "lead")
        stamp = now_stamp()
        with self._transaction() as db:
            rows = {
                key: db.execute("SELECT * FROM dv_leads WHERE leadid = ?", (key,)).fetchone()
                for key in (target, subordinate)
            }
            for key, row in rows.items():
                if row is None:
                    raise not_found("lead", key)
            if rows[subordinate]["merged"] or rows[target]["merged"]:
                raise DataverseError(400, "A merged (inactive) lead cannot be merged again.")
            data = {**json.loads(rows[target]["data"]), **update}
            db.execute(
                "UPDATE dv_leads SET data = ?, modifiedon = ?, version = version + 1 "
                "WHERE leadid = ?",
                (json.dumps(data), stamp, target),
            )
            # Deactivated: a merged lead is closed as Disqualified (statecode 2; unverified).
            db.execute(
                "UPDATE dv_leads SET merged = 1, masterid = ?, statecode = 2, modifiedon = ?, "
                "version = version + 1 WHERE leadid = ?",
                (target, stamp, subordinate),
            )
            db.execute(
                "UPDATE dv_tasks SET regarding = ? WHERE regarding = ?", (target, subordinate)
            )

    # -- tasks ---------------------------------------------------------------

    def task(self, activityid: str) -> dict[str, Any]:
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM dv_tasks WHERE activityid = ?", (activityid,)
            ).fetchone()
        if row is None:
            raise not_found("task", activityid)
        return self._dv_task_dict(row)

    def tasks_regarding(self, leadid: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM dv_tasks WHERE regarding = ? ORDER BY createdon, activityid",
                (leadid,),
            ).fetchall()
        return [self._dv_task_dict(row) for row in rows]

    def put_task(self, activityid: str, body: Mapping[str, Any], *, condition: str) -> bool:
        """PATCH tasks(id), with the same conditions as `put_lead`."""
        ref_column = self.config()["reference_column"]
        _check_columns(body, TASK_COLUMNS | {ref_column}, "task")
        _check_values(body, "task")
        regarding = _bound_lead(body.get("regardingobjectid_lead_task@odata.bind"))
        stamp = now_stamp()
        with self._transaction() as db:
            if (
                regarding is not None
                and db.execute("SELECT 1 FROM dv_leads WHERE leadid = ?", (regarding,)).fetchone()
                is None
            ):
                raise not_found("lead", regarding)
            row = db.execute(
                "SELECT * FROM dv_tasks WHERE activityid = ?", (activityid,)
            ).fetchone()
            if row is not None and condition == "create":
                raise record_exists()
            if row is None and condition == "update":
                raise not_found("task", activityid)
            if row is None:
                db.execute(
                    "INSERT INTO dv_tasks "
                    "(activityid, regarding, ref, data, createdon, modifiedon) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        activityid,
                        regarding,
                        body.get(ref_column),
                        json.dumps(dict(body)),
                        stamp,
                        stamp,
                    ),
                )
                return True
            data = {**json.loads(row["data"]), **body}
            db.execute(
                "UPDATE dv_tasks SET regarding = COALESCE(?, regarding), ref = ?, data = ?, "
                "modifiedon = ? WHERE activityid = ?",
                (regarding, data.get(ref_column), json.dumps(data), stamp, activityid),
            )
        return False

    # -- inspection ----------------------------------------------------------

    def stats(self, *, detail: bool = True) -> dict[str, Any]:
        """The sandbox's keys: live (unmerged) leads and the tasks regarding them, each
        counted by the reference column's value; no messages."""
        result = super().stats(detail=detail)
        with self._lock:
            leads = self._conn.execute("SELECT ref FROM dv_leads WHERE merged = 0").fetchall()
            tasks = self._conn.execute(
                "SELECT dv_tasks.ref FROM dv_tasks JOIN dv_leads "
                "ON dv_leads.leadid = dv_tasks.regarding WHERE dv_leads.merged = 0"
            ).fetchall()
        result.update(records=len(leads), tasks=len(tasks), messages=0)
        if detail:
            result.update(
                records_by_external_ref=_count(row["ref"] for row in leads),
                tasks_by_external_ref=_count(row["ref"] for row in tasks),
                messages_by_recipient={},
                messages_by_message_id={},
            )
        return result

    # -- helpers -------------------------------------------------------------

    def _check_unique_ref(self, db: sqlite3.Connection, ref: Any, leadid: str) -> None:
        """The alternate key: enforced only once its index is Active ("Alternate keys are
        built asynchronously and work only once Active", docs/vendor-facts.md)."""
        config = self.config()
        if ref is None or config["alternate_key_status"] != "Active":
            return
        clash = db.execute(
            "SELECT leadid FROM dv_leads WHERE ref = ? AND leadid != ? AND merged = 0",
            (ref, leadid),
        ).fetchone()
        if clash is not None:
            column = config["reference_column"]
            # 412 DuplicateRecord naming the key, not the record (docs/vendor-facts.md;
            # the status of this case is unverified).
            raise DataverseError(
                412,
                f"A record that has the attribute values {column} already exists. The entity "
                f"key {column}_key requires that this set of attributes contains unique "
                "values. Select unique values and try again.",
                "0x80060892",
            )

    def _lead_row(self, db: sqlite3.Connection, key: str) -> sqlite3.Row:
        if _GUID.fullmatch(key):
            found: sqlite3.Row | None = db.execute(
                "SELECT * FROM dv_leads WHERE leadid = ?", (key.lower(),)
            ).fetchone()
            if found is None:
                raise not_found("lead", key)
            return found
        match = _ALTERNATE_KEY.fullmatch(key)
        config = self.config()
        if match is None or match.group("column") != config["reference_column"]:
            raise DataverseError(400, f"Invalid key segment: {key}", "0x80060888")
        if config["alternate_key_status"] != "Active":
            # Unverified wording; third-party reports say a key that is not Active is a 400.
            raise DataverseError(
                400, f"The entity key {match.group('column')}_key is not active yet.", "0x80060891"
            )
        value = unquote(match.group("value")).replace("''", "'")
        row: sqlite3.Row | None = db.execute(
            "SELECT * FROM dv_leads WHERE ref = ? AND merged = 0 ORDER BY seq LIMIT 1", (value,)
        ).fetchone()
        if row is None:
            raise DataverseError(
                404,
                "A record with the specified key values does not exist in lead entity",
                "0x80040217",
            )
        return row

    def _dv_lead_dict(self, row: sqlite3.Row) -> dict[str, Any]:
        data = json.loads(row["data"])
        names = [data.get("firstname"), data.get("lastname")]
        return {
            "@odata.etag": f'W/"{row["version"]}"',
            **data,
            "leadid": row["leadid"],
            self.config()["reference_column"]: row["ref"],
            "fullname": " ".join(n for n in names if n),
            "createdon": row["createdon"],
            "modifiedon": row["modifiedon"],
            "statecode": row["statecode"],
            "merged": bool(row["merged"]),
            "_masterid_value": row["masterid"],
        }

    def _dv_task_dict(self, row: sqlite3.Row) -> dict[str, Any]:
        data = json.loads(row["data"])
        data.pop("regardingobjectid_lead_task@odata.bind", None)
        return {
            **data,
            "activityid": row["activityid"],
            self.config()["reference_column"]: row["ref"],
            "_regardingobjectid_value": row["regarding"],
            "createdon": row["createdon"],
            "modifiedon": row["modifiedon"],
        }


def _user(systemuserid: str, fullname: str, email: str) -> dict[str, Any]:
    first, _, last = fullname.partition(" ")
    return {
        "systemuserid": systemuserid,
        "fullname": fullname,
        "firstname": first,
        "lastname": last,
        "internalemailaddress": email,
        "isdisabled": False,
    }


def _seeded_users() -> list[dict[str, Any]]:
    return [_user(*user) for user in SEEDED_USERS]


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        if value is not None:
            counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items()))


def _check_columns(
    body: Mapping[str, Any], allowed: frozenset[str] | set[str], entity: str
) -> None:
    for name in body:
        if name not in allowed:
            raise DataverseError(
                400,
                f"Invalid property '{name}' was found in entity 'Microsoft.Dynamics.CRM.{entity}'.",
                "0x80060888",
            )


def _check_values(body: Mapping[str, Any], entity: str) -> None:
    """Choice options and text lengths, as the module's docstring says."""
    for name, options in OPTIONS[entity].items():
        value = body.get(name)
        if value is not None and value not in options:
            accepted = ",".join(str(option) for option in options)
            raise DataverseError(
                400,
                f"A validation error occurred. The value {value} of '{name}' on record of type "
                f"'{entity}' is outside the valid range. Accepted Values: {accepted}",
                "0x8004431A",
            )
    for name, limit in MAX_LENGTHS[entity].items():
        value = body.get(name)
        if isinstance(value, str) and len(value) > limit:
            raise DataverseError(
                400,
                f"A validation error occurred. The length of the '{name}' attribute of the "
                f"'{entity}' entity exceeded the maximum allowed length of '{limit}'.",
                "0x80044331",
            )


def _bound_lead(value: Any) -> str | None:
    """`/leads(<guid>)` of an @odata.bind (associate on create, Web API docs)."""
    if value is None:
        return None
    match = re.fullmatch(r"/?leads\((" + _GUID.pattern + r")\)", str(value))
    if match is None:
        raise DataverseError(400, f"Invalid @odata.bind value: {value}", "0x80060888")
    return match.group(1).lower()


_CONDITION = re.compile(
    r"(?P<name>[\w@.]+) (?P<op>eq|ne|ge|gt|le|lt) (?P<value>'(?:[^']|'')*'|\S+)"
)


def parse_filter(text: str | None) -> list[tuple[str, str, Any]]:
    """The part of OData's $filter this emulator serves: comparisons joined by `and`
    (https://learn.microsoft.com/power-apps/developer/data-platform/webapi/query/filter-rows)."""
    if not text:
        return []
    conditions = []
    for part in re.split(r"\s+and\s+", text.strip()):
        match = _CONDITION.fullmatch(part.strip())
        if match is None:
            raise DataverseError(400, f"Could not parse the $filter clause: {part}", "0x80060888")
        raw = match.group("value")
        value: Any
        if raw.startswith("'"):
            value = raw[1:-1].replace("''", "'")
        elif raw in ("true", "false"):
            value = raw == "true"
        elif raw == "null":
            value = None
        else:
            value = _normalised_instant(raw) if "T" in raw else raw
        conditions.append((match.group("name"), match.group("op"), value))
    return conditions


def _normalised_instant(raw: str) -> str:
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise DataverseError(400, f"Invalid date-time literal: {raw}", "0x80060888") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "ge": lambda a, b: a is not None and a >= b,
    "gt": lambda a, b: a is not None and a > b,
    "le": lambda a, b: a is not None and a <= b,
    "lt": lambda a, b: a is not None and a < b,
}


def _holds(record: Mapping[str, Any], name: str, op: str, value: Any) -> bool:
    return _OPERATORS[op](record.get(name), value)


def _encode_skiptoken(after: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode("|".join(after).encode()).decode().rstrip("=")


def _decode_skiptoken(token: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        createdon, leadid = raw.split("|")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise DataverseError(400, "Invalid $skiptoken", "0x80060888") from None
    return createdon, leadid


class DataverseRequestHandler(SandboxRequestHandler):
    """Dataverse's Web API paths and the token endpoint; the sandbox's controls."""

    server_version = "OnefoldDataverseEmulator/1"
    routes: list[Route] = [
        (re.compile(r"/(?P<tenant>[^/]+)/oauth2/v2\.0/token"), {"POST": "dv_token_post"}),
        (
            re.compile(
                re.escape(API) + r"/EntityDefinitions\(LogicalName='(?P<entity>\w+)'\)/Keys"
            ),
            {"GET": "dv_keys_get"},
        ),
        (
            re.compile(
                re.escape(API) + r"/EntityDefinitions\(LogicalName='(?P<entity>\w+)'\)/Attributes"
            ),
            {"GET": "dv_attributes_get"},
        ),
        (re.compile(re.escape(API) + r"/systemusers"), {"GET": "dv_systemusers_get"}),
        (re.compile(r"/_sandbox/owners"), {"POST": "owners_post"}),
        (re.compile(re.escape(API) + r"/WhoAmI"), {"GET": "dv_whoami_get"}),
        (re.compile(re.escape(API) + r"/leads"), {"GET": "dv_leads_get"}),
        (
            re.compile(re.escape(API) + r"/leads\((?P<key>[^/]+)\)"),
            {"GET": "dv_lead_get", "PATCH": "dv_lead_patch", "DELETE": "dv_lead_delete"},
        ),
        (re.compile(re.escape(API) + r"/tasks"), {"GET": "dv_tasks_get"}),
        (
            re.compile(re.escape(API) + r"/tasks\((?P<key>[^/]+)\)"),
            {"GET": "dv_task_get", "PATCH": "dv_task_patch"},
        ),
        (re.compile(re.escape(API) + r"/Merge"), {"POST": "dv_merge_post"}),
        (re.compile(r"/_sandbox/config"), {"GET": "config_get", "POST": "config_post"}),
        *CONTROL_ROUTES,
    ]

    @property
    def dataverse(self) -> DataverseStore:
        store = self.server.store
        assert isinstance(store, DataverseStore)
        return store

    def _answer(
        self, work: Callable[[], Reply], *, authorized: bool = True, counted: str = ""
    ) -> Reply:
        """Runs `work` behind the bearer token and the user's service protection
        limits; Dataverse's errors become answers. The call is `counted` under its
        action once the token is accepted; a refused token is counted "unauthorized",
        whatever the call asked (nothing was read or written)."""
        if not authorized:
            return self._run(work)
        try:
            user = self._authorize()
        except DataverseError as exc:
            self.store.count_call("unauthorized")
            return exc.reply()
        if counted:
            self.store.count_call(counted)
        refused = self.dataverse.enter(user)
        if refused is not None:
            return refused.reply()
        try:
            reply = self._run(work)
        finally:
            self.dataverse.leave(user)
        if self.dataverse.config()["rate_limits"]:
            remaining = str(self.dataverse.requests_left(user))
            reply.headers.setdefault("x-ms-ratelimit-burst-remaining-xrm-requests", remaining)
        return reply

    @staticmethod
    def _run(work: Callable[[], Reply]) -> Reply:
        try:
            return work()
        except DataverseError as exc:
            return exc.reply()

    def _authorize(self) -> str:
        """Every Web API call needs `Authorization: Bearer <token>` from Entra ID
        (https://learn.microsoft.com/power-apps/developer/data-platform/authenticate-oauth);
        a missing, expired or revoked token is 401 with WWW-Authenticate. Returns the
        user the limits count: the client id the token was issued to."""
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        user = self.dataverse.token_user(token) if scheme.lower() == "bearer" else None
        if user is None:
            tenant_url = f"http://{self.headers.get('Host', 'localhost')}/emulator-tenant"
            raise DataverseError(
                401,
                "The bearer token is missing, expired or not valid.",
                **{"WWW-Authenticate": f'Bearer authorization_uri="{tenant_url}/oauth2/authorize"'},
            )
        return user

    def _condition(self) -> str:
        """If-None-Match: * only creates, If-Match: * only updates, neither upserts
        (Limit upsert operations, perform-conditional-operations-using-web-api)."""
        if (self.headers.get("If-None-Match") or "").strip() == "*":
            return "create"
        if (self.headers.get("If-Match") or "").strip() == "*":
            return "update"
        return "upsert"

    def _written(self, entity_set: str, record_id: str) -> Reply:
        # 204 with OData-EntityId naming the record (create-entity-web-api).
        url = f"http://{self.headers.get('Host', 'localhost')}{API}/{entity_set}({record_id})"
        return Reply(204, None, {"OData-EntityId": url, "OData-Version": "4.0"})

    def _selected(self, record: dict[str, Any], always: tuple[str, ...]) -> dict[str, Any]:
        select = self._param("$select")
        if not select:
            return record
        wanted = {name.strip() for name in select.split(",")} | set(always)
        return {k: v for k, v in record.items() if k in wanted}

    # -- token endpoint ------------------------------------------------------

    def dv_token_post(self, tenant: str) -> Reply:
        """Client credentials grant (https://learn.microsoft.com/entra/identity-platform/v2-oauth2-client-creds-grant-flow):
        200 {"token_type": "Bearer", "expires_in", "ext_expires_in", "access_token"};
        an unknown client id 400 unauthorized_client (AADSTS700016), a wrong secret
        401 invalid_client (AADSTS7000215); a scope that is not `<resource>/.default`
        400 invalid_scope."""
        self.store.count_call("token")
        form = {k: v[-1] for k, v in parse_qs(self.raw_body.decode(errors="replace")).items()}
        config = self.dataverse.config()
        if form.get("grant_type") != "client_credentials":
            return Reply(
                400, {"error": "unsupported_grant_type", "error_description": "AADSTS70003"}
            )
        client_id = form.get("client_id", "")
        if client_id != config["client_id"]:
            return Reply(
                400,
                {
                    "error": "unauthorized_client",
                    "error_description": f"AADSTS700016: Application with identifier "
                    f"'{client_id}' was not found in the directory '{tenant}'.",
                },
            )
        if form.get("client_secret", "") != config["client_secret"]:
            return Reply(
                401,
                {
                    "error": "invalid_client",
                    "error_description": "AADSTS7000215: Invalid client secret provided.",
                },
            )
        if not form.get("scope", "").endswith("/.default"):
            return Reply(400, {"error": "invalid_scope", "error_description": "AADSTS1002012"})
        token, lifetime = self.dataverse.issue_token(client_id)
        body = {
            "token_type": "Bearer",
            "expires_in": lifetime,
            "ext_expires_in": lifetime,
            "access_token": token,
        }
        return Reply(200, body)

    # -- metadata ------------------------------------------------------------

    def dv_keys_get(self, entity: str) -> Reply:
        """EntityDefinitions(LogicalName='lead')/Keys: the alternate key on the reference
        column with its EntityKeyIndexStatus (EntityKeyMetadata EntityType)."""

        def work() -> Reply:
            if entity not in ("lead", "task"):
                raise DataverseError(404, f"Could not find entity with name {entity}", "0x80040217")
            config = self.dataverse.config()
            column = config["reference_column"]
            keys = (
                [
                    {
                        "LogicalName": f"{column}_key",
                        "SchemaName": f"{column}_key",
                        "KeyAttributes": [column],
                        "EntityKeyIndexStatus": config["alternate_key_status"],
                        "MetadataId": str(uuid.uuid5(uuid.NAMESPACE_URL, column)),
                    }
                ]
                if entity == "lead"
                else []
            )
            return Reply(
                200,
                {
                    "@odata.context": f"{API}/$metadata#EntityDefinitions('{entity}')/Keys",
                    "value": keys,
                },
            )

        return self._answer(work)

    def dv_attributes_get(self, entity: str) -> Reply:
        """EntityDefinitions(LogicalName='lead')/Attributes with $select: the lead's columns
        (query-metadata-web-api). Answered whole: definitions are not paged (the page
        lists no server-driven paging for them)."""

        def work() -> Reply:
            if entity != "lead":
                raise DataverseError(404, f"Could not find entity with name {entity}", "0x80040217")
            attributes = [
                self._selected(a, ("MetadataId", "@odata.type"))
                for a in self.dataverse.lead_attributes()
            ]
            context = f"{API}/$metadata#EntityDefinitions('{entity}')/Attributes"
            return Reply(200, {"@odata.context": context, "value": attributes})

        return self._answer(work)

    def dv_systemusers_get(self) -> Reply:
        """GET systemusers with $select, $filter and `Prefer: odata.maxpagesize=N`:
        the org's users by systemuserid, paged by @odata.nextLink with a $skiptoken
        (https://learn.microsoft.com/power-apps/developer/data-platform/webapi/query/page-results;
        the systemuser table's columns:
        https://learn.microsoft.com/power-apps/developer/data-platform/reference/entities/systemuser)."""

        def work() -> Reply:
            size = self._page_size()
            conditions = parse_filter(self._param("$filter"))
            token = self._param("$skiptoken")
            after = _decode_skiptoken(token)[1] if token else ""
            users = sorted(
                (
                    u
                    for u in self.dataverse.users()
                    if u["systemuserid"] > after and all(_holds(u, *c) for c in conditions)
                ),
                key=lambda u: u["systemuserid"],
            )
            page = users[:size]
            body: dict[str, Any] = {
                "@odata.context": f"{API}/$metadata#systemusers",
                "value": [self._selected(u, ("systemuserid",)) for u in page],
            }
            if len(users) > size:
                query = {k: v[-1] for k, v in self.query.items() if k != "$skiptoken"}
                query["$skiptoken"] = _encode_skiptoken(("", page[-1]["systemuserid"]))
                host = self.headers.get("Host", "localhost")
                body["@odata.nextLink"] = f"http://{host}{API}/systemusers?{urlencode(query)}"
            return Reply(200, body, {"Preference-Applied": f"odata.maxpagesize={size}"})

        return self._answer(work)

    def owners_post(self) -> Reply:
        try:
            return Reply(200, self.dataverse.add_user(self._json_body()))
        except InvalidInput as exc:
            return DataverseError(400, exc.detail).reply()

    def dv_whoami_get(self) -> Reply:
        return self._answer(
            lambda: Reply(200, {"UserId": str(uuid.uuid5(uuid.NAMESPACE_URL, "onefold-app"))})
        )

    # -- leads ---------------------------------------------------------------

    def dv_lead_get(self, key: str) -> Reply:
        return self._answer(
            lambda: Reply(200, self._selected(self.dataverse.lead(key), ("leadid",))),
            counted="lookup_record",
        )

    def dv_lead_patch(self, key: str) -> Reply:
        condition = self._condition()
        leadid = unquote(key).lower()

        def work() -> Reply:
            if not _GUID.fullmatch(leadid):
                raise DataverseError(
                    400, "This emulator writes leads by their GUID only.", "0x80060888"
                )
            self.dataverse.put_lead(leadid, self._json_body(), condition=condition)
            return self._written("leads", leadid)

        if condition != "create":
            return self._answer(work, counted="update_record")
        return self._answer(
            lambda: self._faulted("create_record", lambda: self._answer(work, authorized=False)),
            counted="create_record",
        )

    def dv_lead_delete(self, key: str) -> Reply:
        def work() -> Reply:
            self.dataverse.delete_lead(unquote(key).lower())
            return Reply(204, None)

        return self._answer(work, counted="delete_record")

    def dv_leads_get(self) -> Reply:
        """Server-driven paging: `Prefer: odata.maxpagesize=N`, `@odata.nextLink` with a
        $skiptoken (https://learn.microsoft.com/power-apps/developer/data-platform/webapi/query/page-results).
        Rows come in (createdon, leadid) order whatever $orderby says."""

        def work() -> Reply:
            size = self._page_size()
            token = self._param("$skiptoken")
            page, after = self.dataverse.list_leads(
                parse_filter(self._param("$filter")),
                _decode_skiptoken(token) if token else None,
                size,
            )
            body: dict[str, Any] = {
                "@odata.context": f"{API}/$metadata#leads",
                "value": [self._selected(lead, ("leadid",)) for lead in page],
            }
            if after is not None:
                query = {k: v[-1] for k, v in self.query.items() if k != "$skiptoken"}
                query["$skiptoken"] = _encode_skiptoken(after)
                host = self.headers.get("Host", "localhost")
                body["@odata.nextLink"] = f"http://{host}{API}/leads?{urlencode(query)}"
            headers = {"Preference-Applied": f"odata.maxpagesize={size}"}
            return Reply(200, body, headers)

        return self._answer(work, counted="list_records")

    def _page_size(self) -> int:
        match = re.search(r"odata\.maxpagesize=(\d+)", self.headers.get("Prefer") or "")
        return max(1, min(MAX_PAGE_SIZE, int(match.group(1)))) if match else MAX_PAGE_SIZE

    # -- tasks ---------------------------------------------------------------

    def dv_task_get(self, key: str) -> Reply:
        return self._answer(
            lambda: Reply(
                200, self._selected(self.dataverse.task(unquote(key).lower()), ("activityid",))
            ),
            counted="lookup_task",
        )

    def dv_tasks_get(self) -> Reply:
        def work() -> Reply:
            conditions = parse_filter(self._param("$filter"))
            regarding = [
                v for name, op, v in conditions if name == "_regardingobjectid_value" and op == "eq"
            ]
            if not regarding:
                raise DataverseError(
                    400, "This emulator lists tasks by _regardingobjectid_value only."
                )
            tasks = self.dataverse.tasks_regarding(str(regarding[0]).lower())
            tasks = [t for t in tasks if all(_holds(t, *c) for c in conditions)]
            return Reply(200, {"value": [self._selected(t, ("activityid",)) for t in tasks]})

        return self._answer(work)

    def dv_task_patch(self, key: str) -> Reply:
        condition = self._condition()
        activityid = unquote(key).lower()

        def work() -> Reply:
            if not _GUID.fullmatch(activityid):
                raise DataverseError(400, "Tasks are written by their GUID.", "0x80060888")
            self.dataverse.put_task(activityid, self._json_body(), condition=condition)
            return self._written("tasks", activityid)

        if condition != "create":
            return self._answer(work)
        return self._answer(
            lambda: self._faulted("create_task", lambda: self._answer(work, authorized=False)),
            counted="create_task",
        )

    # -- merge ---------------------------------------------------------------

    def dv_merge_post(self) -> Reply:
        def work() -> Reply:
            body = self._json_body()
            target, subordinate = (
                _lead_reference(body.get(name)) for name in ("Target", "Subordinate")
            )
            if not isinstance(body.get("PerformParentingChecks"), bool):
                raise DataverseError(400, "PerformParentingChecks is required.", "0x80060888")
            update = {
                k: v
                for k, v in (body.get("UpdateContent") or {}).items()
                if not k.startswith("@odata.")
            }
            self.dataverse.merge(target, subordinate, update)
            return Reply(204, None, {"OData-Version": "4.0"})

        return self._answer(work, counted="merge_record")

    # -- faults in Dataverse's words -----------------------------------------

    def fault_reply_before_commit(self, fault: Fault) -> Reply | None:
        retry_after = str(max(1, math.ceil(fault.seconds)))
        if fault.mode == "http_429":
            # Service protection limits: 429 with Retry-After
            # (https://learn.microsoft.com/power-apps/developer/data-platform/api-limits).
            return DataverseError(
                429,
                "Number of requests exceeded the limit of 6000 over time window of 300 seconds.",
                "0x80072322",
                **{"Retry-After": retry_after},
            ).reply()
        if fault.mode == "http_503":
            return DataverseError(
                503, "Service unavailable.", **{"Retry-After": retry_after}
            ).reply()
        if fault.mode == "http_400":
            return DataverseError(400, "Injected validation error.", "0x80040203").reply()
        if fault.mode == "fail_before_commit":
            return DataverseError(500, "An unexpected error occurred.", "0x80040216").reply()
        return None

    def fault_reply_after_commit(self, fault: Fault) -> Reply:
        return DataverseError(500, "An unexpected error occurred.", "0x80040216").reply()

    # -- controls ------------------------------------------------------------

    def config_get(self) -> Reply:
        return Reply(200, self.dataverse.config())

    def config_post(self) -> Reply:
        return Reply(200, self.dataverse.set_config(self._json_body()))


def _lead_reference(value: Any) -> str:
    """A Merge parameter: {"@odata.type": "Microsoft.Dynamics.CRM.lead", "leadid": ...}."""
    if not isinstance(value, dict) or value.get("@odata.type") != "Microsoft.Dynamics.CRM.lead":
        raise DataverseError(400, "Target and Subordinate must be Microsoft.Dynamics.CRM.lead.")
    leadid = str(value.get("leadid") or "")
    if not _GUID.fullmatch(leadid):
        raise DataverseError(400, "Target and Subordinate need a leadid.", "0x80060888")
    return leadid.lower()


class DataverseEmulator(EmulatorServer):
    """Dataverse (and its token endpoint) on loopback: the org URL is `http_url`, the
    token URL `f"{http_url}/<tenant>/oauth2/v2.0/token"`."""

    vendor = "dataverse"
    handler_class = DataverseRequestHandler
    store_class = DataverseStore

    @property
    def token_url(self) -> str:
        return f"{self.http_url}/emulator-tenant/oauth2/v2.0/token"

    def adapter_env(self) -> dict[str, str]:
        """The DATAVERSE_* variables that point the adapter at this emulator as it starts
        (after a reset): its URLs and the app registration its token endpoint knows."""
        return {
            "DATAVERSE_URL": self.http_url,
            "DATAVERSE_CLIENT_ID": DEFAULT_CLIENT_ID,
            "DATAVERSE_CLIENT_SECRET": DEFAULT_CLIENT_SECRET,
            "DATAVERSE_TOKEN_URL": self.token_url,
        }
