"""The sandbox CRM's adapter: records, tasks, lookup, merge, listing over HTTP.

Every create carries the operation key twice: as `Idempotency-Key` (used when the
CRM honours it) and as `external_ref` (used for uniqueness and lookup). The
sandbox can be switched to behave like CRMs with fewer guarantees, so its
capabilities come from the destination's configuration (the profile it runs).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC
from typing import Any, Unpack

import httpx

from integrations.capabilities import Capabilities, CapabilityCheck, ConfiguredCrmNames
from integrations.http import (
    HttpAdapter,
    json_object,
    named_effect,
    path_segment,
    status_error,
    timeout_of,
)
from integrations.limits import RequestBudget
from integrations.listing import RecordListing, listing_limit
from integrations.outcomes import Classification, DestinationError, Effect, http_reply
from integrations.owners import assignee_check
from integrations.writes import NewRecord, NewTask, RecordUpdate, content_of

# The sandbox names records rec_000001, rec_000002, ... (store.record_id).
_RECORD_ID = re.compile(r"rec_\d{6,}")


class SandboxCrm(HttpAdapter):
    """`CrmAdapter` for the sandbox's CRM API (lab/sandbox/__init__.py)."""

    # The sandbox has no rate limit (docs/destinations.md).
    request_budget: RequestBudget | None = None

    def __init__(
        self, base_url: str, *, timeout: float, capabilities: Capabilities | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.capabilities = capabilities or Capabilities()
        self.timeout = timeout_of(timeout)

    def verify(self) -> list[CapabilityCheck]:
        """The declared capabilities against what GET /_sandbox/capabilities reports."""
        response = self._send("GET", "/_sandbox/capabilities")
        self._raise_for_status(response)
        reported = json_object(response)
        checks = []
        for name in ("idempotency_keys", "unique_external_ref", "lookup"):
            if not getattr(self.capabilities, name):
                continue
            holds = reported.get(name) is True
            checks.append(
                CapabilityCheck(
                    name, holds, f"GET /_sandbox/capabilities: {name}={str(holds).lower()}"
                )
            )
        return checks

    def names_check(self, names: ConfiguredCrmNames) -> list[CapabilityCheck]:
        """The sandbox takes any property (a record keeps non-core keys in `extra`) and
        any assignee (a task keeps it as written): every name holds, asking nothing."""
        kept = (True, "the sandbox keeps any property in the record's extra")
        return [
            *names.property_checks(lambda _: kept, lambda _: kept),
            *(
                assignee_check(n, True, "the sandbox keeps any assignee as written")
                for n in sorted(names.assignees)
            ),
        ]

    # -- records -------------------------------------------------------------

    def create_record(self, **record: Unpack[NewRecord]) -> Effect:
        # allow_duplicate is ignored: the sandbox has no duplicate rule.
        external_ref = record["external_ref"]
        body = {**_record_body(record), "external_ref": external_ref}
        return self._create("POST", "/crm/records", body, idempotency_key=external_ref)

    def find_record(self, *, external_ref: str) -> str | None:
        return self._find("/crm/records", external_ref)

    def reference_check(self, record_id: str) -> str | None:
        if _RECORD_ID.fullmatch(record_id) is None:
            return "sandbox record references look like rec_000123"
        return None

    def get_record(self, record_id: str) -> dict[str, Any] | None:
        response = self._send("GET", f"/crm/records/{_segment(record_id)}")
        if response.status_code == 404:
            return None
        self._raise_for_status(response)
        return json_object(response)

    def update_record(self, **update: Unpack[RecordUpdate]) -> Effect:
        """PATCH: the same update twice leaves the record as once."""
        record_id = update["record_id"]
        response = self._send(
            "PATCH", f"/crm/records/{_segment(record_id)}", json=_record_body(update)
        )
        self._raise_for_status(response)
        return named_effect(response, record_id)

    def iter_records(
        self, **listing: Unpack[RecordListing]
    ) -> Iterator[tuple[list[dict[str, Any]], str | None]]:
        """Yields (page, cursor to resume after this page) until the listing ends."""
        until, cursor = listing.get("until"), listing.get("cursor")
        while True:
            params: dict[str, Any] = {
                "since": listing["since"],
                "limit": listing_limit(listing),
            }
            if until:
                params["until"] = until
            if cursor:
                params["cursor"] = cursor
            response = self._send("GET", "/crm/records", params=params)
            self._raise_for_status(response)
            data = response.json()
            cursor = data.get("next_cursor")
            yield data["results"], cursor
            if not cursor:
                return

    def merge_records(self, *, survivor_id: str, duplicate_id: str, key: str) -> Effect:
        return self._create(
            "POST",
            f"/crm/records/{_segment(survivor_id)}/merge",
            {"duplicate_id": duplicate_id},
            idempotency_key=key,
        )

    def erase_person(self, *, record_id: str, task_ids: tuple[str, ...] = ()) -> Effect:
        """DELETE /crm/records/<id>: the record holds the person, and its tasks go with it.
        A 404 is a deletion already made (a repeat after a lost answer)."""
        response = self._send("DELETE", f"/crm/records/{_segment(record_id)}")
        if response.status_code != 404:
            self._raise_for_status(response)
        return Effect.deletion(record_id, response.status_code)

    # -- tasks ---------------------------------------------------------------

    def create_task(self, **task: Unpack[NewTask]) -> Effect:
        # The sandbox has no owners: any assignee is kept as written.
        external_ref, due_at = task["external_ref"], task.get("due_at")
        body: dict[str, Any] = {
            "external_ref": external_ref,
            "title": task["title"],
            "assignee": task["assignee"],
        }
        if due_at is not None:
            body["due_at"] = due_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        path = f"/crm/records/{_segment(task['record_id'])}/tasks"
        return self._create("POST", path, body, idempotency_key=external_ref)

    def find_task(self, *, record_id: str, external_ref: str) -> str | None:
        return self._find(f"/crm/records/{_segment(record_id)}/tasks", external_ref)

    # -- plumbing ------------------------------------------------------------

    def _create(
        self, method: str, path: str, body: dict[str, Any], *, idempotency_key: str
    ) -> Effect:
        response = self._send(method, path, json=body, headers={"Idempotency-Key": idempotency_key})
        if response.status_code == 409:
            # A unique external reference already exists: the effect happened
            # (an earlier attempt, or its lost answer). Adopt it.
            existing = json_object(response).get("existing_id")
            if existing:
                return Effect(ref=str(existing), reply=http_reply(409), adopted=True)
            raise DestinationError(
                "409 without existing_id",
                classification=Classification.PERMANENT,
                reply=http_reply(409),
            )
        self._raise_for_status(response)
        replayed = response.headers.get("Idempotent-Replayed", "").lower() == "true"
        return Effect(
            ref=str(json_object(response)["id"]),
            reply=http_reply(response.status_code),
            adopted=replayed,
        )

    def _find(self, path: str, external_ref: str) -> str | None:
        response = self._send("GET", path, params={"external_ref": external_ref})
        if response.status_code == 404:
            raise DestinationError(
                f"lookup refused (404) at {path}: the destination does not offer lookup",
                classification=Classification.PERMANENT,
                reply=http_reply(404),
            )
        self._raise_for_status(response)
        results = json_object(response).get("results", [])
        if len(results) > 1:
            raise DestinationError(
                f"{len(results)} records hold external_ref {external_ref}",
                classification=Classification.PERMANENT,
                reply=http_reply(response.status_code),
            )
        return str(results[0]["id"]) if results else None

    @staticmethod
    def _raise_for_status(response: httpx.Response) -> None:
        if response.is_success:
            return
        detail = json_object(response).get("detail") or response.reason_phrase
        raise status_error(response, f"HTTP {response.status_code}: {detail}")


def _record_body(given: NewRecord | RecordUpdate) -> dict[str, Any]:
    """A record's body: the core fields, then the configured properties (`content`) as keys
    of their own (the sandbox keeps every key but the core ones in `extra`), the contact's
    under `contact`, and `pipeline` and `stage` when set."""
    content = content_of(given)
    body = {**given["fields"], **content.properties}
    if content.contact_properties:
        body["contact"] = dict(content.contact_properties)
    if content.pipeline:
        body["pipeline"] = content.pipeline
    if content.stage:
        body["stage"] = content.stage
    return body


def _segment(value: str) -> str:
    return path_segment(value, "cannot name a record")
