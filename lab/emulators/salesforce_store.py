"""State of the Salesforce emulator: sObject rows, tokens, query cursors and org settings.

The sandbox's store (faults, chaos, call counts) is the base; the Salesforce
objects live beside it in memory, behind the same lock. Every answer is built
here as `(status, body)` in Salesforce's own shapes; the HTTP layer
(`emulator.py`) only routes, authenticates and applies faults.

Sources, cited once here and by name on each behaviour below:

- [UPSERT] REST API Developer Guide, "Insert or Update (Upsert) a Record Using
  an External ID": https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/dome_upsert.htm
  (201 created / 200 `"created": false` from API 46.0, 204 before; 300 when the
  value matches several records; 404 NOT_FOUND for a bad field).
- [ERRORS] "Status Codes and Error Responses":
  https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/errorcodes.htm
  (errors are a JSON array of `{"message", "errorCode", "fields"}`; 403
  REQUEST_LIMIT_EXCEEDED; 401 for an expired or invalid session).
- [VENDOR] docs/vendor-facts.md, "Salesforce (REST API)" (DUPLICATE_VALUE text
  with the id, DUPLICATES_DETECTED under `duplicateResut`, restforce#243).
- [DUPRULE] "Duplicate Rule Header" (API 52.0+):
  https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api/headers_duplicaterules.htm
  and the DuplicateResult object (allowSave, duplicateRule, matchResults).
- [ASSIGN] "Assignment Rule Header": https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api/headers_autoassign.htm
  (Sforce-Auto-Assign; absent means TRUE, on create and on update of a Lead).
- [QUERY] "Query" and "Query More Results" (nextRecordsUrl, done, totalSize;
  batches of 200 to 2,000 by `Sforce-Query-Options: batchSize=`).
- [IDS] "ID Field Type" (15-character case-sensitive ids, 18-character
  case-safe ids with a 3-character suffix; key prefixes 00Q Lead, 003 Contact,
  00T Task).
- [LIMITS] "API Request Limits and Allocations":
  https://developer.salesforce.com/docs/platform/salesforce-app-limits-cheatsheet/guide/salesforce-app-limits-platform-api.html
  (a total API request allocation per 24 hours, 15,000 for Developer Edition,
  100,000 plus 1,000 per licence for Enterprise; past it REQUEST_LIMIT_EXCEEDED),
  and Setup's "System Overview: API Usage":
  https://help.salesforce.com/s/articleView?id=xcloud.setup_system_overview_api.htm
  ("Limits are enforced against the aggregate of all API calls made to the org in
  a 24-hour period ... Calls are blocked until usage for the preceding 24 hours
  drops below the limit"). Usage travels in `Sforce-Limit-Info: api-usage=N/M`
  ("Limit Info Header":
  https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/headers_api_usage.htm).
- [OAUTH] "OAuth 2.0 Client Credentials Flow for Server-to-Server Integration":
  https://help.salesforce.com/s/articleView?id=sf.remoteaccess_oauth_client_credentials_flow.htm
  (a wrong consumer key is 400 `invalid_client_id`, a wrong secret 400
  `invalid_client`, RFC 6749 5.2).
- [DESCRIBE] "sObject Describe":
  https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/resources_sobject_describe.htm
  (`fields[]` with each field's `name`, `label`, `type`, `custom`, `createable`,
  `updateable`); custom fields end in `__c` ("Custom Fields",
  https://developer.salesforce.com/docs/atlas.en-us.object_reference.meta/object_reference/custom_fields.htm).
- [USERS] The User object (`Id` with key prefix 005, `Name`, `FirstName`, `LastName`,
  `Email`, `IsActive`):
  https://developer.salesforce.com/docs/atlas.en-us.object_reference.meta/object_reference/sforce_api_objects_user.htm;
  a record's or task's `OwnerId` names one. Queried like any object ([QUERY]).
- [FIELDS] The Lead, Contact and Task objects (Object Reference:
  https://developer.salesforce.com/docs/atlas.en-us.object_reference.meta/object_reference/sforce_api_objects_lead.htm,
  ..._contact.htm, ..._task.htm): Email is of type email, checked as an address
  (INVALID_EMAIL_ADDRESS in the StatusCode list,
  https://developer.salesforce.com/docs/atlas.en-us.api.meta/api/sforce_api_calls_concepts_core_data_objects.htm);
  Status, LeadSource and Priority are picklists, refused outside their values when
  the picklist is restricted ("Restrict picklist to the values defined in the value
  set", INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST "bad value for restricted picklist
  field"); the values are a new org's defaults; string lengths as each object's
  reference gives them (STRING_TOO_LONG).
"""

from __future__ import annotations

import copy
import operator
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from lab.emulators.limits import RollingWindow
from lab.sandbox.store import SandboxStore

