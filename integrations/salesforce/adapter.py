"""Salesforce as Onefold's CRM: the enquiry is a Lead (or a Contact), the task a Task.

Both are keyed by our reference in a custom field (`Onefold_Ref__c` by default)
that the org marks External ID and Unique on Lead/Contact and on Task. Every
behaviour relied on here is described, with its source, in store.py of the
emulator ([UPSERT], [ERRORS], [VENDOR], [DUPRULE], [ASSIGN], [QUERY], [IDS]).

Create or adopt (create_record, create_task). One call of ours is:

1. `GET /sobjects/Lead/Onefold_Ref__c/<ref>`: a record already holds our
   reference (an earlier attempt whose answer was lost): adopted, and nothing is
   written to it, so the lead assignment rule does not fire again and nothing a
   person changed since is overwritten. 300 (several hold it): a case naming them.
2. Absent: `PATCH /sobjects/Lead/Onefold_Ref__c/<ref>` (upsert by the external
   id), without `Sforce-Auto-Assign`, so the org's assignment rule runs for the
   new lead. 201: created. 200 `"created": false` or 204: another attempt
   created it between the two calls: adopted. 400 DUPLICATE_VALUE: the same race
   lost on the unique index: read again by the reference, adopted.

Every write to an existing lead (`update_record`: edits and remaps) sends
`Sforce-Auto-Assign: FALSE`: an update must not hand the lead to someone else.

What becomes a case (PERMANENT, with the ids in the message, which the engine
keeps as the attempt's text and the case's summary): 300 multiple matches
(`SalesforceMultipleMatches`), 400 DUPLICATES_DETECTED from a duplicate rule
(`SalesforceDuplicatesDetected`; where the rule only alerts, a reviewer may
create anyway with `create_record_allowing_duplicates`). A 401 fetches a new
token and asks once more.

Request limits ([LIMITS] in the emulator's store): Salesforce has no short
window, only the org's total API requests over a rolling 24 hours, shared by
every integration of the org, with usage in every answer's `Sforce-Limit-Info`.
Spent, it answers 403 REQUEST_LIMIT_EXCEEDED "TotalRequests Limit exceeded.":
a DAILY limit, asked again after `limit_retry_seconds` (an hour by default).
The window rolls, so room comes back as the calls of 24 hours earlier age out,
not at a reset moment the answer could name: an hour's wait costs at most 24
probes a day against an allocation of at least 15,000, and resumes the work
within an hour of room coming back. The same code for the limit on concurrent
long-running requests (20 seconds or longer) is a WINDOW: it clears as those
requests end.

After an unclear create the engine reads before creating again (`find_record`,
`find_task`): a GET by the external id field is a read of the record, not a
search, so a record committed a moment ago is found, and a 404 proves it absent
(`lookup_proves_absence`).

Merge: Salesforce's REST API has no merge (SOAP `merge()` does); it is not
implemented, so `capabilities.merge` is False and duplicates are merged in
Salesforce by a person.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Unpack
from urllib.parse import urlsplit

import httpx

from integrations.capabilities import Capabilities, CapabilityCheck, ConfiguredCrmNames
from integrations.env import AdapterSettings, SettingError
from integrations.http import (
    budget_hint,
    header_delay,
    json_object,
    path_segment,
    status_error,
    timeout_of,
)
from integrations.limits import RateLimit, RequestBudget
from integrations.listing import RecordListing, listing_limit
from integrations.oauth import BearerAdapter, shared_credentials
from integrations.outcomes import Classification, DestinationError, Effect, http_reply
from integrations.owners import Owner, assignee_checks, owner_id_of, task_owner
from integrations.salesforce.ids import KEY_PREFIXES, id_problem, user_id
from integrations.writes import NewRecord, NewTask, RecordUpdate, content_of

DEFAULT_API_VERSION = "62.0"
DEFAULT_REFERENCE_FIELD = "Onefold_Ref__c"
# Salesforce's API allocation is a rolling 24 hours and its 403 names no time:
# probe hourly (the module's docstring says why).
DEFAULT_LIMIT_RETRY_SECONDS = 3600.0
# The concurrent long-running request limit clears as requests of 20 seconds or
# longer end ([LIMITS]).
CONCURRENT_LIMIT_RETRY_SECONDS = 20.0
LIMITS_PAGE = (
    "https://developer.salesforce.com/docs/platform/salesforce-app-limits-cheatsheet/"
    "guide/salesforce-app-limits-platform-api.html"
)
# [FIELDS]: the lengths of the fields Onefold writes (Lead and Contact).
_NAME_LENGTHS = {"FirstName": 40, "LastName": 80, "Company": 255, "Phone": 40}
# The active users a task may be assigned to (the User object: IsActive, Name, Email,
# https://developer.salesforce.com/docs/atlas.en-us.object_reference.meta/object_reference/sforce_api_objects_user.htm).
_USERS_SOQL = "SELECT Id, Name, Email FROM User WHERE IsActive = true ORDER BY Id"


class SalesforceError(DestinationError):
    """A refusal carrying Salesforce's `errorCode` (DUPLICATE_VALUE, INVALID_FIELD, ...)."""

    def __init__(self, message: str, *, error_code: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.error_code = error_code


class SalesforceMultipleMatches(DestinationError):
    """300: our reference matches several records. A person settles which one is ours."""

    def __init__(self, message: str, record_ids: list[str]) -> None:
        super().__init__(message, classification=Classification.PERMANENT, reply=http_reply(300))
        self.record_ids = record_ids


class SalesforceDuplicatesDetected(DestinationError):
    """400 DUPLICATES_DETECTED: a duplicate rule matched existing records (a suspected
    duplicate). `allow_save` says whether the rule only alerts."""

    def __init__(self, message: str, record_ids: list[str], *, allow_save: bool, rule: str) -> None:
        super().__init__(
            message,
            classification=Classification.PERMANENT,
            reply=http_reply(400),
            matches=tuple(record_ids),
            create_anyway=allow_save,
        )
        self.record_ids = record_ids
        self.allow_save = allow_save
        self.rule = rule


@dataclass(frozen=True)
class SalesforceConfig:
    instance_url: str
    client_id: str
    client_secret: str = field(repr=False)
    sobject: str = "Lead"
    reference_field: str = DEFAULT_REFERENCE_FIELD
    task_reference_field: str = DEFAULT_REFERENCE_FIELD
    api_version: str = DEFAULT_API_VERSION
    limit_retry_seconds: float = DEFAULT_LIMIT_RETRY_SECONDS

    @property
    def token_url(self) -> str:
        return f"{self.instance_url}/services/oauth2/token"


def adapter_from_env(
    *, base_url: str | None, timeout: float, env: Mapping[str, str]
) -> SalesforceCrm:
    """The adapter from SALESFORCE_* variables (docs/destinations.md, "Salesforce").
    No network call, and no error: a setting it cannot use (named, never its value) is a RETRYABLE
    refusal of every call, so nothing is sent until the configuration is corrected.
    `base_url` (the destination's own) overrides SALESFORCE_INSTANCE_URL."""
    read = AdapterSettings(env, base_url=base_url, url_variable="SALESFORCE_INSTANCE_URL")
    required = ("SALESFORCE_INSTANCE_URL", "SALESFORCE_CLIENT_ID", "SALESFORCE_CLIENT_SECRET")
    problems = [f"{name} is not set" for name in read.missing(required)]
    sobject, limit_retry = "Lead", DEFAULT_LIMIT_RETRY_SECONDS
    try:
        sobject = read.choice("SALESFORCE_OBJECT", ("Lead", "Contact"), "Lead")
    except SettingError as exc:
        problems.append(str(exc))
    try:
        limit_retry = read.seconds("SALESFORCE_LIMIT_RETRY_SECONDS", limit_retry)
    except SettingError as exc:
        problems.append(str(exc))
    reference = read.get("SALESFORCE_REFERENCE_FIELD", DEFAULT_REFERENCE_FIELD)
    config = SalesforceConfig(
        instance_url=read.url("SALESFORCE_INSTANCE_URL"),
        client_id=read.get("SALESFORCE_CLIENT_ID"),
        client_secret=read.get("SALESFORCE_CLIENT_SECRET"),
        sobject=sobject,
        reference_field=reference,
        task_reference_field=read.get("SALESFORCE_TASK_REFERENCE_FIELD", reference),
        api_version=read.get("SALESFORCE_API_VERSION", DEFAULT_API_VERSION),
        limit_retry_seconds=limit_retry,
    )
    return SalesforceCrm(config, timeout=timeout, problems=problems)


class SalesforceCrm(BearerAdapter):
    """`CrmAdapter` for Salesforce's REST API (see the module's docstring)."""

    # The org's total API requests in any 24 hours: 15,000 for Developer Edition, the
    # smallest allocation (Enterprise: 100,000 plus 1,000 per licence); the answers'
    # Sforce-Limit-Info teaches the engine the org's own.
    request_budget: RequestBudget | None = RequestBudget(
        requests=15_000, per_seconds=24 * 3600, daily=15_000, source=LIMITS_PAGE
    )

    def __init__(
        self, config: SalesforceConfig, *, timeout: float, problems: list[str] | None = None
    ) -> None:
        self.config = config
        self.problems = list(problems or [])
        if config.sobject not in KEY_PREFIXES or config.sobject == "Task":
            self.problems.append("the enquiry object must be Lead or Contact")
        self.timeout = timeout_of(timeout)
        self.base_url = config.instance_url + self.api
        self.credentials = shared_credentials(
            config.token_url, config.client_id, config.client_secret
        )
        # Unique + External ID: a repeat finds the first record (lookup, a read by the
        # external id that proves absence) and a racing insert is refused (unique);
        # verify() checks both before use.
        self.capabilities = Capabilities(
            unique_external_ref=True, lookup=True, lookup_proves_absence=True
        )
        # Read once per adapter: the enquiry object's fields, and the org's active users.
        self._fields: dict[str, dict[str, Any]] | None = None
        self._users: list[Owner] | None = None

    @property
    def api(self) -> str:
        return f"/services/data/v{self.config.api_version}"

    # -- verification ----------------------------------------------------------------

    def verify(self) -> list[CapabilityCheck]:
        """Describes Lead (or Contact) and Task: the reference field on each must be
        External ID (lookup) and External ID plus Unique (unique_external_ref)."""
        flags = {}
        for sobject, name in (
            (self.config.sobject, self.config.reference_field),
            ("Task", self.config.task_reference_field),
        ):
            flags[sobject] = (name, self._field_flags(sobject, name))
        checks = []
        for capability, needs_unique in (("unique_external_ref", True), ("lookup", False)):
            parts, holds = [], True
            for sobject, (name, found) in flags.items():
                if found is None:
                    parts.append(f"GET {self.api}/sobjects/{sobject}/describe: no field {name}")
                    holds = False
                    continue
                external_id, unique = found
                ok = external_id and (unique or not needs_unique)
                holds = holds and ok
                parts.append(
                    f"GET {self.api}/sobjects/{sobject}/describe: {name} "
                    f"externalId={str(external_id).lower()} unique={str(unique).lower()}"
                )
            how = "; ".join(parts)
            if not holds:
                how += (
                    f" (mark {self.config.reference_field} External ID and Unique on "
                    f"{self.config.sobject} and Task in Setup, Object Manager)"
                )
            checks.append(CapabilityCheck(capability, holds, how))
        return checks

    def _field_flags(self, sobject: str, name: str) -> tuple[bool, bool] | None:
        response = self._call("GET", f"/sobjects/{sobject}/describe")
        for entry in json_object(response).get("fields", []):
            if isinstance(entry, dict) and entry.get("name") == name:
                return entry.get("externalId") is True, entry.get("unique") is True
        return None

    # -- the configuration's names (check_destinations) --------------------------------

    def names_check(self, names: ConfiguredCrmNames) -> list[CapabilityCheck]:
        """A Lead (or Contact) is the enquiry and its person in one object, so enquiry and
        contact properties alike are its fields: each must be a field of `GET
        .../sobjects/Lead/describe` (`fields[].name`, the API name, `Budget__c`;
        https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/resources_sobject_describe.htm)
        that can be written on create (`createable`). Assignees against the org's active
        users (SOQL on User), by id, email or name."""
        checks = names.property_checks(self._field_verdict, self._field_verdict)
        return checks + assignee_checks(
            names.assignees, self._active_users, asked=self._users_asked
        )

    @property
    def _users_asked(self) -> str:
        return f"GET {self.api}/query ({_USERS_SOQL})"

    def _field_verdict(self, name: str) -> tuple[bool, str]:
        where = f"GET {self.api}/sobjects/{self.config.sobject}/describe"
        fields = self._described_fields()
        found = fields.get(name)
        if found is None:
            # Salesforce's API names ignore case, the emulator's do not: name the
            # spelling the describe gives.
            alike = [n for n in fields if n.casefold() == name.casefold()]
            hint = f" (the field is spelled {alike[0]})" if alike else ""
            return False, f"{where}: no field {name!r}{hint}"
        if found.get("createable") is False:
            return False, f"{where}: {name!r} cannot be written on create (createable=false)"
        return True, f"{where}: {name!r} is a field ({found.get('label') or name})"

    def _described_fields(self) -> dict[str, dict[str, Any]]:
        if self._fields is None:
            response = self._call("GET", f"/sobjects/{self.config.sobject}/describe")
            self._fields = {
                str(entry["name"]): entry
                for entry in json_object(response).get("fields", [])
                if isinstance(entry, dict) and entry.get("name")
            }
        return self._fields

    def _active_users(self) -> list[Owner]:
        """The org's active users, every page of the query (nextRecordsUrl), read once."""
        if self._users is None:
            first = self._call("GET", "/query", params={"q": _USERS_SOQL})
            self._users = [
                Owner(
                    id=str(r["Id"]), name=str(r.get("Name") or ""), email=str(r.get("Email") or "")
                )
                for records, _ in self._query_pages(first)
                for r in records
                if r.get("Id")
            ]
        return self._users

    def _owner_id(self, assignee: str) -> str:
        """The user id a configured assignee names: a user id (005...) as it is, else the
        active user found by email or name; none: PERMANENT, naming it."""
        return owner_id_of(
            assignee,
            self._active_users,
            asked=self._users_asked,
            is_id=user_id,
        )

    # -- records ---------------------------------------------------------------------

    def create_record(self, **record: Unpack[NewRecord]) -> Effect:
        """`allow_duplicate`: a reviewer's decision on a suspected duplicate whose rule
        only alerts: the same create, with `Sforce-Duplicate-Rule-Header:
        allowSave=true` ([DUPRULE]). A blocking rule refuses it still. `content`: the
        configured fields (`_record_body`)."""
        allowed = record.get("allow_duplicate", False)
        headers = {"Sforce-Duplicate-Rule-Header": "allowSave=true"} if allowed else None
        return self._create_once(
            self.config.sobject, record["external_ref"], self._record_body(record), headers=headers
        )

    def create_record_allowing_duplicates(self, **record: Unpack[NewRecord]) -> Effect:
        """`create_record(allow_duplicate=True)`."""
        return self.create_record(**(record | {"allow_duplicate": True}))

    def find_record(self, *, external_ref: str) -> str | None:
        return self._find(self.config.sobject, self.config.reference_field, external_ref)

    def reference_check(self, record_id: str) -> str | None:
        prefix = KEY_PREFIXES[self.config.sobject]
        return id_problem(record_id, prefix, self.config.sobject)

    def _reference_checked(self, record_id: str) -> None:
        problem = self.reference_check(record_id)
        if problem:
            raise DestinationError(problem, classification=Classification.PERMANENT)

    def get_record(self, record_id: str) -> dict[str, Any] | None:
        if id_problem(record_id, KEY_PREFIXES[self.config.sobject], self.config.sobject):
            return None
        response = self._call(
            "GET", f"/sobjects/{self.config.sobject}/{record_id}", missing_ok=True
        )
        if response.status_code == 404:
            return None
        return self._record_of(json_object(response))

    def update_record(self, **update: Unpack[RecordUpdate]) -> Effect:
        """PATCH by id with `Sforce-Auto-Assign: FALSE` ([ASSIGN]): 204. Twice is as once."""
        record_id = update["record_id"]
        self._reference_checked(record_id)
        response = self._call(
            "PATCH",
            f"/sobjects/{self.config.sobject}/{record_id}",
            json=self._record_body(update),
            headers={"Sforce-Auto-Assign": "FALSE"},
        )
        return Effect(ref=record_id, reply=http_reply(response.status_code))

    def merge_records(self, *, survivor_id: str, duplicate_id: str, key: str) -> Effect:
        raise DestinationError(
            "Salesforce's REST API has no merge and Onefold does not call SOAP merge(): "
            f"merge {duplicate_id} into {survivor_id} in Salesforce, then resolve the case",
            classification=Classification.PERMANENT,
        )

    def erase_person(self, *, record_id: str, task_ids: tuple[str, ...] = ()) -> Effect:
        """The Tasks, then the record, which is the person (a Lead or Contact): DELETE
        /sobjects/{object}/{id}, to the Recycle Bin
        (https://developer.salesforce.com/docs/atlas.en-us.api_rest.meta/api_rest/dome_delete_record.htm;
        emptied within 15 days, or by the Bulk API's hardDelete). A 404 is that part
        already gone (a repeat after a lost answer)."""
        self._reference_checked(record_id)
        for task_id in task_ids:
            self._call("DELETE", f"/sobjects/Task/{_segment(task_id)}", missing_ok=True)
        response = self._call(
            "DELETE", f"/sobjects/{self.config.sobject}/{record_id}", missing_ok=True
        )
        return Effect.deletion(record_id, response.status_code)

    def iter_records(
        self, **listing: Unpack[RecordListing]
    ) -> Iterator[tuple[list[dict[str, Any]], str | None]]:
        """[QUERY]: one SOQL query by CreatedDate, then its nextRecordsUrl pages; the
        cursor to resume after a page is that page's nextRecordsUrl."""
        cursor = listing.get("cursor")
        batch = max(200, min(2000, listing_limit(listing)))
        headers = {"Sforce-Query-Options": f"batchSize={batch}"}
        if cursor:
            response = self._call("GET", _api_relative(cursor, self.api), headers=headers)
        else:
            query = self._soql(listing["since"], listing.get("until"))
            response = self._call("GET", "/query", headers=headers, params={"q": query})
        for records, next_url in self._query_pages(response, headers=headers):
            yield [self._listed(r) for r in records], next_url

    def _query_pages(
        self, response: httpx.Response, *, headers: dict[str, str] | None = None
    ) -> Iterator[tuple[list[dict[str, Any]], str | None]]:
        """A query's records, page by page from its first answer, each with the
        nextRecordsUrl that continues after it (None on the last page)."""
        while True:
            data = json_object(response)
            next_url = data.get("nextRecordsUrl") if data.get("done") is False else None
            yield [r for r in data.get("records", []) if isinstance(r, dict)], next_url
            if not next_url:
                return
            response = self._call("GET", _api_relative(next_url, self.api), headers=headers)

    def _soql(self, since: str, until: str | None) -> str:
        ref = self.config.reference_field
        where = f"CreatedDate >= {_soql_datetime(since, up=False)}"
        if until:
            where += f" AND CreatedDate < {_soql_datetime(until, up=True)}"
        return (
            f"SELECT Id, {ref}, CreatedDate, LastModifiedDate FROM {self.config.sobject} "
            f"WHERE {where} ORDER BY CreatedDate, Id"
        )

    def _listed(self, row: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": str(row.get("Id")),
            "external_ref": row.get(self.config.reference_field),
            "created_at": _iso(row.get("CreatedDate")),
            "updated_at": _iso(row.get("LastModifiedDate")),
        }

    def _record_of(self, row: dict[str, Any]) -> dict[str, Any]:
        name = " ".join(str(row.get(k) or "") for k in ("FirstName", "LastName")).strip()
        return {
            **self._listed(row),
            "object": self.config.sobject,
            "name": name,
            "email": row.get("Email") or "",
            "phone": row.get("Phone") or "",
            "message": row.get("Description") or "",
            "owner_id": row.get("OwnerId"),
            "merged_into": None,
        }

    def _record_body(self, given: NewRecord | RecordUpdate) -> dict[str, Any]:
        """Onefold's enquiry as Lead (or Contact) fields. LastName is required on both and
        Company on Lead; a missing one is written "[not provided]". A Lead is the
        enquiry and its person in one object: the configured properties and contact
        properties both become its fields (API names, `Budget__c`), and the stage its
        `Status`; a Lead has no pipeline, so `content.pipeline` is not sent. The
        reference field stays Onefold's."""
        fields, content = given["fields"], content_of(given)
        name = str(fields.get("name") or "").strip()
        first, _, last = name.rpartition(" ")
        body: dict[str, Any] = {
            "FirstName": first or None,
            "LastName": last or "[not provided]",
            "Email": fields.get("email") or None,
            "Phone": fields.get("phone") or None,
            "Description": _description(fields),
            "LeadSource": "Web",
        }
        if self.config.sobject == "Lead":
            body["Company"] = str(fields.get("company") or "[not provided]")
        # [FIELDS]: a longer value is refused (STRING_TOO_LONG), and a name cut short
        # is better than no lead. An email is never cut: a wrong address is worse.
        body.update(content.contact_properties)
        body.update(content.properties)
        if content.stage:
            body["Status"] = content.stage
        body.pop(self.config.reference_field, None)
        for name, limit in _NAME_LENGTHS.items():
            if isinstance(body.get(name), str):
                body[name] = body[name][:limit]
        return body

    # -- tasks ----------------------------------------------------------------------

    def create_task(self, **task: Unpack[NewTask]) -> Effect:
        """[VENDOR]: Task with WhoId (a lead as WhoId leaves WhatId empty). A configured
        assignee becomes OwnerId, mapped to its user through a SOQL query on User
        (`_owner_id`); the source's own label becomes OwnerId only when it is a user id
        (005...), else it is named in the Description and the task stays with the
        integration user. `due_at` becomes its ActivityDate, a date (UTC)."""
        assignee, due_at = task["assignee"], task.get("due_at")
        owner = task_owner(task, owner_id=self._owner_id, own_id=user_id)
        body: dict[str, Any] = {
            "Subject": task["title"][:255],
            "WhoId": task["record_id"],
            "Status": "Not Started",
            "Priority": "Normal",
        }
        if due_at is not None:
            body["ActivityDate"] = due_at.astimezone(UTC).date().isoformat()
        if owner is not None:
            body["OwnerId"] = owner
        elif assignee:
            body["Description"] = f"Assignee: {assignee}"
        return self._create_once("Task", task["external_ref"], body)

    def find_task(self, *, record_id: str, external_ref: str) -> str | None:
        return self._find("Task", self.config.task_reference_field, external_ref)

    # -- create once ------------------------------------------------------------------

    def _reference_field(self, sobject: str) -> str:
        config = self.config
        return config.task_reference_field if sobject == "Task" else config.reference_field

    def _create_once(
        self,
        sobject: str,
        external_ref: str,
        body: dict[str, Any],
        *,
        headers: dict[str, str] | None = None,
    ) -> Effect:
        name = self._reference_field(sobject)
        existing = self._find(sobject, name, external_ref)
        if existing:
            return Effect(ref=existing, reply=http_reply(200), adopted=True)
        try:
            path = f"/sobjects/{sobject}/{name}/{_segment(external_ref)}"
            response = self._call("PATCH", path, json=body, headers=headers)
        except DestinationError as exc:
            if not _duplicate_value(exc):
                raise
            # [VENDOR]: a racing insert won on the unique field; read ours back.
            found = self._find(sobject, name, external_ref)
            if found is None:
                raise
            return Effect(ref=found, reply=exc.reply, adopted=True)
        data = json_object(response)
        if response.status_code == 201:
            return Effect(ref=str(data["id"]), reply=http_reply(201))
        # 200 {"created": false} (API 46.0+) or 204 (older): it existed already.
        found = str(data["id"]) if data.get("id") else self._find(sobject, name, external_ref)
        if not found:
            raise DestinationError(
                f"HTTP {response.status_code}: the upsert updated a record it did not name",
                classification=Classification.AMBIGUOUS,
                reply=http_reply(response.status_code),
            )
        return Effect(ref=found, reply=http_reply(response.status_code), adopted=True)

    def _find(self, sobject: str, name: str, external_ref: str) -> str | None:
        """[UPSERT] GET by the external id: 200 the record, 404 none, 300 several."""
        response = self._call(
            "GET",
            f"/sobjects/{sobject}/{name}/{_segment(external_ref)}",
            missing_ok=True,
            params={"fields": "Id"},
        )
        if response.status_code == 404:
            return None
        record_id = json_object(response).get("Id")
        return str(record_id) if record_id else None

    # -- HTTP --------------------------------------------------------------------------

    def _call(
        self, method: str, path: str, *, missing_ok: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """One API call with a bearer token; after a 401 the token is fetched again and
        the call made once more ([ERRORS]). Answers classified; 404 returned when
        `missing_ok`."""
        self._require_config()
        response = self._send(method, path, **kwargs)
        if response.is_success or (missing_ok and response.status_code == 404):
            return response
        raise self._error(response)

    def _require_config(self) -> None:
        if self.problems:
            raise DestinationError(
                f"Salesforce is not configured: {'; '.join(self.problems)}",
                classification=Classification.RETRYABLE,
            )

    def _error(self, response: httpx.Response) -> DestinationError:
        """Salesforce's readings first ([UPSERT] 300, [DUPRULE], [ERRORS] the daily
        limit's 403), then the one rule; a refusal keeps its errorCode."""
        status = response.status_code
        errors = _errors(response)
        first = errors[0] if errors else {}
        code = str(first.get("errorCode") or "")
        text = str(first.get("message") or response.reason_phrase)
        if status == 300:
            ids = _ids_of_matches(response)
            where = re.search(r"/sobjects/(\w+)/(\w+)/", response.request.url.path)
            field_name = f"{where[1]}.{where[2]}" if where else "the reference field"
            return SalesforceMultipleMatches(
                f"300 Multiple Choices: the reference matches records {', '.join(ids)} "
                f"({field_name} holds the same value on {len(ids)} records): keep one, "
                "then resolve the case with its id",
                ids,
            )
        if code == "DUPLICATES_DETECTED":
            return _duplicates_detected(first, text)
        message = f"HTTP {status} {code}: {text}".replace("  ", " ")
        if status == 403 and code == "REQUEST_LIMIT_EXCEEDED":
            return self._limit_error(response, message, text)
        error = status_error(response, message)
        if error.classification != Classification.PERMANENT:
            return error
        # _create_once reads DUPLICATE_VALUE (a racing insert won on the unique field).
        return SalesforceError(
            message, error_code=code, classification=error.classification, reply=error.reply
        )

    def _limit_error(self, response: httpx.Response, message: str, text: str) -> DestinationError:
        """403 REQUEST_LIMIT_EXCEEDED: Salesforce's rate limit is a 403, not a 429, and
        nothing was applied. The org's 24-hour total ("TotalRequests", or usage at the
        allocation in Sforce-Limit-Info) is DAILY; the concurrent long-running request
        limit a WINDOW ([LIMITS]; see the module's docstring for the delays)."""
        usage = budget_hint(response)
        spent = "TotalRequests" in text or (usage is not None and usage.remaining == 0)
        retry = header_delay(response)
        if retry is None:
            retry = self.config.limit_retry_seconds if spent else CONCURRENT_LIMIT_RETRY_SECONDS
        return DestinationError(
            f"{message} ({response.headers.get('Sforce-Limit-Info', 'no usage header')})",
            classification=Classification.RETRYABLE,
            reply=http_reply(response.status_code),
            retry_after=retry,
            rate_limit=RateLimit.DAILY if spent else RateLimit.WINDOW,
        )


# -- helpers -------------------------------------------------------------------------


def _duplicates_detected(error: dict[str, Any], text: str) -> SalesforceDuplicatesDetected:
    """[VENDOR]: matches under duplicateResut (sic) -> matchResults[].matchRecords[].record.Id."""
    result = error.get("duplicateResut") or error.get("duplicateResult") or {}
    ids = []
    for match in result.get("matchResults") or []:
        for record in match.get("matchRecords") or []:
            record_id = (record.get("record") or {}).get("Id")
            if record_id and record_id not in ids:
                ids.append(str(record_id))
    allow_save = result.get("allowSave") is True
    rule = str(result.get("duplicateRule") or "a duplicate rule")
    then = (
        "the rule only alerts: a reviewer may link the enquiry to it, or create it anyway "
        "(allowSave)"
        if allow_save
        else "the rule blocks: link the enquiry to it, or change the rule"
    )
    return SalesforceDuplicatesDetected(
        f"400 DUPLICATES_DETECTED: suspected duplicate of records "
        f"{', '.join(ids) or '(none named)'} "
        f"by {rule}; {then}. Salesforce said: {text.rstrip('.')}",
        ids,
        allow_save=allow_save,
        rule=rule,
    )


def _duplicate_value(exc: DestinationError) -> bool:
    return isinstance(exc, SalesforceError) and exc.error_code == "DUPLICATE_VALUE"


def _errors(response: httpx.Response) -> list[dict[str, Any]]:
    try:
        data = response.json()
    except ValueError:
        return []
    if isinstance(data, dict):
        data = [data]
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []


def _ids_of_matches(response: httpx.Response) -> list[str]:
    """[UPSERT]: a 300 lists the matching records: URLs (/sobjects/Lead/<id>) or
    record objects; the id is the URL's last segment or the object's Id."""
    try:
        data = response.json()
    except ValueError:
        data = []
    ids = []
    for item in data if isinstance(data, list) else []:
        if isinstance(item, str):
            ids.append(item.rstrip("/").rsplit("/", 1)[-1])
        elif isinstance(item, dict):
            url = (item.get("attributes") or {}).get("url", "")
            ids.append(str(item.get("Id") or url.rstrip("/").rsplit("/", 1)[-1]))
    return [i for i in ids if i]


def _description(fields: Mapping[str, Any]) -> str:
    lines = [str(fields.get("message") or "")]
    for label, key in (("Form", "form"), ("Source", "source"), ("Submitted at", "submitted_at")):
        if fields.get(key):
            lines.append(f"{label}: {fields[key]}")
    extra = fields.get("fields") or {}
    if isinstance(extra, dict):
        lines += [f"{k}: {v}" for k, v in extra.items()]
    return "\n".join(line for line in lines if line)[:32000]


def _segment(value: str) -> str:
    return path_segment(value, "cannot be an external id value")


def _api_relative(url: str, api: str) -> str:
    """A nextRecordsUrl (/services/data/vXX.X/query/...) as a path under `api`."""
    path = urlsplit(url).path
    marker = path.find("/query/")
    if not path.startswith("/services/data/") or marker < 0:
        raise DestinationError(
            f"not a query locator: {url[:200]}", classification=Classification.PERMANENT
        )
    return path[marker:]


def _soql_datetime(value: str, *, up: bool) -> str:
    """[QUERY]: an unquoted dateTime literal in whole seconds, UTC. `since` is rounded
    down and `until` up, so the window is never narrower than asked."""
    moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace(" ", "+"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    whole = moment.replace(microsecond=0)
    if up and moment.microsecond:
        whole += timedelta(seconds=math.ceil(moment.microsecond / 1e6))
    return whole.strftime("%Y-%m-%dT%H:%M:%SZ")


def _iso(value: Any) -> str | None:
    """Salesforce's 2026-11-29T10:15:00.000+0000 as ISO 8601 with a Z."""
    if not value:
        return None
    moment = datetime.fromisoformat(str(value).replace("+0000", "+00:00"))
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
