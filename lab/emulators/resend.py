"""A local stand-in for Resend's email API (https://resend.com/docs/api-reference).

Answers `POST /emails` with Resend's idempotency-key contract, `GET /emails/{id}`
and `GET /domains`, in Resend's error shape, plus the `/_sandbox/` controls every
emulator shares (lab/emulators/kit.py). The part below describes
the API, the controls and what is simplified.

The emulated API
================

Resend, the transactional email API: its adapter and a local emulator.

The adapter (`adapter.py`, `ResendSender`) sends the confirmation email with
`POST /emails` and `Idempotency-Key: <operation key>`; its capabilities are
`idempotency_keys=True` with `key_retention` 24 hours (Resend's documented
window). Configuration: `adapter_from_env()` reads `RESEND_API_KEY` (required,
sent as `Authorization: Bearer`), `RESEND_BASE_URL` (default
https://api.resend.com), `RESEND_FROM` (default: Django's `DEFAULT_FROM_EMAIL`,
itself read from the environment variable of that name) and
`RESEND_KEY_RETENTION_SECONDS` (optional; can only shorten the 24 hours).

Running the emulator
====================

In-process (tests)::

    from lab.emulators.resend import ResendEmulator

    with ResendEmulator() as resend:            # port 0: a free port
        httpx.post(f"{resend.http_url}/emails", json={...},
                   headers={"Authorization": "Bearer re_test", "Idempotency-Key": "k"})

A real HTTP/1.1 server on loopback; its state lives in memory, never in the
app's database.

Resend API (what the adapter calls)
===================================

Every answer carries `ratelimit-limit`, `ratelimit-remaining`, `ratelimit-reset`
(https://resend.com/docs/api-reference/rate-limit). Errors are Resend's shape
`{"statusCode", "message", "name"}` (https://resend.com/docs/api-reference/errors).

Authentication: `Authorization: Bearer re_...`. None: 401 `missing_api_key`; a
key that does not start with `re_`, or differs from the configured `api_key`:
403 `invalid_api_key`. A key with `api_key_permission` `sending_access` may send
and nothing else: 401 `restricted_api_key` on the other paths.

``POST /emails`` ``{"from", "to": str | [str] (1-50), "subject", "text" | "html",
"headers"?: {...}}``
    200 ``{"id": "<uuid>"}``: the email is sent (stored, see the controls).
    Missing fields: 422 `missing_required_field`; a malformed address: 422
    `validation_error`. When `domains` are configured, a `from` domain that is
    not listed as verified: 403 `validation_error`.
    ``Idempotency-Key`` (https://resend.com/docs/dashboard/emails/idempotency-keys):
    outside 1-256 characters: 400 `invalid_idempotency_key`. A key seen within
    `idempotency_window_seconds` (default 86400) with the same payload (the
    request body, compared as canonical JSON) answers the first answer again
    and sends nothing; with another payload 409 `invalid_idempotent_request`;
    while the first request with it is still in progress (e.g. held by a `slow`
    fault) 409 `concurrent_idempotent_requests`. Older keys are forgotten: the
    same request then sends a second email, as Resend would after 24 hours. A
    request refused before sending (a 429 or 500 fault) leaves the key unbound.

``GET /emails/{id}``
    200 with the email (`object`, `id`, `from`, `to`, `subject`, `text`, `html`,
    `headers`, `created_at`, `last_event`), 404 `not_found`.

``GET /domains``
    200 ``{"object": "list", "data": [{"id", "name", "status", "created_at",
    "region"}]}`` from the configured `domains`.

Controls (tests and drills)
===========================

The sandbox's `/_sandbox/reset`, `/_sandbox/faults` (action `send_email`; the
before-commit modes answer in Resend's words: `http_429` is 429
`rate_limit_exceeded` with `retry-after`, `fail_before_commit` and
`http_500_after_commit` are 500 `internal_server_error`, `http_400` is 422
`validation_error`), `/_sandbox/chaos` and `/_sandbox/stats`: records and tasks
0, `messages` the emails sent, `messages_by_recipient`, and
`messages_by_message_id` keyed by the idempotency key (the email id when sent
without one).

``GET|POST /_sandbox/config`` ``{"idempotency_window_seconds", "api_key",
"api_key_permission", "domains"}``: read or change the settings above.

``GET /_sandbox/messages``: ``{"results": [emails, oldest first]}``, each with
the `idempotency_key` it was sent with.

Simplified: no batch sending, attachments, scheduling, webhooks or per-second
rate limiting of its own (429s come from faults); the payload comparison is on
the JSON body as sent.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sqlite3
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from lab.emulators.kit import EmulatorServer
from lab.sandbox.http import CONTROL_ROUTES, Reply, Route, SandboxRequestHandler
from lab.sandbox.store import Fault, InvalidInput, SandboxStore

# Resend keeps idempotency keys 24 hours
# (https://resend.com/docs/dashboard/emails/idempotency-keys).
DEFAULT_WINDOW_SECONDS = 86400.0
# "Idempotency keys can be up to 256 characters" (same page); 400
# invalid_idempotency_key otherwise (https://resend.com/docs/api-reference/errors).
MAX_KEY_LENGTH = 256
# The documented default rate: 2 requests per second per team
# (https://resend.com/docs/api-reference/rate-limit); only shown in the headers here.
RATE_LIMIT = 2
_ADDRESS = re.compile(r"^[^\s@<>]+@[^\s@<>]+\.[^\s@<>]+$")
_FROM = re.compile(r"^(?:[^<>]*<)?(?P<address>[^\s@<>]+@(?P<domain>[^\s@<>]+))>?$")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS resend_emails (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    sender TEXT NOT NULL,
    recipients TEXT NOT NULL,
    subject TEXT NOT NULL,
    text_body TEXT,
    html_body TEXT,
    headers TEXT NOT NULL,
    idempotency_key TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS resend_keys (
    key TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL,
    state TEXT NOT NULL,            -- in_flight | done
    status INTEGER,
    response TEXT,
    seen_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS resend_config (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
DEFAULT_CONFIG: dict[str, Any] = {
    # Seconds an idempotency key is remembered (tests step outside it).
    "idempotency_window_seconds": DEFAULT_WINDOW_SECONDS,
    # The one API key accepted; None: any key that starts with re_.
    "api_key": None,
    # "full_access" or "sending_access" (Resend's two permissions).
    "api_key_permission": "full_access",
    # [{"name": "example.com", "status": "verified"}]: what GET /domains lists. When
    # any are listed, a send from another domain or an unverified one is refused (403).
    "domains": [],
}


def resend_error(status: int, name: str, message: str, **headers: str) -> Reply:
    """Resend's error body: {"statusCode", "message", "name"}
    (https://resend.com/docs/api-reference/errors)."""
    return Reply(status, {"statusCode": status, "message": message, "name": name}, dict(headers))


def rate_headers(remaining: int = RATE_LIMIT - 1, reset: int = 1) -> dict[str, str]:
    """The IETF-style headers Resend sends with every answer
    (https://resend.com/docs/api-reference/rate-limit)."""
    return {
        "ratelimit-limit": str(RATE_LIMIT),
        "ratelimit-remaining": str(remaining),
        "ratelimit-reset": str(reset),
    }


def fingerprint(body: Mapping[str, Any]) -> str:
    """The payload a key is bound to: the request body, canonical JSON."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class ResendStore(SandboxStore):
    """The sandbox store (faults, chaos, call counts) plus Resend's emails and keys."""

    def __init__(self, db_path: str | None = None) -> None:
        super().__init__(db_path)
        with self._lock:
            self._conn.executescript(_SCHEMA)

    def reset(self) -> None:
        super().reset()
        with self._transaction() as db:
            for table in ("resend_emails", "resend_keys", "resend_config"):
                db.execute(f"DELETE FROM {table}")

    # -- configuration -------------------------------------------------------

    def config(self) -> dict[str, Any]:
        with self._lock:
            rows = self._conn.execute("SELECT name, value FROM resend_config").fetchall()
        current = dict(DEFAULT_CONFIG)
        current.update({row["name"]: json.loads(row["value"]) for row in rows})
        return current

    def set_config(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(changes) - set(DEFAULT_CONFIG)
        if unknown:
            raise InvalidInput(f"unknown settings: {', '.join(sorted(unknown))}")
        window = changes.get("idempotency_window_seconds", 1.0)
        if isinstance(window, bool) or not isinstance(window, int | float) or window < 0:
            raise InvalidInput("idempotency_window_seconds must be a number >= 0")
        if changes.get("api_key_permission", "full_access") not in (
            "full_access",
            "sending_access",
        ):
            raise InvalidInput("api_key_permission must be full_access or sending_access")
        if not isinstance(changes.get("domains", []), list):
            raise InvalidInput("domains must be a list of {name, status}")
        with self._transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO resend_config (name, value) VALUES (?, ?)",
                [(name, json.dumps(value)) for name, value in changes.items()],
            )
        return self.config()

    # -- idempotency keys ----------------------------------------------------

    def claim_key(self, key: str, print_: str) -> tuple[str, dict[str, Any] | None, int]:
        """What a request with `key` meets: ("new", None, 0) when it goes ahead (the key
        is now in flight), ("replay", first answer, status), ("mismatch"|"in_flight", ...).

        Resend: "we check if an email with the same idempotency key has already been sent
        in the last 24 hours"; same key and payload -> the same response, another payload
        -> 409 invalid_idempotent_request, the first still in progress -> 409
        concurrent_idempotent_requests (https://resend.com/docs/dashboard/emails/idempotency-keys).
        """
        window = float(self.config()["idempotency_window_seconds"])
        now = time.time()
        with self._transaction() as db:
            row = db.execute("SELECT * FROM resend_keys WHERE key = ?", (key,)).fetchone()
            if row is not None and row["seen_at"] > now - window:
                if row["fingerprint"] != print_:
                    return "mismatch", None, 0
                if row["state"] == "in_flight":
                    return "in_flight", None, 0
                return "replay", json.loads(row["response"]), int(row["status"])
            # Unknown, or older than the window: forgotten, so the request is a new one.
            db.execute(
                "INSERT OR REPLACE INTO resend_keys (key, fingerprint, state, seen_at) "
                "VALUES (?, ?, 'in_flight', ?)",
                (key, print_, now),
            )
        return "new", None, 0

    def release_key(self, key: str) -> None:
        """The request ended before anything was sent: the key is not bound to it."""
        with self._transaction() as db:
            db.execute("DELETE FROM resend_keys WHERE key = ? AND state = 'in_flight'", (key,))

    # -- emails --------------------------------------------------------------

    def store_email(self, email: Mapping[str, Any], *, key: str | None) -> dict[str, Any]:
        """Sends (stores) one email and, with a key, binds the key to the answer."""
        answer = {"id": str(uuid.uuid4())}
        created_at = datetime.now(UTC).isoformat()
        with self._transaction() as db:
            db.execute(
                "INSERT INTO resend_emails (id, sender, recipients, subject, text_body, "
                "html_body, headers, idempotency_key, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    answer["id"],
                    email["from"],
                    json.dumps(email["to"]),
                    email["subject"],
                    email.get("text"),
                    email.get("html"),
                    json.dumps(email.get("headers") or {}),
                    key,
                    created_at,
                ),
            )
            if key is not None:
                db.execute(
                    "UPDATE resend_keys SET state = 'done', status = 200, response = ? "
                    "WHERE key = ?",
                    (json.dumps(answer), key),
                )
        return answer

    def email(self, email_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM resend_emails WHERE id = ?", (email_id,)
            ).fetchone()
        return self._email_dict(row) if row is not None else None

    def emails(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM resend_emails ORDER BY seq").fetchall()
        return [self._email_dict(row) for row in rows]

    def stats(self, *, detail: bool = True) -> dict[str, Any]:
        """The sandbox's keys: no records or tasks; each sent email is a message,
        counted by recipient and by idempotency key (its id when sent without one)."""
        result = super().stats(detail=detail)
        emails = self.emails()
        result.update(records=0, tasks=0, messages=len(emails))
        if detail:
            by_recipient: dict[str, int] = {}
            by_key: dict[str, int] = {}
            for email in emails:
                for address in email["to"]:
                    by_recipient[address] = by_recipient.get(address, 0) + 1
                ref = email["idempotency_key"] or email["id"]
                by_key[ref] = by_key.get(ref, 0) + 1
            result.update(
                records_by_external_ref={},
                tasks_by_external_ref={},
                messages_by_recipient=dict(sorted(by_recipient.items())),
                messages_by_message_id=dict(sorted(by_key.items())),
            )
        return result

    @staticmethod
    def _email_dict(row: sqlite3.Row) -> dict[str, Any]:
        # The shape of GET /emails/{id} (https://resend.com/docs/api-reference/emails/retrieve-email),
        # plus the key it was sent with.
        return {
            "object": "email",
            "id": row["id"],
            "from": row["sender"],
            "to": json.loads(row["recipients"]),
            "subject": row["subject"],
            "text": row["text_body"],
            "html": row["html_body"],
            "headers": json.loads(row["headers"]),
            "idempotency_key": row["idempotency_key"],
            "created_at": row["created_at"],
            "last_event": "delivered",
        }


class ResendRequestHandler(SandboxRequestHandler):
    """Resend's paths in Resend's words; the sandbox's controls for tests."""

    server_version = "OnefoldResendEmulator/1"
    routes: list[Route] = [
        (re.compile(r"/emails"), {"POST": "emails_post"}),
        (re.compile(r"/emails/(?P<email_id>[^/]+)"), {"GET": "email_get"}),
        (re.compile(r"/domains"), {"GET": "domains_get"}),
        (re.compile(r"/_sandbox/config"), {"GET": "config_get", "POST": "config_post"}),
        (re.compile(r"/_sandbox/messages"), {"GET": "messages_get"}),
        *CONTROL_ROUTES,
    ]

    @property
    def resend(self) -> ResendStore:
        store = self.server.store
        assert isinstance(store, ResendStore)
        return store

    # -- Resend API ----------------------------------------------------------

    def emails_post(self) -> Reply:
        self.store.count_call("send_email")
        refused = self._authenticate(sending=True)
        if refused is not None:
            return refused
        body = self._json_body()
        invalid = self._invalid_email(body)
        if invalid is not None:
            return invalid
        key = self.headers.get("Idempotency-Key")
        if key is not None and not 1 <= len(key) <= MAX_KEY_LENGTH:
            return resend_error(
                400, "invalid_idempotency_key", "The key must be between 1-256 chars."
            )
        if key is not None:
            outcome, first, status = self.resend.claim_key(key, fingerprint(body))
            if outcome == "mismatch":
                return resend_error(
                    409,
                    "invalid_idempotent_request",
                    "Same idempotency key used with a different request payload.",
                )
            if outcome == "in_flight":
                return resend_error(
                    409,
                    "concurrent_idempotent_requests",
                    "Same idempotency key used while original request is still in progress.",
                )
            if outcome == "replay":
                # "our API will give the same response, without actually sending the
                # email again" (idempotency-keys page).
                return Reply(status, first, rate_headers())
        return self._send_email(body, key)

    def _send_email(self, body: dict[str, Any], key: str | None) -> Reply:
        email = {**body, "to": _recipients(body["to"])}

        def work() -> Reply:
            return Reply(200, self.resend.store_email(email, key=key), rate_headers())

        reply = self._faulted("send_email", work)
        if key is not None and reply.status >= 400 and not reply.drop:
            # Refused before sending (a 429, a 500 before commit): nothing is bound to
            # the key. After a commit the key is already done, so this changes nothing.
            self.resend.release_key(key)
        return reply

    def email_get(self, email_id: str) -> Reply:
        refused = self._authenticate(sending=False)
        if refused is not None:
            return refused
        email = self.resend.email(email_id)
        if email is None:
            return resend_error(404, "not_found", "Email not found")
        return Reply(200, {k: v for k, v in email.items() if k != "idempotency_key"})

    def domains_get(self) -> Reply:
        """GET /domains (https://resend.com/docs/api-reference/domains/list-domains):
        a sending-only key is refused with 401 restricted_api_key."""
        refused = self._authenticate(sending=False)
        if refused is not None:
            return refused
        domains = [
            {
                "id": str(uuid.uuid5(uuid.NAMESPACE_DNS, str(domain.get("name")))),
                "name": domain.get("name"),
                "status": domain.get("status", "verified"),
                "created_at": "2026-01-01T00:00:00.000Z",
                "region": "us-east-1",
            }
            for domain in self.resend.config()["domains"]
        ]
        return Reply(200, {"object": "list", "data": domains}, rate_headers())

    def _authenticate(self, *, sending: bool) -> Reply | None:
        """Bearer API key (https://resend.com/docs/api-reference/introduction): none is
        401 missing_api_key, a wrong one 403 invalid_api_key; a sending-only key may send
        and nothing else (401 restricted_api_key; errors page)."""
        header = self.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return resend_error(
                401, "missing_api_key", "Missing API key in the authorization header."
            )
        config = self.resend.config()
        expected = config["api_key"]
        if (expected is not None and token != expected) or not token.startswith("re_"):
            return resend_error(403, "invalid_api_key", "API key is invalid.")
        if not sending and config["api_key_permission"] == "sending_access":
            return resend_error(
                401, "restricted_api_key", "This API key is restricted to only send emails."
            )
        return None

    def _invalid_email(self, body: Mapping[str, Any]) -> Reply | None:
        """Required fields (422 missing_required_field) and field checks (422
        validation_error), as the errors page names them."""
        missing = [name for name in ("from", "to", "subject") if not body.get(name)]
        if missing:
            return resend_error(
                422, "missing_required_field", f"Missing `{', '.join(missing)}` field."
            )
        if not body.get("text") and not body.get("html"):
            return resend_error(422, "missing_required_field", "Missing `html` or `text` field.")
        try:
            recipients = _recipients(body["to"])
        except InvalidInput as exc:
            return resend_error(422, "validation_error", exc.detail)
        if not 1 <= len(recipients) <= 50:
            return resend_error(422, "validation_error", "`to` takes 1 to 50 addresses.")
        match = _FROM.match(str(body["from"]).strip())
        if match is None:
            return resend_error(
                422,
                "validation_error",
                "Invalid `from` field. The email address needs to follow the "
                "`email@example.com` or `Name <email@example.com>` format.",
            )
        return self._refused_domain(match.group("domain"))

    def _refused_domain(self, domain: str) -> Reply | None:
        listed = {
            d.get("name"): d.get("status", "verified") for d in self.resend.config()["domains"]
        }
        if listed and listed.get(domain) != "verified":
            return resend_error(
                403,
                "validation_error",
                f"The {domain} domain is not verified. Please, add and verify your domain.",
            )
        return None

    # -- faults in Resend's words -------------------------------------------

    def fault_reply_before_commit(self, fault: Fault) -> Reply | None:
        retry_after = str(max(1, math.ceil(fault.seconds)))
        if fault.mode == "http_429":
            return resend_error(
                429,
                "rate_limit_exceeded",
                "Too many requests. You can only make 2 requests per second. See rate limit "
                "response headers for more information.",
                **rate_headers(remaining=0, reset=int(retry_after)),
                **{"retry-after": retry_after},
            )
        if fault.mode == "http_503":
            return resend_error(503, "application_error", "Service unavailable, try again.")
        if fault.mode == "http_400":
            return resend_error(422, "validation_error", "Injected validation error.")
        if fault.mode == "fail_before_commit":
            return resend_error(500, "internal_server_error", "An unexpected error occurred.")
        return None

    def fault_reply_after_commit(self, fault: Fault) -> Reply:
        return resend_error(500, "internal_server_error", "An unexpected error occurred.")

    # -- controls ------------------------------------------------------------

    def config_get(self) -> Reply:
        return Reply(200, self.resend.config())

    def config_post(self) -> Reply:
        return Reply(200, self.resend.set_config(self._json_body()))

    def messages_get(self) -> Reply:
        return Reply(200, {"results": self.resend.emails()})


def _recipients(value: Any) -> list[str]:
    """`to`: one address or a list of them (send-email reference)."""
    addresses = [value] if isinstance(value, str) else value
    if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
        raise InvalidInput("Invalid `to` field: a string or a list of strings.")
    for address in addresses:
        if _ADDRESS.match(address.strip()) is None:
            raise InvalidInput(
                "Invalid `to` field. The email address needs to follow the "
                "`email@example.com` or `Name <email@example.com>` format."
            )
    return [address.strip() for address in addresses]


class ResendEmulator(EmulatorServer):
    """Resend's email API on loopback: `with ResendEmulator() as resend: resend.http_url`."""

    vendor = "resend"
    handler_class = ResendRequestHandler
    store_class = ResendStore

    def adapter_env(self) -> dict[str, str]:
        """The RESEND_* variables that point the adapter at this emulator as it starts
        (after a reset any key that starts with re_ is accepted)."""
        return {"RESEND_API_KEY": "re_emulator_key", "RESEND_BASE_URL": self.http_url}