RECORD_OBJECTS = ("Lead", "Contact")
KEY_PREFIXES = {"Lead": "00Q", "Contact": "003", "Task": "00T", "User": "005"}
# The emulated org's API user and the queue its lead assignment rule assigns to.
API_USER_ID = "0055g00000ApIUsAAN"
# [USERS] The org's users at start: the integration user and two people; tests add
# others with POST /_sandbox/owners.
SEEDED_USERS = (
    (API_USER_ID, "Onefold", "Integration", "integration@example.com"),
    ("0055g00000AnaLiAAJ", "Ana", "Lima", "ana.lima@example.com"),
    ("0055g00000BenOkAAJ", "Ben", "Okafor", "ben.okafor@example.com"),
)
ASSIGNMENT_QUEUE_ID = "00G5g00000LeadQAAA"
# The connected app's consumer key and secret the token endpoint accepts ([OAUTH]).
DEFAULT_CLIENT_ID = "onefold-emulator"
DEFAULT_CLIENT_SECRET = "emulator-secret"
# [LIMITS]: Developer Edition's allocation, the smallest a real org has.
DEFAULT_API_USAGE_LIMIT = 15_000
API_USAGE_WINDOW_SECONDS = 24 * 3600
DEFAULT_CONFIG: dict[str, Any] = {
    "client_id": DEFAULT_CLIENT_ID,
    "client_secret": DEFAULT_CLIENT_SECRET,
    "reference_field": "Onefold_Ref__c",
    # The field's describe flags on Lead and Contact, and on Task.
    "reference_external_id": True,
    "reference_unique": True,
    "task_reference_external_id": True,
    "task_reference_unique": True,
    # A duplicate rule matching Lead (or Contact) on Email: off, alert or block.
    "duplicate_rule": "off",
    # Seconds between an upsert's match and its insert (the race window).
    "upsert_race_seconds": 0.0,
    # [LIMITS] The org's API requests in any 24 hours (a test lifts it with a large one).
    "api_usage_limit": DEFAULT_API_USAGE_LIMIT,
    # [FIELDS] Status, LeadSource and Priority refuse values outside their lists.
    "restricted_picklists": True,
    # [DESCRIBE] Custom fields an admin created, by object (the reference field apart):
    # a fresh org has one on Lead and Contact; a test sets others.
    "custom_fields": {"Lead": ["Budget__c"], "Contact": ["Budget__c"]},
}
_BOOL_CONFIG = {
    "restricted_picklists",
    "reference_external_id",
    "reference_unique",
    "task_reference_external_id",
    "task_reference_unique",
}
_FIELDS: dict[str, tuple[str, ...]] = {
    "Lead": (
        "FirstName",
        "LastName",
        "Company",
        "Email",
        "Phone",
        "Description",
        "LeadSource",
        "Status",
        "OwnerId",
    ),
    "Contact": ("FirstName", "LastName", "Email", "Phone", "Description", "LeadSource", "OwnerId"),
    "Task": (
        "Subject",
        "WhoId",
        "WhatId",
        "Status",
        "Priority",
        "ActivityDate",
        "Description",
        "OwnerId",
    ),
    "User": ("FirstName", "LastName", "Name", "Email", "Username", "IsActive"),
}
_REQUIRED = {
    "Lead": ("LastName", "Company"),
    "Contact": ("LastName",),
    "Task": (),
    "User": ("LastName", "Email", "Username"),
}
_DEFAULTS: dict[str, dict[str, Any]] = {
    "Lead": {"Status": "Open - Not Contacted"},
    "Contact": {},
    "Task": {"Status": "Not Started", "Priority": "Normal"},
    "User": {"IsActive": True},
}
# [DESCRIBE] Fields set by Salesforce, never by a create.
_NOT_CREATEABLE = {"User": ("Name",)}
# [FIELDS] A new org's picklist values.
_PICKLISTS: dict[str, dict[str, tuple[str, ...]]] = {
    "Lead": {
        "Status": (
            "Open - Not Contacted",
            "Working - Contacted",
            "Closed - Converted",
            "Closed - Not Converted",
        ),
        "LeadSource": ("Web", "Phone Inquiry", "Partner Referral", "Purchased List", "Other"),
    },
    "Contact": {
        "LeadSource": ("Web", "Phone Inquiry", "Partner Referral", "Purchased List", "Other"),
    },
    "Task": {
        "Status": (
            "Not Started",
            "In Progress",
            "Completed",
            "Waiting on someone else",
            "Deferred",
        ),
        "Priority": ("High", "Normal", "Low"),
    },
    "User": {},
}
# [FIELDS] Maximum lengths of the text fields the emulator keeps.
_LENGTHS: dict[str, dict[str, int]] = {
    "Lead": {"FirstName": 40, "LastName": 80, "Company": 255, "Email": 80, "Phone": 40},
    "Contact": {"FirstName": 40, "LastName": 80, "Email": 80, "Phone": 40},
    "Task": {"Subject": 255, "Description": 32000},
    "User": {"FirstName": 40, "LastName": 80, "Email": 128, "Username": 80},
}
# An address as Salesforce's email type takes it: a local part, @, a dotted domain.
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_LABELS = {"FirstName": "First Name", "LastName": "Last Name", "LeadSource": "Lead Source"}
_SYSTEM_FIELDS = ("Id", "CreatedDate", "LastModifiedDate")
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SUFFIX = "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"
_DUPLICATE_MESSAGE = (
    "You're creating a duplicate record. We recommend you use an existing record instead."
)


