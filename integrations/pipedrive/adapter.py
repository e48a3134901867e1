"""Pipedrive as Onefold's CRM: a person found or created by email, a lead, an activity.

Nothing in Pipedrive recognises a repeat: no idempotency key, no unique field, no
upsert (docs/vendor-facts.md, Pipedrive). The only lookup by our reference is the search
index, which lags writes, so "not found" proves nothing. The capabilities say so
(`lookup_proves_absence=False`, `lookup_settle_seconds`), and the engine, after an
unclear create, looks up no sooner than the settling delay: found, it adopts;
not found, it opens a case instead of creating again.

- enquiry: the person is searched by email (exact match) and created when none is
  found; then `POST /v1/leads` with `title`, `person_id` and our reference in a
  custom field (40-hex key, `PIPEDRIVE_REFERENCE_FIELD`), and the enquiry's message
  in another (`PIPEDRIVE_MESSAGE_FIELD`, optional: without it the message is not
  kept in Pipedrive). Leads inherit the deal's custom fields; `GET /v1/leadFields`
  lists them.
- task: `POST /api/v2/activities` with `lead_id`; its own reference goes into the
  activity's note as a line "Onefold reference: <key>" (activities have no
  documented custom fields and no search), found again by listing the lead's
  activities (`GET /api/v2/activities?lead_id=`).
- the API token travels in the `x-api-token` header, never in a URL, so it cannot
  reach a log line or an error message.

Rate limits (https://pipedrive.readme.io/docs/core-api-concepts-rate-limiting):
a burst limit per token on a rolling 2-second window (Lite: 20 requests with an
API token; searches 10), and a company-wide daily budget of tokens (30,000 x the
plan's multiplier x seats), each request spending its endpoint's cost. Both
refuse with 429 and the 2-second window's `x-ratelimit-limit/-remaining/-reset`.
The page names no header for the budget, so the window tells them apart
(pipedrive/client-nodejs#725 asks for one): no room left in it (or no headers)
is the burst, a WINDOW asked again after `x-ratelimit-reset`; a 429 while the
window still has room can only be the day's budget, DAILY until the next midnight
in the server's time zone ("may not be aligned with timezone of customer
location": `PIPEDRIVE_BUDGET_TIMEZONE`, default UTC).
"""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC
from typing import Any, Unpack
from urllib.parse import quote

import httpx

from integrations.capabilities import Capabilities, CapabilityCheck, ConfiguredCrmNames
from integrations.env import AdapterSettings, SettingError
from integrations.http import (
    HttpAdapter,
    header_delay,
    json_object,
    parse_retry_after,
    status_error,
    timeout_of,
)
from integrations.limits import RateLimit, RequestBudget
from integrations.listing import RecordListing, listing_limit
from integrations.outcomes import (
    Classification,
    DestinationError,
    Effect,
    http_reply,
    read_before_write,
    unclear_is_retryable,
    unknown_property_error,
)
from integrations.owners import Owner, assignee_checks, owner_id_of, task_owner
from integrations.times import seconds_to_midnight, utc_instant
from integrations.writes import NewRecord, NewTask, RecordUpdate, content_of

DEFAULT_BASE_URL = "https://api.pipedrive.com"
# How long after an unclear create the search is worth asking. Pipedrive documents no
# freshness for its search (docs/vendor-facts.md): this is a guess, and configurable.
DEFAULT_SETTLE_SECONDS = 30.0
# "Only the following custom field types are searchable: address, varchar, text,
# varchar_auto, double, monetary and phone" (client-nodejs v2 persons-api.ts, searchPersons).
SEARCHABLE_TYPES = frozenset(
    {"address", "varchar", "text", "varchar_auto", "double", "monetary", "phone"}
)
_TEXT_TYPES = frozenset({"text", "varchar"})
CUSTOM_FIELD_KEY = re.compile(r"[0-9a-f]{40}")
_REFERENCE_LINE = "Onefold reference: {}"
_REFERENCE_IN_NOTE = re.compile(r"Onefold reference: ([^\s<]+)")
_PAGE = 500  # "a maximum value of 500 is allowed" (v2 activities-api.ts, limit)
RATE_LIMITS_PAGE = "https://pipedrive.readme.io/docs/core-api-concepts-rate-limiting"
# The burst window's length, when a 429 names no reset.
_BURST_SECONDS = 2.0


