"""A local stand-in for Resend's email API (https://resend.com/docs/api-reference).

Answers `POST /emails` with Resend's idempotency-key contract, `GET /emails/{id}`,
`GET /domains` and `GET /domains/{id}`, in Resend's error shape, as strict as
Resend's documentation: one API key, the team's rate limit, verified sending
domains, checked addresses. Plus the `/_sandbox/` controls every emulator shares
(lab/emulators/kit.py). The part below describes the API, the controls and what
is simplified.

Running the emulator
====================

In-process (tests)::

    from lab.emulators.resend import DEFAULT_API_KEY, DEFAULT_SENDER, ResendEmulator

    with ResendEmulator() as resend:            # port 0: a free port
        httpx.post(f"{resend.http_url}/emails",
                   json={"from": DEFAULT_SENDER, "to": "ada@example.com", ...},
                   headers={"Authorization": f"Bearer {DEFAULT_API_KEY}",
                            "Idempotency-Key": "k"})

`adapter_env()` gives the RESEND_* variables that point the adapter at it: its
URL, its key and a From address on its verified domain. A real HTTP/1.1 server
on loopback; its state lives in memory, never in the app's database.

Resend API (what the adapter calls)
===================================

Errors are Resend's shape `{"statusCode", "message", "name"}`
(https://resend.com/docs/api-reference/errors). Each API request is checked in
this order: the key, the team's rate limit, the key's permission, the request.

Authentication (https://resend.com/docs/api-reference/introduction, "Authentication";
codes from the errors page): `Authorization: Bearer <key>`. None: 401
`missing_api_key`; any key but the configured `api_key` (default
`DEFAULT_API_KEY`): 403 `invalid_api_key` "API key is invalid.". A key with
`api_key_permission` `sending_access` may send and nothing else: the other paths
answer 401 `restricted_api_key`.

Rate limit (https://resend.com/docs/api-reference/rate-limit): `rate_limit`
requests in any second for the whole team, whichever key sends them (default 2,
the figure Resend announced for every team: https://resend.com/changelog/api-rate-limit;
`null` lifts it). Every API answer carries `ratelimit-limit`, `ratelimit-remaining`
and `ratelimit-reset` (whole seconds until a request is free again); a request
over the limit is refused before anything else with 429 `rate_limit_exceeded`
and `retry-after`. A refused request does not count.

``POST /emails`` ``{"from", "to": str | [str] (1-50), "subject", "text" | "html",
"reply_to"?: str | [str], "headers"?: {...}}``
    200 ``{"id": "<uuid>"}``: the email is sent (stored, see the controls).
    Missing fields: 422 `missing_required_field`. An address that is not
    `email@example.com` or `Name <email@example.com>`: 422 `validation_error`
    (resend/resend-python#65 quotes the answer). A `from` domain that is not one
    of the team's `domains`, or is not `verified`: 403 `validation_error` "The X
    domain is not verified. Please, add and verify your domain on
    https://resend.com/domains" (errors page; the full text as resend/resend-node#455
    quotes it). The domain must match exactly, subdomain included
    (https://resend.com/docs/knowledge-base/403-error-domain-mismatch).
    ``Idempotency-Key`` (https://resend.com/docs/dashboard/emails/idempotency-keys):
    outside 1-256 characters: 400 `invalid_idempotency_key`. A key seen within
    `idempotency_window_seconds` (default 86400) with the same payload (the
    request body, compared as canonical JSON) answers the first answer again
    and sends nothing; with another payload 409 `invalid_idempotent_request`;
    while the first request with it is still in progress (e.g. held by a `slow`
    fault) 409 `concurrent_idempotent_requests`. Older keys are forgotten: the
    same request then sends a second email, as Resend would after 24 hours. A
    request refused before sending (a 429 or 500 fault, a quota) leaves the key
    unbound.
    Quotas (https://resend.com/docs/api-reference/rate-limit, "Email Quotas"):
    with `daily_quota` set (the Free plan's; each recipient counts as one email,
    https://resend.com/docs/knowledge-base/account-quotas-and-limits), a send past
    the emails of the current UTC day answers 429 `daily_quota_exceeded`; with
    `monthly_quota`, past the current UTC month's, 429 `monthly_quota_exceeded`.
    Every answer to a send then carries `x-resend-daily-quota` (only with a daily
    quota) and `x-resend-monthly-quota`: the emails used.

``GET /emails/{id}``
    200 with the email (`object`, `id`, `from`, `to`, `subject`, `text`, `html`,
    `reply_to` when one was sent, `headers`, `created_at`, `last_event`), 404
    `not_found`.

``GET /domains`` (https://resend.com/docs/api-reference/domains/list-domains)
    200 ``{"object": "list", "has_more": false, "data": [{"id", "name", "status",
    "created_at", "region"}]}``: the configured `domains`, by default
    `DEFAULT_DOMAIN` `verified`. Each `status` is one of Resend's
    (https://resend.com/docs/dashboard/domains/manage-domains, "Understand a domain
    status"): not_started, pending, verified, partially_verified,
    partially_failed, failed, temporary_failure.

``GET /domains/{id}`` (https://resend.com/docs/api-reference/domains/get-domain)
    200 with the domain (`object` "domain", the fields above, `records` []); an
    id that is not a UUID: 422 `invalid_parameter`; another: 404 `not_found`.

Controls (tests and drills)
===========================

The sandbox's `/_sandbox/reset` (also empties the rate window),
`/_sandbox/faults` (action `send_email`; the before-commit modes answer in
Resend's words: `http_429` is 429 `rate_limit_exceeded` with `retry-after`,
`fail_before_commit` and `http_500_after_commit` are 500 `application_error`,
`http_400` is 422 `validation_error`), `/_sandbox/chaos` and `/_sandbox/stats`:
records and tasks 0, `messages` the emails sent, `messages_by_recipient`,
`messages_by_message_id` keyed by the idempotency key (the email id when sent
without one), `calls` (`send_email`, `read_domains`, and `rate_limited`: the
requests refused by the rate limit).

``GET|POST /_sandbox/config`` ``{"idempotency_window_seconds", "api_key",
"api_key_permission", "rate_limit", "daily_quota", "monthly_quota", "domains"}``:
read or change the settings above; a test lifts the rate limit with
``{"rate_limit": null}`` and marks a domain pending with ``{"domains": [{"name":
"onefold.example", "status": "pending"}]}``.

``GET /_sandbox/messages``: ``{"results": [emails, oldest first]}``, each with
the `idempotency_key` it was sent with.

Simplified: no batch sending, attachments, scheduling, webhooks, cc/bcc,
templates or domain management (domains are configured, not created), no
pagination of `GET /domains` (every domain in one answer, as Resend answers a
list without `limit`); the payload comparison is on the JSON body as sent; the
month of a monthly quota is the UTC calendar month (Resend does not say when it
starts); only `verified` sends (Resend says a `partially_verified` domain may
send when its sending records are verified).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import sqlite3
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from lab.emulators.kit import EmulatorServer
from lab.sandbox.http import CONTROL_ROUTES, Reply, Route, SandboxRequestHandler
from lab.sandbox.store import Fault, InvalidInput, SandboxStore

# The one API key the emulator accepts unless configured otherwise.
DEFAULT_API_KEY = "re_emulator_0123456789abcdef"
# The team's one sending domain, verified, and an address on it.
DEFAULT_DOMAIN = "onefold.example"
DEFAULT_SENDER = f"Onefold <enquiries@{DEFAULT_DOMAIN}>"
# Resend keeps idempotency keys 24 hours
# (https://resend.com/docs/dashboard/emails/idempotency-keys).
DEFAULT_WINDOW_SECONDS = 86400.0
# "Idempotency keys can be up to 256 characters" (same page); 400
# invalid_idempotency_key otherwise (https://resend.com/docs/api-reference/errors).
MAX_KEY_LENGTH = 256
# Requests per second per team: Resend announced 2 for every team
# (https://resend.com/changelog/api-rate-limit) and raises it per team on request; later
# versions of https://resend.com/docs/api-reference/rate-limit give 5, then 10. The
# lowest documented figure, so that a client that respects it respects them all.
DEFAULT_RATE_LIMIT = 2
RATE_WINDOW_SECONDS = 1.0
# https://resend.com/docs/dashboard/domains/manage-domains, "Understand a domain status".
DOMAIN_STATUSES = (
    "not_started",
    "pending",
    "verified",
    "partially_verified",
    "partially_failed",
    "failed",
    "temporary_failure",
)
MAX_RECIPIENTS = 50

# An address, alone or as `Name <address>`: the two forms Resend accepts in `from` and
# `to`. The domain needs a dot: Resend refuses `a@localhost`.
_ADDRESS = r"[^\s@<>,;\"]+@(?P<{}>(?:[A-Za-z0-9-]+\.)+[A-Za-z0-9-]{{2,}})"
_MAILBOX = re.compile(
    r"^(?:[^<>]*<" + _ADDRESS.format("named") + r">|" + _ADDRESS.format("bare") + r")$"
)

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
    created_at TEXT NOT NULL,
    reply_to TEXT
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
    # The one API key accepted.
    "api_key": DEFAULT_API_KEY,
    # "full_access" or "sending_access" (Resend's two permissions).
    "api_key_permission": "full_access",
    # Requests per second for the team; None lifts the limit.
    "rate_limit": DEFAULT_RATE_LIMIT,
    # Emails a UTC day (the Free plan's 100) and a UTC month; None: no such quota.
    "daily_quota": None,
    "monthly_quota": None,
    # What GET /domains lists; only a domain listed as verified may send.
    "domains": [{"name": DEFAULT_DOMAIN, "status": "verified"}],
}


def resend_error(status: int, name: str, message: str, **headers: str) -> Reply:
    """Resend's error body: {"statusCode", "message", "name"}
    (https://resend.com/docs/api-reference/errors)."""
    return Reply(status, {"statusCode": status, "message": message, "name": name}, dict(headers))


def fingerprint(body: Mapping[str, Any]) -> str:
    """The payload a key is bound to: the request body, canonical JSON."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def sender_domain(value: Any) -> str | None:
    """The domain of `email@example.com` or `Name <email@example.com>`; None when
    the value is neither (Resend's two accepted forms)."""
    match = _MAILBOX.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        return None
    return (match.group("named") or match.group("bare")).lower()


class RateWindow:
    """The team's requests of the last second (a sliding window), shared by every key:
    "This limit applies across all API keys associated with your team"
    (https://resend.com/docs/api-reference/rate-limit)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._admitted: deque[float] = deque()

    def take(self, limit: int) -> tuple[bool, dict[str, str]]:
        """Admits one request if the window has room: (admitted, the answer's headers)."""
        now = time.monotonic()
        with self._lock:
            while self._admitted and self._admitted[0] <= now - RATE_WINDOW_SECONDS:
                self._admitted.popleft()
            admitted = len(self._admitted) < limit
            if admitted:
                self._admitted.append(now)
            remaining = max(0, limit - len(self._admitted))
            free_in = self._admitted[0] + RATE_WINDOW_SECONDS - now
        reset = str(max(1, math.ceil(free_in)))
        headers = {
            "ratelimit-limit": str(limit),
            "ratelimit-remaining": str(remaining),
            "ratelimit-reset": reset,
        }
        if not admitted:
            headers["retry-after"] = reset
        return admitted, headers

    def clear(self) -> None:
        with self._lock:
            self._admitted.clear()


class ResendStore(SandboxStore):
    """The sandbox store (faults, chaos, call counts) plus Resend's emails, keys and
    the team's rate window."""

    def __init__(self, db_path: str | None = None) -> None:
        super().__init__(db_path)
        self.rate_window = RateWindow()
        with self._lock:
            self._conn.executescript(_SCHEMA)

    def reset(self) -> None:
        super().reset()
        self.rate_window.clear()
        with self._transaction() as db:
            for table in ("resend_emails", "resend_keys", "resend_config"):
                db.execute(f"DELETE FROM {table}")

    # -- configuration -------------------------------------------------------

    def config(self) -> dict[str, Any]:
        with self._lock:
            rows = self._conn.execute("SELECT name, value FROM resend_config").fetchall()
        current = copy.deepcopy(DEFAULT_CONFIG)
        current.update({row["name"]: json.loads(row["value"]) for row in rows})
        return current

    def set_config(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(changes) - set(DEFAULT_CONFIG)
        if unknown:
            raise InvalidInput(f"unknown settings: {', '.join(sorted(unknown))}")
        for name, value in changes.items():
            problem = _CONFIG_CHECKS[name](value)
            if problem:
                raise InvalidInput(f"{name} {problem}")
        with self._transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO resend_config (name, value) VALUES (?, ?)",
                [(name, json.dumps(value)) for name, value in changes.items()],
            )
        return self.config()

    def domains(self) -> list[dict[str, Any]]:
        """The team's domains in the shape of GET /domains' items."""
        return [
            {
                "id": str(uuid.uuid5(uuid.NAMESPACE_DNS, domain["name"])),
                "name": domain["name"],
                "status": domain["status"],
                "created_at": "2026-01-01 00:00:00.000000+00",
                "region": "us-east-1",
            }
            for domain in self.config()["domains"]
        ]

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
                "html_body, headers, idempotency_key, created_at, reply_to) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    # A list, whichever form was sent: the Email schema's `reply_to` is one.
                    json.dumps(_recipients(email["reply_to"], "reply_to"))
                    if email.get("reply_to")
                    else None,
                ),
            )
            if key is not None:
                db.execute(
                    "UPDATE resend_keys SET state = 'done', status = 200, response = ? "
                    "WHERE key = ?",
                    (json.dumps(answer), key),
                )
        return answer

    def emails_used(self) -> tuple[int, int]:
        """Emails sent this UTC day and this UTC month, one per recipient ("Multiple
        To, CC, or BCC recipients in sent emails count as separate emails",
        https://resend.com/docs/knowledge-base/account-quotas-and-limits)."""
        now = datetime.now(UTC)
        month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        with self._lock:
            rows = self._conn.execute(
                "SELECT recipients, created_at FROM resend_emails WHERE created_at >= ?",
                (month.isoformat(),),
            ).fetchall()
        by_row = [(len(json.loads(r["recipients"])), r["created_at"]) for r in rows]
        today = sum(n for n, created in by_row if created >= day.isoformat())
        return today, sum(n for n, _ in by_row)

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
        email = {
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
        if row["reply_to"]:
            # Left out when none was sent: the Email schema has it as a list, not null.
            email["reply_to"] = json.loads(row["reply_to"])
        return email


def _whole_or_none(minimum: int) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value is None or (type(value) is int and value >= minimum):
            return ""
        return f"must be null or a whole number >= {minimum}"

    return check


def _domains_problem(value: Any) -> str:
    if not isinstance(value, list) or not all(
        isinstance(d, dict)
        and isinstance(d.get("name"), str)
        and d["name"]
        and d.get("status") in DOMAIN_STATUSES
        for d in value
    ):
        return f"must be a list of {{name, status}}, status one of {', '.join(DOMAIN_STATUSES)}"
    return ""


_CONFIG_CHECKS: dict[str, Callable[[Any], str]] = {
    "idempotency_window_seconds": lambda v: (
        ""
        if not isinstance(v, bool) and isinstance(v, int | float) and v >= 0
        else "must be a number >= 0"
    ),
    "api_key": lambda v: "" if isinstance(v, str) and v else "must be a non-empty string",
    "api_key_permission": lambda v: (
        "" if v in ("full_access", "sending_access") else "must be full_access or sending_access"
    ),
    "rate_limit": _whole_or_none(1),
    "daily_quota": _whole_or_none(0),
    "monthly_quota": _whole_or_none(0),
    "domains": _domains_problem,
}


class ResendRequestHandler(SandboxRequestHandler):
    """Resend's paths in Resend's words; the sandbox's controls for tests."""

    server_version = "OnefoldResendEmulator/1"
    routes: list[Route] = [
        (re.compile(r"/emails"), {"POST": "emails_post"}),
        (re.compile(r"/emails/(?P<email_id>[^/]+)"), {"GET": "email_get"}),
        (re.compile(r"/domains"), {"GET": "domains_get"}),
        (re.compile(r"/domains/(?P<domain_id>[^/]+)"), {"GET": "domain_get"}),
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
        return self._api(self._send_request, sending=True)

    def email_get(self, email_id: str) -> Reply:
        def read() -> Reply:
            email = self.resend.email(email_id)
            if email is None:
                return resend_error(404, "not_found", "Email not found")
            return Reply(200, {k: v for k, v in email.items() if k != "idempotency_key"})

        return self._api(read, sending=False)

    def domains_get(self) -> Reply:
        """GET /domains (https://resend.com/docs/api-reference/domains/list-domains)."""
        self.store.count_call("read_domains")
        return self._api(
            lambda: Reply(
                200, {"object": "list", "has_more": False, "data": self.resend.domains()}
            ),
            sending=False,
        )

    def domain_get(self, domain_id: str) -> Reply:
        """GET /domains/{id} (https://resend.com/docs/api-reference/domains/get-domain);
        an id that is not a UUID is 422 invalid_parameter (errors page)."""
        self.store.count_call("read_domains")

        def read() -> Reply:
            try:
                uuid.UUID(domain_id)
            except ValueError:
                return resend_error(422, "invalid_parameter", "The `id` must be a valid UUID.")
            for domain in self.resend.domains():
                if domain["id"] == domain_id:
                    return Reply(200, {"object": "domain", **domain, "records": []})
            return resend_error(404, "not_found", "Domain not found")

        return self._api(read, sending=False)

    def _api(self, answer: Callable[[], Reply], *, sending: bool) -> Reply:
        """The checks every API request meets, in order: the key, the team's rate
        limit, the key's permission; then `answer`, with the rate-limit headers."""
        config = self.resend.config()
        refused = self._unauthenticated(config)
        if refused is not None:
            return refused
        headers: dict[str, str] = {}
        if config["rate_limit"] is not None:
            admitted, headers = self.resend.rate_window.take(config["rate_limit"])
            if not admitted:
                self.store.count_call("rate_limited")
                # The errors page's rate_limit_exceeded, with the documented headers.
                return resend_error(
                    429,
                    "rate_limit_exceeded",
                    "Too many requests. Please limit the number of requests per second. "
                    "Or contact support to increase rate limit.",
                    **headers,
                )
        if not sending and config["api_key_permission"] == "sending_access":
            reply = resend_error(
                401, "restricted_api_key", "This API key is restricted to only send emails."
            )
        else:
            reply = answer()
        reply.headers = {**headers, **reply.headers}
        return reply

    def _unauthenticated(self, config: Mapping[str, Any]) -> Reply | None:
        """Bearer API key (https://resend.com/docs/api-reference/introduction): none is
        401 missing_api_key, any other than the team's 403 invalid_api_key (errors page)."""
        header = self.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return resend_error(
                401, "missing_api_key", "Missing API key in the authorization header."
            )
        if token.strip() != config["api_key"]:
            return resend_error(403, "invalid_api_key", "API key is invalid.")
        return None

    def _send_request(self) -> Reply:
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
                return Reply(status, first)
        recipients = _recipients(body["to"])
        reply = self._over_quota(len(recipients)) or self._send_email(
            {**body, "to": recipients}, key
        )
        if key is not None and reply.status >= 400 and not reply.drop:
            # Refused before sending (a quota, a 429 or 500 fault): nothing is bound to
            # the key. After a commit the key is already done, so this changes nothing.
            self.resend.release_key(key)
        return reply

    def _send_email(self, email: dict[str, Any], key: str | None) -> Reply:
        def work() -> Reply:
            answer = self.resend.store_email(email, key=key)
            used = self._quota_headers(self.resend.config(), *self.resend.emails_used())
            return Reply(200, answer, used)

        return self._faulted("send_email", work)

    def _over_quota(self, emails: int) -> Reply | None:
        """The quotas' 429s (https://resend.com/docs/api-reference/rate-limit, "Email
        Quotas"; messages from the errors page)."""
        config = self.resend.config()
        day, month = self.resend.emails_used()
        headers = self._quota_headers(config, day, month)
        if config["daily_quota"] is not None and day + emails > config["daily_quota"]:
            return resend_error(
                429,
                "daily_quota_exceeded",
                "You have exceeded your daily email sending quota.",
                **headers,
            )
        if config["monthly_quota"] is not None and month + emails > config["monthly_quota"]:
            return resend_error(
                429,
                "monthly_quota_exceeded",
                "You have exceeded your monthly email sending quota.",
                **headers,
            )
        return None

    @staticmethod
    def _quota_headers(config: Mapping[str, Any], day: int, month: int) -> dict[str, str]:
        """`x-resend-daily-quota` (Free plan only) and `x-resend-monthly-quota`: the
        emails used (https://resend.com/docs/api-reference/rate-limit)."""
        headers = {"x-resend-monthly-quota": str(month)}
        if config["daily_quota"] is not None:
            headers["x-resend-daily-quota"] = str(day)
        return headers

    def _invalid_email(self, body: Mapping[str, Any]) -> Reply | None:
        """Required fields (422 missing_required_field), addresses (422
        validation_error) and the sending domain (403 validation_error)."""
        missing = [name for name in ("from", "to", "subject") if not body.get(name)]
        if missing:
            return resend_error(
                422, "missing_required_field", f"Missing `{', '.join(missing)}` field."
            )
        if not body.get("text") and not body.get("html"):
            return resend_error(422, "missing_required_field", "Missing `html` or `text` field.")
        try:
            recipients = _recipients(body["to"])
            if body.get("reply_to") is not None:
                _recipients(body["reply_to"], "reply_to")
        except InvalidInput as exc:
            return resend_error(422, "validation_error", exc.detail)
        if not 1 <= len(recipients) <= MAX_RECIPIENTS:
            return resend_error(
                422, "validation_error", f"`to` takes 1 to {MAX_RECIPIENTS} addresses."
            )
        domain = sender_domain(body["from"])
        if domain is None:
            return resend_error(
                422,
                "validation_error",
                "Invalid `from` field. The email address needs to follow the "
                "`email@example.com` or `Name <email@example.com>` format.",
            )
        return self._unverified(domain)

    def _unverified(self, domain: str) -> Reply | None:
        """A `from` domain the team has not verified, in Resend's words (errors page;
        resend/resend-node#455 quotes the whole answer)."""
        statuses = {d["name"].lower(): d["status"] for d in self.resend.config()["domains"]}
        if statuses.get(domain) == "verified":
            return None
        return resend_error(
            403,
            "validation_error",
            f"The {domain} domain is not verified. Please, add and verify your domain "
            "on https://resend.com/domains",
        )

    # -- faults in Resend's words -------------------------------------------

    def fault_reply_before_commit(self, fault: Fault) -> Reply | None:
        retry_after = str(max(1, math.ceil(fault.seconds)))
        if fault.mode == "http_429":
            return resend_error(
                429,
                "rate_limit_exceeded",
                "Too many requests. Please limit the number of requests per second. "
                "Or contact support to increase rate limit.",
                **{
                    "ratelimit-limit": str(DEFAULT_RATE_LIMIT),
                    "ratelimit-remaining": "0",
                    "ratelimit-reset": retry_after,
                    "retry-after": retry_after,
                },
            )
        if fault.mode == "http_503":
            return resend_error(503, "service_unavailable", "API is temporarily unavailable")
        if fault.mode == "http_400":
            return resend_error(422, "validation_error", "Injected validation error.")
        if fault.mode == "fail_before_commit":
            return resend_error(500, "application_error", "An unexpected error occurred.")
        return None

    def fault_reply_after_commit(self, fault: Fault) -> Reply:
        return resend_error(500, "application_error", "An unexpected error occurred.")

    # -- controls ------------------------------------------------------------

    def config_get(self) -> Reply:
        return Reply(200, self.resend.config())

    def config_post(self) -> Reply:
        return Reply(200, self.resend.set_config(self._json_body()))

    def messages_get(self) -> Reply:
        return Reply(200, {"results": self.resend.emails()})


def _recipients(value: Any, field: str = "to") -> list[str]:
    """`to` (or `reply_to`): one address or a list of them, each `email@example.com` or
    `Name <email@example.com>` (send-email reference: both are "string | string[]";
    the 422 as resend/resend-python#65 quotes it)."""
    addresses = [value] if isinstance(value, str) else value
    if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
        raise InvalidInput(f"Invalid `{field}` field: a string or a list of strings.")
    if any(sender_domain(address) is None for address in addresses):
        raise InvalidInput(
            f"Invalid `{field}` field. The email address needs to follow the "
            "`email@example.com` or `Name <email@example.com>` format."
        )
    return [address.strip() for address in addresses]


class ResendEmulator(EmulatorServer):
    """Resend's email API on loopback: `with ResendEmulator() as resend: resend.http_url`."""

    vendor = "resend"
    handler_class = ResendRequestHandler
    store_class = ResendStore

    def adapter_env(self) -> dict[str, str]:
        """The RESEND_* variables that point the adapter at this emulator as it starts:
        its URL, the key it accepts and a From address on its verified domain."""
        return {
            "RESEND_API_KEY": DEFAULT_API_KEY,
            "RESEND_BASE_URL": self.http_url,
            "RESEND_FROM": DEFAULT_SENDER,
        }