class Refused(Exception):
    """An answer other than success, in Salesforce's shape."""

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or {}


def sf_error(status: int, code: str, message: str, fields: list[str] | None = None) -> Refused:
    """[ERRORS]: a JSON array of error objects."""
    error: dict[str, Any] = {"message": message, "errorCode": code}
    if fields is not None:
        error["fields"] = fields
    return Refused(status, [error])


def not_found() -> Refused:
    return sf_error(404, "NOT_FOUND", "The requested resource does not exist")


def case_safe_id(id15: str) -> str:
    """[IDS]: the 18-character form: one suffix letter per 5 characters, whose bits
    say which of them are upper case."""
    suffix = ""
    for start in range(0, 15, 5):
        bits = sum(1 << i for i, ch in enumerate(id15[start : start + 5]) if "A" <= ch <= "Z")
        suffix += _SUFFIX[bits]
    return id15 + suffix


def sf_datetime(moment: datetime | None = None) -> str:
    """Salesforce's JSON dateTime: 2026-11-29T10:15:00.000+0000."""
    moment = moment or datetime.now(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}+0000"


def _parse_sf_datetime(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("+0000", "+00:00"))


class SalesforceStore(SandboxStore):
    """The emulated org. All Salesforce state is guarded by the sandbox store's lock."""

    def __init__(self, db_path: str | None = None) -> None:
        super().__init__(db_path)
        self._sf_lock = threading.RLock()
        self._clear_org()

    def _clear_org(self) -> None:
        with self._sf_lock:
            self.config: dict[str, Any] = copy.deepcopy(DEFAULT_CONFIG)
            self.rows: dict[str, dict[str, dict[str, Any]]] = {o: {} for o in KEY_PREFIXES}
            for user_id, first, last, email in SEEDED_USERS:
                self.rows["User"][user_id] = _user_row(user_id, first, last, email)
            self.assignments: dict[str, int] = {}
            self.tokens: set[str] = set()
            self.locators: dict[str, list[dict[str, Any]]] = {}
            self.api_requests = RollingWindow(DEFAULT_API_USAGE_LIMIT, API_USAGE_WINDOW_SECONDS)
            self._seq = 0

    def reset(self) -> None:
        super().reset()
        self._clear_org()

    # -- org settings ----------------------------------------------------------

    def set_config(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(changes) - set(DEFAULT_CONFIG)
        if unknown:
            raise sf_error(400, "INVALID_FIELD", f"unknown settings: {', '.join(sorted(unknown))}")
        for name, value in changes.items():
            if name in _BOOL_CONFIG and not isinstance(value, bool):
                raise sf_error(400, "INVALID_FIELD", f"{name} must be true or false")
            if name == "api_usage_limit" and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise sf_error(400, "INVALID_FIELD", "api_usage_limit is a whole number >= 0")
            if name == "duplicate_rule" and value not in ("off", "alert", "block"):
                raise sf_error(400, "INVALID_FIELD", "duplicate_rule is off, alert or block")
            if name == "custom_fields" and not (
                isinstance(value, dict)
                and set(value) <= {"Lead", "Contact", "Task"}
                and all(
                    isinstance(names, list)
                    and all(isinstance(n, str) and re.fullmatch(r"\w+__c", n) for n in names)
                    for names in value.values()
                )
            ):
                raise sf_error(
                    400, "INVALID_FIELD", "custom_fields is {object: [names ending in __c]}"
                )
        with self._sf_lock:
            self.config.update(changes)
            return dict(self.config)

    def spend_api_request(self) -> Refused | None:
        """[LIMITS] One API request against the org's allocation for the last 24 hours,
        or, with it spent, 403 REQUEST_LIMIT_EXCEEDED ("TotalRequests Limit exceeded.")
        and nothing counted: calls stay blocked until the usage of the preceding 24
        hours drops below the limit, as the oldest of them age out."""
        with self._sf_lock:
            self.api_requests.limit = int(self.config["api_usage_limit"])
            if self.api_requests.take("org") is None:
                return None
        refusal = [
            {"message": "TotalRequests Limit exceeded.", "errorCode": "REQUEST_LIMIT_EXCEEDED"}
        ]
        return Refused(403, refusal, {"Sforce-Limit-Info": self.limit_info()})

    def limit_info(self) -> str:
        """[LIMITS] Sforce-Limit-Info, sent on every API answer: the requests of the
        last 24 hours against the allocation."""
        with self._sf_lock:
            used = self.api_requests.used("org")
            return f"api-usage={used}/{self.config['api_usage_limit']}"

    # -- OAuth -----------------------------------------------------------------

    def issue_token(self, form: Mapping[str, str], instance_url: str) -> dict[str, Any]:
        """[OAUTH] The client credentials flow: 400 invalid_client_id for a consumer key
        the org does not know, 400 invalid_client for a wrong secret (RFC 6749 5.2);
        Salesforce's token answer carries no expires_in."""
        if form.get("grant_type") != "client_credentials":
            raise Refused(
                400,
                {
                    "error": "unsupported_grant_type",
                    "error_description": "grant type not supported",
                },
            )
        with self._sf_lock:
            if form.get("client_id") != self.config["client_id"]:
                raise Refused(
                    400,
                    {
                        "error": "invalid_client_id",
                        "error_description": "client identifier invalid",
                    },
                )
            if form.get("client_secret") != self.config["client_secret"]:
                raise Refused(
                    400,
                    {"error": "invalid_client", "error_description": "invalid client credentials"},
                )
            token = "00D5g000004Emul!" + secrets.token_urlsafe(24)
            self.tokens.add(token)
        return {
            "access_token": token,
            "instance_url": instance_url,
            "id": f"{instance_url}/id/00D5g000004EmulEAA/{API_USER_ID}",
            "token_type": "Bearer",
            "issued_at": str(int(time.time() * 1000)),
            "signature": secrets.token_urlsafe(16),
            "scope": "api",
        }

    def token_valid(self, authorization: str | None) -> bool:
        scheme, _, token = (authorization or "").partition(" ")
        with self._sf_lock:
            return scheme.lower() == "bearer" and token in self.tokens

    def expire_tokens(self) -> int:
        """Every session ends (as when an admin revokes them, or they time out)."""
        with self._sf_lock:
            count = len(self.tokens)
            self.tokens.clear()
            return count

    # -- ids and rows ------------------------------------------------------------

    def _new_id(self, sobject: str) -> str:
        self._seq += 1
        number = self._seq * 7_919_777 + 48_271
        digits = ""
        while number:
            number, rest = divmod(number, 62)
            digits = _BASE62[rest] + digits
        return case_safe_id((KEY_PREFIXES[sobject] + "5g0" + digits.rjust(9, "0"))[:15])

    def _find_id(self, sobject: str, record_id: str) -> str | None:
        """[IDS]: a 15-character id names the same row as its 18-character form."""
        if len(record_id) not in (15, 18):
            return None
        for existing in self.rows[sobject]:
            if existing[:15] == record_id[:15]:
                return existing
        return None

    def _ref_field(self, sobject: str) -> str:
        return str(self.config["reference_field"])

    def _field_flags(self, sobject: str) -> tuple[bool, bool]:
        """(externalId, unique) of the reference field on `sobject`."""
        prefix = "task_reference" if sobject == "Task" else "reference"
        return bool(self.config[f"{prefix}_external_id"]), bool(self.config[f"{prefix}_unique"])

    def _matching(self, sobject: str, value: str) -> list[str]:
        field = self._ref_field(sobject)
        return [rid for rid, row in self.rows[sobject].items() if row.get(field) == value]

    def record_json(self, sobject: str, record_id: str, version: str) -> dict[str, Any]:
        row = self.rows[sobject][record_id]
        return {"attributes": _attributes(sobject, record_id, version), **row}

    def _known_object(self, sobject: str) -> None:
        if sobject not in KEY_PREFIXES:
            raise not_found()

    def add_user(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """[USERS] A user added to the org (tests: POST /_sandbox/owners {"first_name",
        "last_name", "email"}), active; answered with its row."""
        names = {k: request.get(k) for k in ("first_name", "last_name", "email")}
        if not all(isinstance(v, str) and v.strip() for v in names.values()):
            raise sf_error(400, "REQUIRED_FIELD_MISSING", "first_name, last_name and email")
        with self._sf_lock:
            user_id = self._new_id("User")
            row = _user_row(user_id, names["first_name"], names["last_name"], names["email"])
            self.rows["User"][user_id] = row
            return dict(row)

    def _custom_fields(self, sobject: str) -> tuple[str, ...]:
        return tuple(self.config["custom_fields"].get(sobject) or ())

    def _check_fields(self, sobject: str, body: Mapping[str, Any]) -> None:
        allowed = (
            set(_FIELDS[sobject]) | set(self._custom_fields(sobject)) | {self._ref_field(sobject)}
        ) - set(_NOT_CREATEABLE.get(sobject, ()))
        for name in body:
            if name not in allowed:
                # [ERRORS]: INVALID_FIELD names the column and the object.
                raise sf_error(
                    400,
                    "INVALID_FIELD",
                    f"No such column '{name}' on sobject of type {sobject}",
                    [],
                )
        self._check_values(sobject, body)

    def _check_values(self, sobject: str, body: Mapping[str, Any]) -> None:
        """[FIELDS]: lengths, the email type and restricted picklists, in Salesforce's
        errors, each naming the field by its label and listing it in `fields`."""
        for name, limit in _LENGTHS[sobject].items():
            value = body.get(name)
            if isinstance(value, str) and len(value) > limit:
                raise sf_error(
                    400,
                    "STRING_TOO_LONG",
                    f"{_label(name)}: data value too large: {value[:40]} (max length={limit})",
                    [name],
                )
        email = body.get("Email")
        if email and not (isinstance(email, str) and _EMAIL.fullmatch(email)):
            raise sf_error(
                400, "INVALID_EMAIL_ADDRESS", f"Email: invalid email address: {email}", ["Email"]
            )
        if not self.config["restricted_picklists"]:
            return
        for name, values in _PICKLISTS[sobject].items():
            value = body.get(name)
            if value is not None and value not in values:
                raise sf_error(
                    400,
                    "INVALID_OR_NULL_FOR_RESTRICTED_PICKLIST",
                    f"{_label(name)}: bad value for restricted picklist field: {value}",
                    [name],
                )

    def _insert(self, sobject: str, body: Mapping[str, Any], *, auto_assign: bool) -> str:
        missing = [f for f in _REQUIRED[sobject] if not body.get(f)]
        if missing:
            raise sf_error(
                400,
                "REQUIRED_FIELD_MISSING",
                f"Required fields are missing: [{', '.join(missing)}]",
                missing,
            )
        if sobject == "Task" and body.get("WhoId") and not self._who_exists(str(body["WhoId"])):
            raise sf_error(
                400, "INVALID_CROSS_REFERENCE_KEY", "invalid cross reference id", ["WhoId"]
            )
        record_id = self._new_id(sobject)
        stamp = sf_datetime()
        row = {"Id": record_id, **_DEFAULTS[sobject], "OwnerId": API_USER_ID, **body}
        row.update(CreatedDate=stamp, LastModifiedDate=stamp)
        self.rows[sobject][record_id] = row
        if sobject == "Lead" and auto_assign:
            self._assign(record_id)
        return record_id

    def _assign(self, record_id: str) -> None:
        """[ASSIGN]: the org's active lead assignment rule hands the lead to a queue."""
        self.rows["Lead"][record_id]["OwnerId"] = ASSIGNMENT_QUEUE_ID
        self.assignments[record_id] = self.assignments.get(record_id, 0) + 1

    def _update(
        self, sobject: str, record_id: str, body: Mapping[str, Any], *, auto_assign: bool
    ) -> None:
        row = self.rows[sobject][record_id]
        row.update(body)
        row["LastModifiedDate"] = sf_datetime()
        if sobject == "Lead" and auto_assign:
            self._assign(record_id)

    def _who_exists(self, who_id: str) -> bool:
        return any(self._find_id(o, who_id) for o in RECORD_OBJECTS)

    # -- the API -----------------------------------------------------------------

    def upsert(
        self,
        sobject: str,
        field: str,
        value: str,
        body: Mapping[str, Any],
        *,
        version: str,
        auto_assign: bool,
        allow_save: bool,
    ) -> tuple[int, Any]:
        """[UPSERT] by an external id: no match creates, one updates, several answer 300.

        Like the real one, it is not atomic: the match is read, then (after
        `upsert_race_seconds`) the row inserted; a unique field refuses the second
        of two racing inserts with DUPLICATE_VALUE ([VENDOR]), a field that is not
        unique takes both (restforce#243)."""
        self._known_object(sobject)
        self._external_field(sobject, field)
        self._check_fields(sobject, body)
        with self._sf_lock:
            matches = self._matching(sobject, value)
            if len(matches) > 1:
                raise Refused(300, [_attributes(sobject, m, version)["url"] for m in matches])
            if matches:
                self._update(sobject, matches[0], body, auto_assign=auto_assign)
                return _upserted(matches[0], created=False, version=version)
        race = float(self.config["upsert_race_seconds"])
        if race > 0:
            time.sleep(race)
        with self._sf_lock:
            row = {**body, self._ref_field(sobject): value}
            record_id = self._create_checked(
                sobject, row, auto_assign=auto_assign, allow_save=allow_save, version=version
            )
            return _upserted(record_id, created=True, version=version)

    def _external_field(self, sobject: str, field: str) -> None:
        """[UPSERT]: a field that is not an External ID cannot key an upsert or a read.
        The exact answer for an existing field without the flag is *unverified*;
        404 NOT_FOUND as for a bad field is what the adapter treats safely."""
        external_id, _ = self._field_flags(sobject)
        if field != self._ref_field(sobject) or not external_id:
            raise sf_error(
                404,
                "NOT_FOUND",
                f"Provided external ID field does not exist or is not accessible: {field}",
            )

    def _create_checked(
        self,
        sobject: str,
        row: Mapping[str, Any],
        *,
        auto_assign: bool,
        allow_save: bool,
        version: str,
    ) -> str:
        field = self._ref_field(sobject)
        _, unique = self._field_flags(sobject)
        value = row.get(field)
        if unique and value is not None:
            held = self._matching(sobject, str(value))
            if held:
                # [VENDOR]: the id of the record holding the value is only in the text.
                raise sf_error(
                    400,
                    "DUPLICATE_VALUE",
                    f"duplicate value found: {field} duplicates value on record with id: {held[0]}",
                    [],
                )
        self._duplicate_rule(sobject, row, allow_save=allow_save, version=version)
        return self._insert(sobject, row, auto_assign=auto_assign)

    def _duplicate_rule(
        self, sobject: str, row: Mapping[str, Any], *, allow_save: bool, version: str
    ) -> None:
        """[VENDOR]/[DUPRULE]: a rule matching on Email, run on create. Through the API an
        alerting rule blocks too, unless the request says allowSave=true."""
        mode = self.config["duplicate_rule"]
        email = str(row.get("Email") or "").strip().lower()
        if mode == "off" or sobject not in RECORD_OBJECTS or not email:
            return
        matches = [
            rid
            for rid, existing in self.rows[sobject].items()
            if str(existing.get("Email") or "").strip().lower() == email
        ]
        if not matches or (mode == "alert" and allow_save):
            return
        raise Refused(
            400, [_duplicates_detected(sobject, matches, alert=mode == "alert", version=version)]
        )

    def create(
        self,
        sobject: str,
        body: Mapping[str, Any],
        *,
        version: str,
        auto_assign: bool,
        allow_save: bool,
    ) -> tuple[int, Any]:
        """POST /sobjects/{sobject}: 201 {"id", "success", "errors"}."""
        self._known_object(sobject)
        self._check_fields(sobject, body)
        with self._sf_lock:
            record_id = self._create_checked(
                sobject, body, auto_assign=auto_assign, allow_save=allow_save, version=version
            )
        return 201, {"id": record_id, "success": True, "errors": []}

    def get_by_ref(self, sobject: str, field: str, value: str, *, version: str) -> tuple[int, Any]:
        """[UPSERT] "Retrieve a Record Using an External ID": 200, 300 or 404."""
        self._known_object(sobject)
        self._external_field(sobject, field)
        with self._sf_lock:
            matches = self._matching(sobject, value)
            if len(matches) > 1:
                raise Refused(300, [_attributes(sobject, m, version)["url"] for m in matches])
            if not matches:
                raise not_found()
            return 200, self.record_json(sobject, matches[0], version)

    def get(self, sobject: str, record_id: str, *, version: str) -> tuple[int, Any]:
        self._known_object(sobject)
        with self._sf_lock:
            found = self._find_id(sobject, record_id)
            if found is None:
                raise not_found()
            return 200, self.record_json(sobject, found, version)

    def update(
        self, sobject: str, record_id: str, body: Mapping[str, Any], *, auto_assign: bool
    ) -> tuple[int, Any]:
        """PATCH /sobjects/{sobject}/{id}: 204."""
        self._known_object(sobject)
        self._check_fields(sobject, body)
        with self._sf_lock:
            found = self._find_id(sobject, record_id)
            if found is None:
                raise not_found()
            self._update(sobject, found, body, auto_assign=auto_assign)
        return 204, None

    def delete(self, sobject: str, record_id: str) -> tuple[int, Any]:
        self._known_object(sobject)
        with self._sf_lock:
            found = self._find_id(sobject, record_id)
            if found is None:
                raise not_found()
            del self.rows[sobject][found]
        return 204, None

    def describe(self, sobject: str) -> tuple[int, Any]:
        """GET /sobjects/{sobject}/describe: the fields with their flags (externalId,
        unique, idLookup), as an admin set them."""
        self._known_object(sobject)
        with self._sf_lock:
            external_id, unique = self._field_flags(sobject)
            fields = [_describe_field(name, name == "Id") for name in _SYSTEM_FIELDS[:1]]
            fields += [
                _describe_field(
                    name,
                    picklist=_PICKLISTS[sobject].get(name),
                    restricted=bool(self.config["restricted_picklists"]),
                    length=_LENGTHS[sobject].get(name, 255),
                    createable=name not in (*_SYSTEM_FIELDS, *_NOT_CREATEABLE.get(sobject, ())),
                )
                for name in (*_FIELDS[sobject], *self._custom_fields(sobject), *_SYSTEM_FIELDS[1:])
            ]
            if sobject != "User":
                ref = _describe_field(self._ref_field(sobject))
                ref.update(externalId=external_id, unique=unique, idLookup=external_id or unique)
                fields.append(ref)
        return 200, {
            "name": sobject,
            "keyPrefix": KEY_PREFIXES[sobject],
            "createable": True,
            "updateable": True,
            "fields": fields,
        }

    # -- query -------------------------------------------------------------------

    def query(self, soql: str, *, version: str, batch_size: int) -> tuple[int, Any]:
        """[QUERY] The subset of SOQL the adapter sends: SELECT fields FROM object
        [WHERE field op literal [AND ...]] [ORDER BY fields]."""
        select, sobject, conditions, order = _parse_soql(soql)
        self._known_object(sobject)
        with self._sf_lock:
            rows = [r for r in self.rows[sobject].values() if all(c(r) for c in conditions)]
            rows.sort(key=lambda r: tuple(str(r.get(f, "")) for f in order))
            records = [
                {
                    "attributes": _attributes(sobject, r["Id"], version),
                    **{f: r.get(f) for f in select},
                }
                for r in rows
            ]
            locator = "01g5g00000" + secrets.token_hex(4)
            self.locators[locator] = records
        return 200, self._page(locator, 0, version=version, batch_size=batch_size)

    def query_more(self, locator_offset: str, *, version: str, batch_size: int) -> tuple[int, Any]:
        locator, _, offset = locator_offset.rpartition("-")
        with self._sf_lock:
            if locator not in self.locators or not offset.isdigit():
                raise sf_error(400, "INVALID_QUERY_LOCATOR", "invalid query locator")
            return 200, self._page(locator, int(offset), version=version, batch_size=batch_size)

    def _page(self, locator: str, offset: int, *, version: str, batch_size: int) -> dict[str, Any]:
        records = self.locators[locator]
        page = records[offset : offset + batch_size]
        done = offset + batch_size >= len(records)
        body: dict[str, Any] = {"totalSize": len(records), "done": done, "records": page}
        if not done:
            body["nextRecordsUrl"] = (
                f"/services/data/v{version}/query/{locator}-{offset + batch_size}"
            )
        return body

    # -- tests' seeding and counting ---------------------------------------------

    def seed_rows(self, sobject: str, rows: list[Mapping[str, Any]]) -> list[str]:
        """Rows stored as given, past uniqueness and duplicate rules: records made
        before the field was marked Unique, or by an import."""
        self._known_object(sobject)
        created = []
        with self._sf_lock:
            for row in rows:
                self._check_fields(sobject, row)
                created.append(self._insert(sobject, dict(row), auto_assign=False))
        return created

    def stats(self, *, detail: bool = True) -> dict[str, Any]:
        """The sandbox's keys, counted over Leads and Contacts (records) and Tasks."""
        result = super().stats(detail=detail)
        with self._sf_lock:
            field = str(self.config["reference_field"])
            records = [r for o in RECORD_OBJECTS for r in self.rows[o].values()]
            tasks = list(self.rows["Task"].values())
            result["records"] = len(records)
            result["tasks"] = len(tasks)
            if detail:
                result["records_by_external_ref"] = _count_by(records, field)
                result["tasks_by_external_ref"] = _count_by(tasks, field)
                result["assignments_by_external_ref"] = {
                    str(self.rows["Lead"][rid].get(field)): n
                    for rid, n in self.assignments.items()
                    if rid in self.rows["Lead"]
                }
        return result


def _count_by(rows: list[dict[str, Any]], field: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        value = row.get(field)
        if value is not None:
            counts[str(value)] = counts.get(str(value), 0) + 1
    return dict(sorted(counts.items()))


def _attributes(sobject: str, record_id: str, version: str) -> dict[str, str]:
    return {"type": sobject, "url": f"/services/data/v{version}/sobjects/{sobject}/{record_id}"}


def _upserted(record_id: str, *, created: bool, version: str) -> tuple[int, Any]:
    """[UPSERT]: 201 on create; an update answers 200 with "created": false from
    API 46.0 and 204 without a body before it."""
    if not created and float(version) < 46.0:
        return 204, None
    body = {"id": record_id, "success": True, "errors": [], "created": created}
    return (201 if created else 200), body


def _duplicates_detected(
    sobject: str, matches: list[str], *, alert: bool, version: str
) -> dict[str, Any]:
    """[VENDOR]: the REST JSON spells the key `duplicateResut`."""
    match_records = [
        {
            "additionalInformation": [],
            "fieldDiffs": [],
            "matchConfidence": 100.0,
            "record": {"attributes": _attributes(sobject, rid, version), "Id": rid},
        }
        for rid in matches
    ]
    return {
        "duplicateResut": {
            "allowSave": alert,
            "duplicateRule": f"Onefold_{sobject}_Email_Rule",
            "duplicateRuleEntityType": sobject,
            "errorMessage": _DUPLICATE_MESSAGE,
            "matchResults": [
                {
                    "entityType": sobject,
                    "errors": [],
                    "matchEngine": "ExactMatchEngine",
                    "matchRecords": match_records,
                    "rule": f"Onefold_{sobject}_Email_Match",
                    "size": len(match_records),
                    "success": True,
                }
            ],
        },
        "errorCode": "DUPLICATES_DETECTED",
        "message": _DUPLICATE_MESSAGE,
    }


def _label(name: str) -> str:
    return _LABELS.get(name, name.removesuffix("__c").replace("_", " "))


def _user_row(user_id: str, first: Any, last: Any, email: Any) -> dict[str, Any]:
    """[USERS] A user's row: Name is Salesforce's, built from the first and last name."""
    stamp = sf_datetime()
    return {
        "Id": user_id,
        "FirstName": str(first),
        "LastName": str(last),
        "Name": f"{first} {last}",
        "Email": str(email),
        "Username": f"{email}.onefold",
        "IsActive": True,
        "CreatedDate": stamp,
        "LastModifiedDate": stamp,
    }


def _describe_field(
    name: str,
    is_id: bool = False,
    *,
    picklist: tuple[str, ...] | None = None,
    restricted: bool = False,
    length: int = 255,
    createable: bool = True,
) -> dict[str, Any]:
    """A describe field entry; picklists list their values and say whether they are
    restricted (`restrictedPicklist`, [FIELDS])."""
    kind = "id" if is_id else "picklist" if picklist else "email" if name == "Email" else "string"
    return {
        "name": name,
        "label": _label(name),
        "type": kind,
        "custom": name.endswith("__c"),
        "externalId": False,
        "unique": False,
        "idLookup": is_id,
        "caseSensitive": False,
        "createable": createable and not is_id,
        "updateable": createable and not is_id,
        "length": 18 if is_id else length,
        "restrictedPicklist": bool(picklist) and restricted,
        "picklistValues": [
            {"active": True, "defaultValue": False, "label": value, "value": value}
            for value in picklist or ()
        ],
    }


_SOQL = re.compile(
    r"SELECT\s+(?P<select>[\w\s,]+?)\s+FROM\s+(?P<sobject>\w+)"
    r"(?:\s+WHERE\s+(?P<where>.+?))?(?:\s+ORDER\s+BY\s+(?P<order>[\w\s,]+?))?\s*",
    re.IGNORECASE | re.DOTALL,
)
_CONDITION = re.compile(r"(?P<field>\w+)\s*(?P<op>>=|<=|!=|=|<|>)\s*(?P<literal>'[^']*'|\S+)")
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}


def _parse_soql(soql: str) -> tuple[list[str], str, list[Any], list[str]]:
    match = _SOQL.fullmatch(soql.strip())
    if match is None:
        raise sf_error(400, "MALFORMED_QUERY", f"unexpected query: {soql[:200]}")
    select = [f.strip() for f in match["select"].split(",") if f.strip()]
    order = [f.strip() for f in (match["order"] or "Id").split(",") if f.strip()]
    conditions = []
    for part in re.split(r"\s+AND\s+", match["where"] or "", flags=re.IGNORECASE):
        if not part.strip():
            continue
        cond = _CONDITION.fullmatch(part.strip())
        if cond is None:
            raise sf_error(400, "MALFORMED_QUERY", f"unexpected condition: {part[:200]}")
        conditions.append(_condition(cond["field"], cond["op"], cond["literal"]))
    return select, match["sobject"], conditions, order


def _condition(field: str, op: str, literal: str) -> Any:
    compare = _OPS[op]
    if _DATETIME.fullmatch(literal):
        # [QUERY] dateTime literals are unquoted; compared as instants.
        moment = datetime.fromisoformat(literal.replace("Z", "+00:00"))
        return lambda row: (
            row.get(field) is not None and compare(_parse_sf_datetime(str(row[field])), moment)
        )
    value: Any = None if literal.lower() == "null" else literal.strip("'")
    if literal.lower() in ("true", "false"):
        # Boolean literals are unquoted (SOQL "Comparison Operators"; a User's IsActive).
        value = literal.lower() == "true"
    return lambda row: compare(row.get(field), value)