class PipedriveCrm(HttpAdapter):
    """`CrmAdapter` for Pipedrive (emulated in lab/emulators/pipedrive.py)."""

    # The burst limit of the smallest plan (Lite) for an API token: 20 requests per
    # 2 seconds; the answers' x-ratelimit-* teach the engine a larger plan's. The daily
    # budget is in tokens, company-wide and shared with every other integration, so
    # it is no count of Onefold's requests: its 429 parks the work instead (DAILY).
    request_budget: RequestBudget | None = RequestBudget(
        requests=20, per_seconds=2, source=RATE_LIMITS_PAGE
    )

    def __init__(
        self,
        base_url: str,
        *,
        api_token: str,
        reference_field: str,
        timeout: float,
        settle_seconds: float = DEFAULT_SETTLE_SECONDS,
        activity_type: str = "task",
        message_field: str | None = None,
        budget_timezone: str = "UTC",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.budget_timezone = budget_timezone
        self._token = api_token
        self.reference_field = reference_field
        self.message_field = message_field
        self.activity_type = activity_type
        self.timeout = timeout_of(timeout)
        # A lookup only (by a search that lags writes), no merge: Pipedrive merges persons
        # and deals, not leads, so duplicates are settled by hand.
        self.capabilities = Capabilities(
            lookup=True, lookup_proves_absence=False, lookup_settle_seconds=settle_seconds
        )
        # Read once per adapter: the lead and person fields by key, the company's users.
        self._fields: dict[str, dict[str, dict[str, Any]]] = {}
        self._users: list[Owner] | None = None

    def __repr__(self) -> str:
        return f"PipedriveCrm({self.base_url!r}, reference_field={self.reference_field!r})"

    def verify(self) -> list[CapabilityCheck]:
        """`lookup`: the reference field exists on leads and is of a searchable type.
        Nothing else is claimed: no uniqueness, no idempotency key, no merge. With a
        message field configured, `message_field`: it exists and holds text (a key
        naming no field would drop every message without a word)."""
        fields = self._lead_fields()
        checks = [_field_check("lookup", fields, self.reference_field, SEARCHABLE_TYPES)]
        if self.message_field:
            checks.append(_field_check("message_field", fields, self.message_field, _TEXT_TYPES))
        return checks

    # -- the configuration's names (check_destinations) -----------------------

    def names_check(self, names: ConfiguredCrmNames) -> list[CapabilityCheck]:
        """Enquiry properties against the lead fields (`GET /v1/leadFields`: leads take
        the deals' custom fields), contact properties against the person fields (`GET
        /v1/personFields`, https://developers.pipedrive.com/docs/api/v1/PersonFields),
        each by its key or, as people name custom fields, by its name (a custom field's
        key is 40 hex characters: https://pipedrive.readme.io/docs/core-api-concepts-custom-fields);
        assignees against the company's active users (`GET /v1/users`,
        https://developers.pipedrive.com/docs/api/v1/Users), by id, email or name."""
        checks = names.property_checks(
            lambda name: self._field_verdict("leadFields", name),
            lambda name: self._field_verdict("personFields", name),
        )
        return checks + assignee_checks(names.assignees, self._active_users, asked="GET /v1/users")

    def _field_verdict(self, kind: str, name: str) -> tuple[bool, str]:
        key, how = _field_key(self._fields_of(kind), name, f"GET /v1/{kind}")
        return key is not None, how

    def _fields_of(self, kind: str) -> dict[str, dict[str, Any]]:
        """`leadFields` or `personFields` by key, every page, read once."""
        if kind not in self._fields:
            self._fields[kind] = self._field_pages(f"/v1/{kind}")
        return self._fields[kind]

    def _keyed(self, kind: str, configured: Mapping[str, str]) -> dict[str, str]:
        """The configured properties by the keys Pipedrive takes: a name is mapped to its
        field's key; a 40-hex key is sent as it is, unread (a key that names no field is
        what `check_destinations` refuses). A name no field has: PERMANENT."""
        if all(CUSTOM_FIELD_KEY.fullmatch(name) for name in configured):
            return dict(configured)
        with read_before_write(f"the {kind} could not be read"):
            fields = self._fields_of(kind)
        keyed, unknown = {}, []
        for name, value in configured.items():
            key, _ = _field_key(fields, name, f"GET /v1/{kind}")
            if key is None:
                unknown.append(name)
            else:
                keyed[key] = value
        if unknown:
            raise unknown_property_error(unknown, f"Pipedrive's {kind}")
        return keyed

    def _active_users(self) -> list[Owner]:
        """The company's active users (`GET /v1/users`, one list), read once."""
        if self._users is None:
            response = self._send("GET", "/v1/users")
            _raise_for_status(response)
            data = json_object(response).get("data") or []
            self._users = [
                Owner(
                    id=str(u["id"]), name=str(u.get("name") or ""), email=str(u.get("email") or "")
                )
                for u in data
                if isinstance(u, dict)
                and u.get("id") is not None
                and u.get("active_flag") is not False
            ]
        return self._users

    def _owner_id(self, assignee: str) -> int:
        """The user id a configured assignee names: a number as it is, else the active
        user found by email or name; none: PERMANENT, naming it."""
        return int(
            owner_id_of(assignee, self._active_users, asked="GET /v1/users", is_id=str.isdigit)
        )

    # -- records (leads) -----------------------------------------------------

    def create_record(self, **record: Unpack[NewRecord]) -> Effect:
        """The person (found by email, else created), then the lead. The configured
        properties are the lead's fields, the contact properties the person's, each by
        its key (a custom field's is its 40-hex key; a field's name is mapped to it,
        `_keyed`); a lead has no pipeline or stage (a deal's are), so those are not sent."""
        # allow_duplicate is ignored: Pipedrive has no duplicate rule that refuses a create.
        fields, external_ref = record["fields"], record["external_ref"]
        content = content_of(record)
        properties = self._keyed("leadFields", content.properties) if content.properties else {}
        contact = (
            self._keyed("personFields", content.contact_properties)
            if content.contact_properties
            else {}
        )
        # The lead was not sent: trying again risks a second person, never a second lead.
        with unclear_is_retryable(
            lambda message: f"the person's creation is unclear, the lead was not sent: {message}"
        ):
            person_id = self._person_for(fields, contact)
        body = {
            **properties,
            "title": _title(fields),
            "person_id": person_id,
            self.reference_field: external_ref,
            **self._message(fields),
        }
        response = self._send("POST", "/v1/leads", json=body)
        _raise_for_status(response)
        return Effect(ref=str(_data(response)["id"]), reply=http_reply(response.status_code))

    def update_record(self, **update: Unpack[RecordUpdate]) -> Effect:
        """PATCH the lead's title, person and configured fields: the same update twice
        leaves it as once."""
        record_id, fields = update["record_id"], update["fields"]
        content = content_of(update)
        body: dict[str, Any] = {
            **(self._keyed("leadFields", content.properties) if content.properties else {}),
            "title": _title(fields),
            **self._message(fields),
        }
        body.pop(self.reference_field, None)
        if fields.get("email"):
            body["person_id"] = self._person_for(fields)
        response = self._send("PATCH", f"/v1/leads/{_segment(record_id)}", json=body)
        _raise_for_status(response)
        return Effect(ref=str(_data(response).get("id", record_id)), reply=http_reply(200))

    def get_record(self, record_id: str) -> dict[str, Any] | None:
        if self.reference_check(record_id) is not None:
            return None
        response = self._send("GET", f"/v1/leads/{_segment(record_id)}")
        if response.status_code == 404:
            return None
        _raise_for_status(response)
        lead = _data(response)
        record = self._record(lead)
        person_id = lead.get("person_id")
        if person_id:
            person = self._send("GET", f"/api/v2/persons/{int(person_id)}")
            if person.status_code == 200:
                data = _data(person)
                record["name"] = data.get("name", "")
                record["email"] = _primary(data.get("emails"))
        return record

    def reference_check(self, record_id: str) -> str | None:
        # "The unique ID of the lead in the UUID format" (client-nodejs v1 models/lead.ts).
        try:
            uuid.UUID(record_id)
        except ValueError:
            return "Pipedrive lead ids are UUIDs, like adf21080-0e10-11eb-879b-05d71fb426ec"
        return None

    def find_record(self, *, external_ref: str) -> str | None:
        """The lead holding `external_ref` in the reference field, by search (which lags:
        None means "not found yet", not "absent"). Several: a PERMANENT error."""
        params = {
            "term": external_ref,
            "fields": "custom_fields",
            "exact_match": "true",
            "limit": _PAGE,
        }
        response = self._send("GET", "/api/v2/leads/search", params=params)
        _raise_for_status(response)
        items = (_data(response) or {}).get("items") or []
        candidates = [str(entry["item"]["id"]) for entry in items if entry.get("item")]
        # exact_match "is not case sensitive" (v2 leads-api.ts): read each candidate back
        # and keep those whose field holds the reference exactly.
        matches = [lead_id for lead_id in candidates if self._holds(lead_id, external_ref)]
        if len(matches) > 1:
            raise DestinationError(
                f"{len(matches)} Pipedrive leads hold reference {external_ref}: "
                + ", ".join(matches),
                classification=Classification.PERMANENT,
                reply=http_reply(response.status_code),
            )
        return matches[0] if matches else None

    def merge_records(self, *, survivor_id: str, duplicate_id: str, key: str) -> Effect:
        raise DestinationError(
            "Pipedrive cannot merge leads (only persons, organizations and deals): "
            f"archive or delete lead {duplicate_id} in Pipedrive",
            classification=Classification.PERMANENT,
        )

    def erase_person(self, *, record_id: str, task_ids: tuple[str, ...] = ()) -> Effect:
        """The lead's person unless already deleted (DELETE /v1/persons/{id}: "marks a
        person as deleted", permanently after 30 days:
        https://developers.pipedrive.com/docs/api/v1/Persons#deletePerson), the task
        activities (DELETE /api/v2/activities/{id}) and the lead (DELETE /v1/leads/{id}),
        the lead last: until then it names its person, so a repeat after a lost answer
        finds what is left; a 404 on any part is that part gone."""
        if self.reference_check(record_id) is not None:
            raise DestinationError(
                f"{record_id!r} is not a Pipedrive lead id", classification=Classification.PERMANENT
            )
        response = self._send("GET", f"/v1/leads/{_segment(record_id)}")
        if response.status_code == 404:
            return Effect(ref=record_id, reply=http_reply(404), adopted=True)
        _raise_for_status(response)
        person_id = _data(response).get("person_id")
        if person_id and self._person_live(int(person_id)):
            _deleted(self._send("DELETE", f"/v1/persons/{int(person_id)}"))
        for task_id in task_ids:
            _deleted(self._send("DELETE", f"/api/v2/activities/{_segment(task_id)}"))
        response = self._send("DELETE", f"/v1/leads/{_segment(record_id)}")
        _deleted(response)
        return Effect(ref=record_id, reply=http_reply(response.status_code))

    def _person_live(self, person_id: int) -> bool:
        """Whether the person is still there to delete (GET /api/v2/persons/{id}): a lead
        keeps naming its person after the person's deletion, so a repeat after a lost
        answer reads first and deletes nothing twice. Deleted: 404, or marked
        `is_deleted` (v2) or `active_flag` false (v1) during Pipedrive's 30 days."""
        response = self._send("GET", f"/api/v2/persons/{person_id}")
        if response.status_code == 404:
            return False
        _raise_for_status(response)
        person = _data(response)
        return not person.get("is_deleted") and person.get("active_flag") is not False

    def iter_records(
        self, **listing: Unpack[RecordListing]
    ) -> Iterator[tuple[list[dict[str, Any]], str | None]]:
        """Leads by add_time, offset-paged (`start`/`limit`), in [since, until): the
        listing has no time filter, so it reads from the start and skips earlier ones."""
        until, cursor = listing.get("until"), listing.get("cursor")
        low, high = utc_instant(listing["since"]), utc_instant(until) if until else None
        start = int(cursor) if cursor and cursor.isdigit() else 0
        page_size = max(1, min(listing_limit(listing), _PAGE))
        while True:
            params = {"start": start, "limit": page_size, "sort": "add_time ASC"}
            response = self._send("GET", "/v1/leads", params=params)
            _raise_for_status(response)
            leads = json_object(response).get("data") or []
            more = _more_items(json_object(response))
            start += len(leads)
            added = [(utc_instant(lead["add_time"]), lead) for lead in leads]
            page = [
                self._record(lead)
                for at, lead in added
                if low <= at and (high is None or at < high)
            ]
            past_until = high is not None and any(at >= high for at, _ in added)
            done = not more or not leads or past_until
            yield page, None if done else str(start)
            if done:
                return

    # -- tasks (activities) --------------------------------------------------

    def create_task(self, **task: Unpack[NewTask]) -> Effect:
        """An activity on the lead. A configured assignee is its `owner_id`, a user
        found through the users API (`_owner_id`); the source's own label is the
        owner only when numeric. `due_at` its due_date and due_time (UTC, as Pipedrive
        keeps them)."""
        external_ref, assignee, due_at = task["external_ref"], task["assignee"], task.get("due_at")
        owner = task_owner(
            task,
            owner_id=self._owner_id,
            own_id=lambda label: int(label) if label.isdigit() else None,
        )
        reference = _REFERENCE_LINE.format(html.escape(external_ref))
        note = f"<p>Assignee: {html.escape(assignee)}</p><p>{reference}</p>"
        body: dict[str, Any] = {
            "subject": task["title"],
            "type": self.activity_type,
            "lead_id": task["record_id"],
            "note": note,
        }
        if owner is not None:
            body["owner_id"] = owner
        if due_at is not None:
            due = due_at.astimezone(UTC)
            body["due_date"], body["due_time"] = due.date().isoformat(), due.strftime("%H:%M")
        response = self._send("POST", "/api/v2/activities", json=body)
        _raise_for_status(response)
        return Effect(ref=str(_data(response)["id"]), reply=http_reply(response.status_code))

    def find_task(self, *, record_id: str, external_ref: str) -> str | None:
        """The lead's activity whose note carries `external_ref`, from the lead's activity
        list (a filtered listing, not the search index)."""
        found: list[str] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"lead_id": record_id, "limit": _PAGE}
            if cursor:
                params["cursor"] = cursor
            response = self._send("GET", "/api/v2/activities", params=params)
            _raise_for_status(response)
            body = json_object(response)
            found += [
                str(activity["id"])
                for activity in body.get("data") or []
                if _note_reference(activity) == external_ref
            ]
            cursor = (body.get("additional_data") or {}).get("next_cursor")
            if not cursor:
                break
        if len(found) > 1:
            raise DestinationError(
                f"{len(found)} activities of lead {record_id} carry reference {external_ref}",
                classification=Classification.PERMANENT,
                reply=http_reply(200),
            )
        return found[0] if found else None

    # -- plumbing ------------------------------------------------------------

    def _person_for(
        self, fields: Mapping[str, Any], configured: Mapping[str, str] | None = None
    ) -> int:
        """The person with this email (exact search), else a new one. The search lags
        too: a person created moments ago may be created again. A duplicate person is
        tolerable (Pipedrive merges persons: PUT /v1/persons/{id}/merge); a duplicate
        lead is what Onefold prevents. `configured` (contact properties) go in a new
        person's `custom_fields`; a person found is left as it is."""
        email = str(fields.get("email") or "").strip()
        if email:
            params = {"term": email, "fields": "email", "exact_match": "true", "limit": 1}
            response = self._send("GET", "/api/v2/persons/search", params=params)
            _raise_for_status(response)
            items = (_data(response) or {}).get("items") or []
            if items:
                return int(items[0]["item"]["id"])
        body: dict[str, Any] = {"name": str(fields.get("name") or email or "Website visitor")}
        if email:
            body["emails"] = [{"value": email, "primary": True, "label": "work"}]
        if fields.get("phone"):
            body["phones"] = [{"value": str(fields["phone"]), "primary": True, "label": "work"}]
        # Custom fields (40-hex keys) go under custom_fields, the person's own at the top.
        custom = {k: v for k, v in (configured or {}).items() if CUSTOM_FIELD_KEY.fullmatch(k)}
        body.update({k: v for k, v in (configured or {}).items() if k not in custom})
        if custom:
            body["custom_fields"] = custom
        response = self._send("POST", "/api/v2/persons", json=body)
        _raise_for_status(response)
        return int(_data(response)["id"])

    def _message(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The enquiry's message for the lead's message field, when one is configured."""
        if not self.message_field:
            return {}
        return {self.message_field: str(fields.get("message") or "") or None}

    def _holds(self, lead_id: str, external_ref: str) -> bool:
        response = self._send("GET", f"/v1/leads/{_segment(lead_id)}")
        if response.status_code == 404:
            return False  # deleted since the index saw it
        _raise_for_status(response)
        return _data(response).get(self.reference_field) == external_ref

    def _lead_fields(self) -> dict[str, dict[str, Any]]:
        # Read afresh: verify() says what the CRM holds now.
        return self._field_pages("/v1/leadFields")

    def _field_pages(self, path: str) -> dict[str, dict[str, Any]]:
        """Every field of a v1 fields list, by key, page by page (start, limit)."""
        fields: dict[str, dict[str, Any]] = {}
        start = 0
        while True:
            response = self._send("GET", path, params={"start": start, "limit": _PAGE})
            _raise_for_status(response)
            body = json_object(response)
            page = body.get("data") or []
            fields.update({str(f.get("key")): f for f in page if isinstance(f, dict)})
            start += len(page)
            if not page or not _more_items(body):
                return fields

    def _record(self, lead: Mapping[str, Any]) -> dict[str, Any]:
        """A lead in the shape reconciliation and review read from every CRM."""
        return {
            "id": str(lead["id"]),
            "external_ref": lead.get(self.reference_field),
            "name": "",
            "email": "",
            "message": str(lead.get(self.message_field) or "") if self.message_field else "",
            "title": lead.get("title", ""),
            "created_at": lead.get("add_time"),
            "updated_at": lead.get("update_time"),
            "merged_into": None,
        }

    def _auth(self) -> dict[str, str]:
        return {"x-api-token": self._token}

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request; a 429 is raised here, read as the burst or the day's budget."""
        response = super()._send(method, path, **kwargs)
        if response.status_code == 429:
            raise rate_limit_error(response, budget_timezone=self.budget_timezone)
        return response


def adapter_from_env(
    *, base_url: str | None, timeout: float, env: Mapping[str, str]
) -> PipedriveCrm:
    """The adapter from PIPEDRIVE_* variables; `base_url` (the destination's) wins over
    PIPEDRIVE_BASE_URL. A missing token or a malformed setting is a RETRYABLE
    `DestinationError` naming the variable (never its value): nothing is sent until
    the configuration is corrected."""
    read = AdapterSettings(env, base_url=base_url, url_variable="PIPEDRIVE_BASE_URL")
    if read.missing(["PIPEDRIVE_API_TOKEN"]):
        raise _misconfigured("PIPEDRIVE_API_TOKEN is not set")
    field = read.get("PIPEDRIVE_REFERENCE_FIELD")
    if CUSTOM_FIELD_KEY.fullmatch(field) is None:
        raise _misconfigured(
            "PIPEDRIVE_REFERENCE_FIELD must be the 40-hex key of the lead (deal) custom "
            "field that holds Onefold's reference"
        )
    message_field = read.get("PIPEDRIVE_MESSAGE_FIELD") or None
    if message_field is not None and CUSTOM_FIELD_KEY.fullmatch(message_field) is None:
        raise _misconfigured(
            "PIPEDRIVE_MESSAGE_FIELD, when set, must be the 40-hex key of a text lead field"
        )
    try:
        zone = read.time_zone("PIPEDRIVE_BUDGET_TIMEZONE")
        settle = read.seconds("PIPEDRIVE_SETTLE_SECONDS", DEFAULT_SETTLE_SECONDS, minimum=0)
    except SettingError as exc:
        raise _misconfigured(str(exc)) from None
    return PipedriveCrm(
        read.url("PIPEDRIVE_BASE_URL", DEFAULT_BASE_URL),
        api_token=read.get("PIPEDRIVE_API_TOKEN"),
        reference_field=field,
        timeout=timeout,
        settle_seconds=settle,
        activity_type=read.get("PIPEDRIVE_ACTIVITY_TYPE", "task"),
        message_field=message_field,
        budget_timezone=zone,
    )


def _misconfigured(message: str) -> DestinationError:
    return DestinationError(f"Pipedrive: {message}", classification=Classification.RETRYABLE)


def _field_check(
    capability: str, fields: Mapping[str, Mapping[str, Any]], key: str, types: frozenset[str]
) -> CapabilityCheck:
    """Whether lead field `key` exists, is active and of one of `types`, said as asked."""
    field = fields.get(key)
    where = f"GET /v1/leadFields: {key}"
    if field is None:
        how = f"{where} is not a lead field (leads inherit the deal's custom fields)"
        return CapabilityCheck(capability, False, how)
    kind = str(field.get("field_type"))
    name = field.get("name", "")
    if field.get("active_flag") is False:
        return CapabilityCheck(capability, False, f"{where} ({name!r}) is not active")
    if capability == "lookup" and (kind not in types or field.get("searchable_flag") is False):
        how = f"{where} ({name!r}) is of type {kind}, which search cannot find"
        return CapabilityCheck(capability, False, how)
    if kind not in types:
        return CapabilityCheck(capability, False, f"{where} ({name!r}) is of type {kind}")
    how = f"{where} ({name!r}) exists, type {kind}"
    return CapabilityCheck(
        capability, True, how + ("; search lags writes" if capability == "lookup" else "")
    )


def _field_key(
    fields: Mapping[str, Mapping[str, Any]], name: str, asked: str
) -> tuple[str | None, str]:
    """The key of the field `name` names (its key, else its name, exactly, else ignoring
    case when only one field has it), and what was found, for a check's `how`."""
    if name in fields:
        return name, f"{asked}: {name!r} is the key of {fields[name].get('name', name)!r}"
    named = [k for k, f in fields.items() if f.get("name") == name]
    if not named:
        named = [
            k for k, f in fields.items() if str(f.get("name", "")).casefold() == name.casefold()
        ]
    if len(named) == 1:
        return named[0], f"{asked}: {name!r} is the field with key {named[0]}"
    if named:
        return (
            None,
            f"{asked}: {len(named)} fields are named {name!r} ({', '.join(named)}): use the key",
        )
    return None, f"{asked}: no field has the key or name {name!r}"


def _raise_for_status(response: httpx.Response) -> None:
    """Pipedrive's answers in the engine's vocabulary. A refusal's delay is x-ratelimit-reset
    (seconds; pipedrive.readme.io/docs/core-api-concepts-rate-limiting), else Retry-After."""
    if response.is_success:
        return
    error = json_object(response).get("error") or response.reason_phrase
    raise status_error(
        response,
        f"HTTP {response.status_code}: {error}",
        retry_after=parse_retry_after(response.headers.get("x-ratelimit-reset")),
    )


def _deleted(response: httpx.Response) -> None:
    """A deletion's answer: a 404 is the object already gone."""
    if response.status_code != 404:
        _raise_for_status(response)


def rate_limit_error(response: httpx.Response, *, budget_timezone: str) -> DestinationError:
    """A 429 read as the module's docstring says: the day's token budget when its
    2-second window still has room, else the burst window. Nothing was applied."""
    error = json_object(response).get("error") or response.reason_phrase
    remaining = response.headers.get("x-ratelimit-remaining", "").strip()
    if remaining.isdigit() and int(remaining) > 0:
        return DestinationError(
            f"HTTP 429: {error} (the day's token budget is spent; it resets at midnight "
            f"{budget_timezone})",
            classification=Classification.RETRYABLE,
            reply=http_reply(429),
            retry_after=seconds_to_midnight(budget_timezone),
            rate_limit=RateLimit.DAILY,
        )
    reset = parse_retry_after(response.headers.get("x-ratelimit-reset"))
    if reset is None:
        reset = header_delay(response)
    return DestinationError(
        f"HTTP 429: {error}",
        classification=Classification.RETRYABLE,
        reply=http_reply(429),
        retry_after=reset if reset is not None else _BURST_SECONDS,
        rate_limit=RateLimit.WINDOW,
    )


def _data(response: httpx.Response) -> dict[str, Any]:
    data = json_object(response).get("data")
    return data if isinstance(data, dict) else {}


def _more_items(body: Mapping[str, Any]) -> bool:
    """v1 lists say so in additional_data (leads) or additional_data.pagination (others)."""
    extra = body.get("additional_data") or {}
    pagination = extra.get("pagination") or extra
    return bool(pagination.get("more_items_in_collection"))


def _title(fields: Mapping[str, Any]) -> str:
    who = str(fields.get("name") or fields.get("email") or "a website visitor")
    form = str(fields.get("form") or "").strip()
    return f"Enquiry from {who}" + (f" ({form})" if form else "")


def _primary(emails: Any) -> str:
    if not isinstance(emails, list) or not emails:
        return ""
    primary = next((e for e in emails if isinstance(e, dict) and e.get("primary")), emails[0])
    return str(primary.get("value", "")) if isinstance(primary, dict) else str(primary)


def _note_reference(activity: Mapping[str, Any]) -> str | None:
    match = _REFERENCE_IN_NOTE.search(str(activity.get("note") or ""))
    return html.unescape(match.group(1)) if match else None


def _segment(value: str) -> str:
    return quote(value, safe="")
