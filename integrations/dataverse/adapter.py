"""Microsoft Dataverse (Dynamics 365 Sales): the enquiry is a lead, the task regards it.

Create-once by a chosen id. Each record's GUID is a name-based UUID (version 5)
of a fixed namespace and the operation key, and it is created with
`PATCH /api/data/v9.2/leads(<guid>)` and `If-None-Match: *`, which only creates:
a repeat answers 412 "A record with matching key values already exists"
(Prevent update in upsert,
https://learn.microsoft.com/power-apps/developer/data-platform/webapi/perform-conditional-operations-using-web-api),
and is adopted, since that GUID can only be ours. Tasks are created the same
way, bound to their lead with `regardingobjectid_lead_task@odata.bind`.

The lead also carries the operation key in a reference column (default
`onefold_ref`) under an alternate key, so a lead holding our key under another
GUID is refused too (412, naming the key) and found by
`leads(onefold_ref='<key>')`. Alternate keys are built asynchronously and only
work once Active, which `verify()` checks
(`EntityDefinitions(LogicalName='lead')/Keys`, `EntityKeyIndexStatus`).

Tokens come from Microsoft Entra ID by client credentials (integrations/oauth.py,
scope `<org URL>/.default`); a 401 drops the token and the call is made once more
with a new one. Neither the secret nor the token ever appears in an error's text.

After an unclear create the engine reads before creating again (`find_record`,
`find_task`): `leads(<guid>)`, `leads(onefold_ref='<key>')` and `tasks(<guid>)` are
retrieves of a row by its key, not a search, so a row committed a moment ago is
found and a 404 proves it absent (`lookup_proves_absence`).

Service protection limits
(https://learn.microsoft.com/power-apps/developer/data-platform/api-limits): per
user, 6000 requests in a 300-second sliding window and 52 at once; past them a
429 with Retry-After, a short WINDOW (there is no daily limit that refuses).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Unpack
from urllib.parse import quote, urlsplit

import httpx

from integrations.capabilities import Capabilities, CapabilityCheck, ConfiguredCrmNames
from integrations.env import AdapterSettings
from integrations.http import json_object, status_error, timeout_of
from integrations.limits import RequestBudget
from integrations.listing import RecordListing, listing_limit
from integrations.oauth import BearerAdapter, ClientCredentials, shared_credentials
from integrations.outcomes import Classification, DestinationError, Effect, http_reply
from integrations.owners import Owner, assignee_checks, owner_id_of, task_owner
from integrations.writes import NewRecord, NewTask, RecordUpdate, content_of

API_PATH = "/api/data/v9.2"
LIMITS_PAGE = "https://learn.microsoft.com/power-apps/developer/data-platform/api-limits"
# MaxLength of the lead's and the task's description (the lead and task references).
_DESCRIPTION_LENGTH = 2000
# The namespace of every record id Onefold chooses. Never change it: the ids of
# records already created derive from it, and a repeat must derive the same one.
RECORD_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://onefold.invalid/dataverse/records")
DEFAULT_REF_COLUMN = "onefold_ref"
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_COLUMN = re.compile(r"[a-z][a-z0-9_]{0,49}")
_QUOTED_ADDRESS = re.compile(r"[^\s<>@()'\"]+@[^\s<>@()'\"]+")
_ATTRIBUTES = "/EntityDefinitions(LogicalName='lead')/Attributes"
_USERS_QUERY = {
    "$select": "systemuserid,fullname,internalemailaddress",
    "$filter": "isdisabled eq false",
}
_LEAD_SELECT = (
    "leadid,fullname,lastname,emailaddress1,description,createdon,modifiedon,merged,_masterid_value"
)


def record_guid(entity: str, operation_key: str) -> str:
    """The GUID Onefold gives the `entity` ("lead" or "task") of an operation."""
    return str(uuid.uuid5(RECORD_NAMESPACE, f"{entity}:{operation_key}"))


def adapter_from_env(
    *, base_url: str | None, timeout: float, env: Mapping[str, str]
) -> DataverseCrm:
    """DATAVERSE_URL (the org URL, e.g. https://contoso.crm4.dynamics.com),
    DATAVERSE_CLIENT_ID, DATAVERSE_CLIENT_SECRET, DATAVERSE_TOKEN_URL (Entra ID's
    https://login.microsoftonline.com/<tenant>/oauth2/v2.0/token), all required;
    DATAVERSE_REF_COLUMN (default onefold_ref: the lead column under the alternate
    key) and DATAVERSE_TASK_REF_COLUMN (default: the same name on the task table;
    empty: tasks carry no reference column)."""
    read = AdapterSettings(env, base_url=base_url, url_variable="DATAVERSE_URL")
    missing = read.missing(
        ["DATAVERSE_URL", "DATAVERSE_CLIENT_ID", "DATAVERSE_CLIENT_SECRET", "DATAVERSE_TOKEN_URL"]
    )
    if missing:
        raise DestinationError(
            f"{', '.join(missing)} not set", classification=Classification.PERMANENT
        )
    ref_column = read.get("DATAVERSE_REF_COLUMN", DEFAULT_REF_COLUMN)
    task_ref_column = read.get("DATAVERSE_TASK_REF_COLUMN", ref_column, keep_empty=True)
    for column in {ref_column, task_ref_column} - {""}:
        if _COLUMN.fullmatch(column) is None:
            raise DestinationError(
                f"{column!r} is not a Dataverse column logical name",
                classification=Classification.PERMANENT,
            )
    org_url = read.url("DATAVERSE_URL")
    credentials = shared_credentials(
        token_url=read.get("DATAVERSE_TOKEN_URL"),
        client_id=read.get("DATAVERSE_CLIENT_ID"),
        client_secret=read.get("DATAVERSE_CLIENT_SECRET"),
        scope=f"{org_url}/.default",
    )
    return DataverseCrm(
        org_url,
        credentials=credentials,
        timeout=timeout,
        ref_column=ref_column,
        task_ref_column=task_ref_column,
    )


def _guid_lowered(assignee: str) -> str:
    """A GUID as Dataverse lists its ids (lower case); any other assignee as it is."""
    return assignee.lower() if _GUID.fullmatch(assignee) else assignee


class DataverseCrm(BearerAdapter):
    """`CrmAdapter` for Dataverse: leads and the tasks regarding them."""

    # The service protection limit on requests: 6000 per user in 300 seconds.
    request_budget: RequestBudget | None = RequestBudget(
        requests=6000, per_seconds=300, source=LIMITS_PAGE
    )

    # Create-once by chosen GUID and the alternate key (unique_external_ref), read by
    # GUID or key (lookup, a retrieve that proves absence: no lagging search), the
    # Merge action (merge).
    capabilities = Capabilities(
        unique_external_ref=True, lookup=True, lookup_proves_absence=True, merge=True
    )

    def __init__(
        self,
        org_url: str,
        *,
        credentials: ClientCredentials,
        timeout: float,
        ref_column: str = DEFAULT_REF_COLUMN,
        task_ref_column: str = DEFAULT_REF_COLUMN,
    ) -> None:
        self.org_url = org_url.rstrip("/")
        self.base_url = self.org_url + API_PATH
        self.credentials = credentials
        self.timeout = timeout_of(timeout)
        self.ref_column = ref_column
        self.task_ref_column = task_ref_column
        # Read once per adapter: the lead's columns, and the org's enabled users.
        self._columns: dict[str, dict[str, Any]] | None = None
        self._users: list[Owner] | None = None

    def __repr__(self) -> str:
        return f"DataverseCrm({self.org_url!r})"

    # -- verification --------------------------------------------------------

    def verify(self) -> list[CapabilityCheck]:
        """The alternate key on the reference column must exist and be Active."""
        path = "/EntityDefinitions(LogicalName='lead')/Keys"
        response = self._send(
            "GET", path, params={"$select": "LogicalName,KeyAttributes,EntityKeyIndexStatus"}
        )
        self._raise_for_status(response)
        keys = [k for k in json_object(response).get("value") or [] if isinstance(k, dict)]
        ours = [k for k in keys if k.get("KeyAttributes") == [self.ref_column]]
        status = str(ours[0].get("EntityKeyIndexStatus")) if ours else None
        active = status == "Active"
        if ours:
            seen = f"key {ours[0].get('LogicalName')} on [{self.ref_column}]: {status}"
        else:
            seen = f"no alternate key on [{self.ref_column}]"
        how = f"GET {path}: {seen}"
        return [
            CapabilityCheck(
                "unique_external_ref",
                active,
                how + ("" if active else " (creates by chosen GUID hold; the key does not)"),
            ),
            CapabilityCheck(
                "lookup", active, how + "; leads are read by GUID or by the key, never searched"
            ),
            CapabilityCheck(
                "merge",
                True,
                f"GET {path} answered: the lead table exists, and Merge is its action",
            ),
        ]

    # -- the configuration's names (check_destinations) -----------------------

    def names_check(self, names: ConfiguredCrmNames) -> list[CapabilityCheck]:
        """A lead is the enquiry and its person in one row, so enquiry and contact
        properties alike are its columns: each must be a `LogicalName` of
        `EntityDefinitions(LogicalName='lead')/Attributes` that a create may write
        (`IsValidForCreate`;
        https://learn.microsoft.com/power-apps/developer/data-platform/webapi/query-metadata-web-api).
        Assignees against the org's enabled users (`systemusers`, by systemuserid,
        internalemailaddress or fullname;
        https://learn.microsoft.com/power-apps/developer/data-platform/reference/entities/systemuser)."""
        checks = names.property_checks(self._column_verdict, self._column_verdict)
        return checks + assignee_checks(
            names.assignees,
            self._enabled_users,
            asked="GET /systemusers",
            matched_as=_guid_lowered,
        )

    def _column_verdict(self, name: str) -> tuple[bool, str]:
        where = f"GET {_ATTRIBUTES}"
        found = self._lead_columns().get(name)
        if found is None:
            return False, f"{where}: the lead has no column {name!r} (a logical name, lower case)"
        if found.get("IsValidForCreate") is False:
            return False, f"{where}: {name!r} cannot be written on create (IsValidForCreate)"
        return (
            True,
            f"{where}: {name!r} is a lead column ({found.get('AttributeType') or 'column'})",
        )

    def _lead_columns(self) -> dict[str, dict[str, Any]]:
        if self._columns is None:
            response = self._send(
                "GET", _ATTRIBUTES, params={"$select": "LogicalName,AttributeType,IsValidForCreate"}
            )
            self._raise_for_status(response)
            self._columns = {
                str(a["LogicalName"]): a
                for a in json_object(response).get("value") or []
                if isinstance(a, dict) and a.get("LogicalName")
            }
        return self._columns

    def _enabled_users(self) -> list[Owner]:
        """The org's enabled users, every page (@odata.nextLink), read once."""
        if self._users is None:
            users: list[Owner] = []
            path: str = "/systemusers"
            params: dict[str, str] | None = dict(_USERS_QUERY)
            prefer = {"Prefer": "odata.maxpagesize=5000"}
            while True:
                response = self._send("GET", path, params=params, headers=prefer)
                self._raise_for_status(response)
                data = json_object(response)
                users += [
                    Owner(
                        id=str(u["systemuserid"]).lower(),
                        name=str(u.get("fullname") or ""),
                        email=str(u.get("internalemailaddress") or ""),
                    )
                    for u in data.get("value") or []
                    if isinstance(u, dict) and u.get("systemuserid")
                ]
                next_link = data.get("@odata.nextLink")
                query = urlsplit(next_link).query if isinstance(next_link, str) else ""
                if not query:
                    break
                path, params = f"/systemusers?{query}", None
            self._users = users
        return self._users

    def _owner_id(self, assignee: str) -> str:
        """The systemuserid a configured assignee names: a GUID as it is, else the
        enabled user found by email or full name; none: PERMANENT, naming it."""
        return owner_id_of(
            _guid_lowered(assignee),
            self._enabled_users,
            asked="GET /systemusers",
            is_id=_GUID.fullmatch,
        )

    # -- leads ---------------------------------------------------------------

    def create_record(self, **record: Unpack[NewRecord]) -> Effect:
        """The lead, created once by the GUID derived from our key. A lead is the enquiry
        and its person in one row: the configured properties and contact properties are
        its columns (logical names, `companyname`); it has no pipeline or stage of its
        own (an opportunity's are), so those are not sent."""
        # allow_duplicate is ignored: the Web API suppresses duplicate detection by default.
        external_ref = record["external_ref"]
        guid = record_guid("lead", external_ref)
        body = {**_lead_body(record), self.ref_column: external_ref}
        response = self._send("PATCH", f"/leads({guid})", json=body, headers={"If-None-Match": "*"})
        if response.status_code != 412:
            self._raise_for_status(response)
            return Effect(ref=guid, reply=http_reply(response.status_code))
        if "matching key values already exists" in _error_message(response):
            # Our GUID exists: an earlier attempt (or its lost answer) created it.
            return Effect(ref=guid, reply=http_reply(412), adopted=True)
        # The alternate key: a lead holds our key under another GUID. It is ours.
        found = self._lead_by_reference(external_ref)
        if found is None:
            raise self._error(response, "412 on the alternate key, yet no lead holds the key")
        return Effect(ref=found, reply=http_reply(412), adopted=True)

    def update_record(self, **update: Unpack[RecordUpdate]) -> Effect:
        """PATCH with If-Match: * only updates (404 when the lead is gone, never a create)."""
        guid = _guid(update["record_id"])
        body = _lead_body(update)
        body.pop(self.ref_column, None)
        response = self._send("PATCH", f"/leads({guid})", json=body, headers={"If-Match": "*"})
        self._raise_for_status(response)
        return Effect(ref=guid, reply=http_reply(response.status_code))

    def get_record(self, record_id: str) -> dict[str, Any] | None:
        guid = _guid(record_id)
        response = self._send(
            "GET", f"/leads({guid})", params={"$select": f"{_LEAD_SELECT},{self.ref_column}"}
        )
        if response.status_code == 404:
            return None
        self._raise_for_status(response)
        return self._record(json_object(response))

    def reference_check(self, record_id: str) -> str | None:
        if _GUID.fullmatch(record_id) is None:
            return "Dataverse record references are GUIDs like 0f8fad5b-d9cb-469f-a165-70867728950e"
        return None

    def find_record(self, *, external_ref: str) -> str | None:
        """By the GUID Onefold chose, then by the alternate key (a lead holding our key
        under another GUID). Reads, not a search: no lag."""
        guid = record_guid("lead", external_ref)
        response = self._send("GET", f"/leads({guid})", params={"$select": "leadid"})
        if response.status_code != 404:
            self._raise_for_status(response)
            return guid
        return self._lead_by_reference(external_ref)

    def merge_records(self, *, survivor_id: str, duplicate_id: str, key: str) -> Effect:
        """The Merge action (https://learn.microsoft.com/power-apps/developer/data-platform/webapi/merge-entity-using-web-api).
        A duplicate already merged into the survivor is that merge, done: adopted."""
        survivor, duplicate = _guid(survivor_id), _guid(duplicate_id)
        response = self._send(
            "GET", f"/leads({duplicate})", params={"$select": "leadid,merged,_masterid_value"}
        )
        self._raise_for_status(response)
        current = json_object(response)
        if current.get("merged") and str(current.get("_masterid_value")).lower() == survivor:
            return Effect(ref=survivor, reply=http_reply(response.status_code), adopted=True)
        lead = "Microsoft.Dynamics.CRM.lead"
        body = {
            "Target": {"@odata.type": lead, "leadid": survivor},
            "Subordinate": {"@odata.type": lead, "leadid": duplicate},
            "PerformParentingChecks": False,
        }
        response = self._send("POST", "/Merge", json=body)
        self._raise_for_status(response)
        return Effect(ref=survivor, reply=http_reply(response.status_code))

    def erase_person(self, *, record_id: str, task_ids: tuple[str, ...] = ()) -> Effect:
        """The lead, which is the person in Dataverse, and with it the tasks regarding it
        (the Lead_Tasks relationship cascades Delete): DELETE /api/data/v9.2/leads({guid})
        (https://learn.microsoft.com/power-apps/developer/data-platform/webapi/update-delete-entities-using-web-api#basic-delete).
        A 404 is the lead already gone (a repeat after a lost answer)."""
        response = self._send("DELETE", f"/leads({_guid(record_id)})")
        if response.status_code != 404:
            self._raise_for_status(response)
        return Effect.deletion(record_id, response.status_code)

    def iter_records(
        self, **listing: Unpack[RecordListing]
    ) -> Iterator[tuple[list[dict[str, Any]], str | None]]:
        """Leads created in [since, until), unmerged, by (createdon, leadid); the cursor is
        the query of Dataverse's @odata.nextLink (server-driven paging, `Prefer:
        odata.maxpagesize`). Dataverse keeps whole seconds, so both ends are cut to the
        second: consecutive windows still share no lead."""
        until, cursor = listing.get("until"), listing.get("cursor")
        conditions = [f"createdon ge {_instant(listing['since'])}", "merged eq false"]
        if until:
            conditions.insert(1, f"createdon lt {_instant(until)}")
        params: dict[str, str] | None = {
            "$select": f"{_LEAD_SELECT},{self.ref_column}",
            "$filter": " and ".join(conditions),
            "$orderby": "createdon asc,leadid asc",
        }
        page_size = max(1, min(listing_limit(listing), 5000))
        prefer = {"Prefer": f"odata.maxpagesize={page_size}"}
        while True:
            path = f"/leads?{cursor}" if cursor else "/leads"
            response = self._send("GET", path, params=None if cursor else params, headers=prefer)
            self._raise_for_status(response)
            data = json_object(response)
            next_link = data.get("@odata.nextLink")
            cursor = urlsplit(next_link).query or None if isinstance(next_link, str) else None
            records = [self._record(item) for item in data.get("value") or []]
            yield records, cursor
            if not cursor:
                return

    # -- tasks ---------------------------------------------------------------

    def create_task(self, **task: Unpack[NewTask]) -> Effect:
        """A task regarding the lead, created once by its derived GUID. A configured
        assignee is its owner (`ownerid@odata.bind: /systemusers(<id>)`), a systemuser
        found by email or name (`_owner_id`); the source's own label is the owner only
        when it is a GUID. `due_at` is its `scheduledend`, the task's due date."""
        external_ref, assignee, due_at = task["external_ref"], task["assignee"], task.get("due_at")
        owner = task_owner(
            task,
            owner_id=self._owner_id,
            own_id=lambda label: label.lower() if _GUID.fullmatch(label) else None,
        )
        guid = record_guid("task", external_ref)
        body: dict[str, Any] = {
            "subject": task["title"][:200],
            "description": f"Assignee: {assignee}"[:_DESCRIPTION_LENGTH] if assignee else "",
            "regardingobjectid_lead_task@odata.bind": f"/leads({_guid(task['record_id'])})",
        }
        if due_at is not None:
            body["scheduledend"] = due_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if owner is not None:
            body["ownerid@odata.bind"] = f"/systemusers({owner})"
        if self.task_ref_column:
            body[self.task_ref_column] = external_ref
        response = self._send("PATCH", f"/tasks({guid})", json=body, headers={"If-None-Match": "*"})
        if response.status_code == 412:
            return Effect(ref=guid, reply=http_reply(412), adopted=True)
        self._raise_for_status(response)
        return Effect(ref=guid, reply=http_reply(response.status_code))

    def find_task(self, *, record_id: str, external_ref: str) -> str | None:
        guid = record_guid("task", external_ref)
        response = self._send("GET", f"/tasks({guid})", params={"$select": "activityid"})
        if response.status_code == 404:
            return None
        self._raise_for_status(response)
        return guid

    # -- plumbing ------------------------------------------------------------

    def _lead_by_reference(self, external_ref: str) -> str | None:
        value = quote(external_ref.replace("'", "''"), safe="")
        response = self._send(
            "GET", f"/leads({self.ref_column}='{value}')", params={"$select": "leadid"}
        )
        if response.status_code == 404:
            return None
        self._raise_for_status(response)
        found = json_object(response).get("leadid")
        return str(found) if found else None

    def _record(self, lead: Mapping[str, Any]) -> dict[str, Any]:
        """A lead in the shape reconciliation and the console read (the sandbox's)."""
        return {
            "id": lead.get("leadid"),
            "external_ref": lead.get(self.ref_column),
            "name": lead.get("fullname") or lead.get("lastname") or "",
            "email": lead.get("emailaddress1") or "",
            "message": lead.get("description") or "",
            "created_at": lead.get("createdon"),
            "updated_at": lead.get("modifiedon"),
            "merged_into": lead.get("_masterid_value") if lead.get("merged") else None,
        }

    def _auth(self) -> dict[str, str]:
        return {"Accept": "application/json", "OData-MaxVersion": "4.0", "OData-Version": "4.0"}

    def _token(self) -> str:
        try:
            return self.credentials.token(timeout=self.timeout)
        except DestinationError as exc:
            if exc.classification == Classification.AMBIGUOUS:
                # A lost token answer changed nothing in Dataverse: nothing was sent there.
                raise DestinationError(
                    exc.message, classification=Classification.RETRYABLE, reply=exc.reply
                ) from exc
            raise

    def _raise_for_status(self, response: httpx.Response) -> None:
        if not response.is_success:
            raise self._error(response)

    @staticmethod
    def _error(response: httpx.Response, note: str = "") -> DestinationError:
        """Dataverse's answer in its words, classified by the one rule. Its service
        protection limit is a 429 with Retry-After
        (https://learn.microsoft.com/power-apps/developer/data-platform/api-limits)."""
        status = response.status_code
        message = f"Dataverse HTTP {status}: {_error_message(response) or response.reason_phrase}"
        if note:
            message += f" ({note})"
        return status_error(response, message)


def _error_message(response: httpx.Response) -> str:
    """Dataverse's {"error": {"code", "message"}}, without any address it quotes."""
    error = json_object(response).get("error")
    text = str(error.get("message") or "") if isinstance(error, dict) else ""
    return _QUOTED_ADDRESS.sub("[address]", text)


def _guid(record_id: str) -> str:
    """A record id as it goes in a path: a GUID, refused before any call otherwise."""
    if _GUID.fullmatch(record_id) is None:
        raise DestinationError(
            "a Dataverse record id is a GUID", classification=Classification.PERMANENT
        )
    return record_id.lower()


def _lead_body(given: NewRecord | RecordUpdate) -> dict[str, Any]:
    """The enquiry as lead columns: the topic (subject), the person (lastname holds the
    whole name, Dataverse builds fullname from it), email, phone, and the message with
    the form's other data after it in the description; then the configured columns."""
    fields, content = given["fields"], content_of(given)
    name = str(fields.get("name") or "").strip()
    trailer = [
        f"{label}: {fields[key]}"
        for key, label in (("form", "Form"), ("source", "Source"), ("submitted_at", "Submitted"))
        if fields.get(key)
    ]
    extra = fields.get("fields") or {}
    if isinstance(extra, dict):
        trailer += [
            f"{key}: {value if isinstance(value, str) else json.dumps(value)}"
            for key, value in sorted(extra.items())
        ]
    message = str(fields.get("message") or "")
    description = message + ("\n\n--\n" + "\n".join(trailer) if trailer else "")
    # Each column's MaxLength (the lead reference): a longer value is refused, and a
    # message cut short is better than no lead.
    return {
        "subject": f"{fields.get('form') or 'Website'} enquiry"[:300],
        "lastname": name[:50] or "(no name)",
        "emailaddress1": fields.get("email") or None,
        "telephone1": str(fields["phone"])[:50] if fields.get("phone") else None,
        "description": description[:_DESCRIPTION_LENGTH],
        # The configured columns (`content`): the person's, then the enquiry's.
        **content.contact_properties,
        **content.properties,
    }


def _instant(value: str) -> str:
    """An ISO 8601 instant as an OData date-time literal, in UTC, cut to the second."""
    try:
        parsed = datetime.fromisoformat(value.replace(" ", "+"))
    except ValueError:
        raise DestinationError(
            f"not an ISO 8601 instant: {value!r}", classification=Classification.PERMANENT
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
