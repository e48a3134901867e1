"""State of the sandbox destination: records, tasks, messages, capabilities and faults.

Everything lives in one SQLite database (memory by default, or a file) behind one
lock, never in Django's database: the sandbox plays a third party, and a test
that rolls back Django's transaction must not roll back the CRM too.

The store knows nothing about HTTP or SMTP. It raises `NotFound`, `Conflict`,
`InvalidInput` and `LookupDisabled`; the protocol layers turn those into
answers.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import random
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any

ACTIONS = ("create_record", "create_task", "send_email")
FAULT_MODES = (
    "fail_before_commit",
    "drop_response_after_commit",
    "http_500_after_commit",
    "http_502_after_commit",
    "http_429",
    "http_503",
    "http_400",
    "slow",
)
# Requests counted in stats["calls"]: the three faultable actions, the two
# lookups, and what staff or reconciliation do.
CALL_NAMES = (
    "create_record",
    "create_task",
    "send_email",
    "lookup_record",
    "lookup_task",
    "merge_record",
    "update_record",
    "delete_record",
    "list_records",
)
DEFAULT_CAPABILITIES: dict[str, Any] = {
    "idempotency_keys": False,
    "unique_external_ref": True,
    "lookup": True,
    "idempotency_key_ttl_seconds": 86400.0,
}
DEFAULT_PAGE_SIZE = 500
MAX_PAGE_SIZE = 5000
MAX_SEED = 10_000_000

_RECORD_FIELDS = ("external_ref", "name", "email", "message")
_TASK_FIELDS = ("external_ref", "title", "assignee")
# Columns added since a `--db` file may have been made: (table, column, its type).
_ADDED_COLUMNS = (("tasks", "due_at", "TEXT"), ("messages", "html", "TEXT"))
# Keys a client may not set: the CRM owns them.
_RESERVED_RECORD_KEYS = {"id", "created_at", "updated_at", "merged_into", "extra"}
_TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    external_ref TEXT,
    name TEXT NOT NULL DEFAULT '',
    email TEXT NOT NULL DEFAULT '',
    message TEXT NOT NULL DEFAULT '',
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    merged_into INTEGER
);
-- Keyset pagination of the listing (`?since=`): live records by (created_at, seq).
CREATE INDEX IF NOT EXISTS records_live_created
    ON records (created_at, seq) WHERE merged_into IS NULL;
-- Lookup by external_ref and the uniqueness check on create.
CREATE INDEX IF NOT EXISTS records_external_ref ON records (external_ref);
-- Re-pointing records that were merged into a record that is merged in turn.
CREATE INDEX IF NOT EXISTS records_merged_into
    ON records (merged_into) WHERE merged_into IS NOT NULL;

CREATE TABLE IF NOT EXISTS tasks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record_seq INTEGER NOT NULL,
    external_ref TEXT,
    title TEXT NOT NULL DEFAULT '',
    assignee TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    due_at TEXT
);
-- Per-record lookup, uniqueness check and listing of a record's tasks.
CREATE INDEX IF NOT EXISTS tasks_record_ref ON tasks (record_seq, external_ref);

CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    mail_from TEXT NOT NULL,
    rcpt_to TEXT NOT NULL,
    message_id TEXT,
    subject TEXT,
    headers TEXT NOT NULL,
    body TEXT NOT NULL,
    received_at TEXT NOT NULL,
    html TEXT
);

CREATE TABLE IF NOT EXISTS idempotency_keys (
    action TEXT NOT NULL,
    key TEXT NOT NULL,
    target_seq INTEGER NOT NULL,
    seen_at REAL NOT NULL,
    PRIMARY KEY (action, key)
);

CREATE TABLE IF NOT EXISTS faults (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    action TEXT NOT NULL,
    mode TEXT NOT NULL,
    seconds REAL NOT NULL,
    remaining INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS capabilities (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS calls (name TEXT PRIMARY KEY, n INTEGER NOT NULL);
"""


class SandboxError(Exception):
    """A request the sandbox refuses; `detail` is safe to show to the caller."""

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra

    def as_body(self) -> dict[str, Any]:
        return {"detail": self.detail, **self.extra}


class InvalidInput(SandboxError):
    """The request body or query does not make sense (HTTP 400)."""


class NotFound(SandboxError):
    """The record or task named does not exist (HTTP 404)."""


class LookupDisabled(SandboxError):
    """The `lookup` capability is off (HTTP 404, like a CRM without the endpoint)."""

    def __init__(self) -> None:
        super().__init__("lookup not supported")


class Conflict(SandboxError):
    """The change would break a rule the CRM enforces (HTTP 409)."""


@dataclass(frozen=True)
class Fault:
    """One injected misbehaviour, taken off the queue for one call."""

    action: str
    mode: str
    seconds: float


def now_iso() -> str:
    return datetime.now(UTC).strftime(_TIMESTAMP_FORMAT)


def parse_timestamp(value: str, *, name: str) -> str:
    """Normalises an ISO 8601 instant to the store's sortable UTC form.

    A naive value is taken as UTC. A '+' that a client forgot to URL-encode
    arrives as a space, so that is tried too.
    """
    for candidate in (value, value.replace(" ", "+")):
        try:
            parsed = datetime.fromisoformat(candidate)
        except ValueError:
            continue
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC).strftime(_TIMESTAMP_FORMAT)
    raise InvalidInput(f"{name} is not an ISO 8601 timestamp: {value!r}")


def record_id(seq: int) -> str:
    return f"rec_{seq:06d}"


def task_id(seq: int) -> str:
    return f"task_{seq:06d}"


def _parse_id(value: str, prefix: str) -> int | None:
    match = re.fullmatch(prefix + r"_(\d{6,})", value)
    if match is None:
        return None
    seq = int(match.group(1))
    # Only the canonical spelling names a record: rec_1 is not rec_000001.
    return seq if f"{prefix}_{seq:06d}" == value else None


def _inserted(cursor: sqlite3.Cursor) -> int:
    """The seq an INSERT just gave its row (sqlite3 types lastrowid as optional)."""
    seq = cursor.lastrowid
    assert seq is not None, "not an INSERT"
    return seq


def _written(row: sqlite3.Row | None) -> sqlite3.Row:
    """A row read back in the transaction that wrote it, under the lock: it exists."""
    assert row is not None, "a row vanished inside its own transaction"
    return row


def _encode_cursor(created_at: str, seq: int) -> str:
    raw = f"{created_at}|{seq}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[str, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created_at, seq = raw.rsplit("|", 1)
        return parse_timestamp(created_at, name="cursor"), int(seq)
    except (binascii.Error, UnicodeDecodeError, ValueError, InvalidInput):
        raise InvalidInput("invalid cursor") from None


def _optional_str(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"{key} must be a string or null")
    return value


def clean_record_fields(body: Mapping[str, Any], *, partial: bool = False) -> dict[str, Any]:
    """Validates a record body; returns its known fields plus `extra` (other keys).

    With `partial`, only the keys present are returned (PATCH).
    """
    cleaned: dict[str, Any] = {}
    for key in _RECORD_FIELDS:
        if key in body or not partial:
            value = _optional_str(body, key)
            cleaned[key] = value if key == "external_ref" or value is not None else ""
    extra: dict[str, Any] = {}
    if isinstance(body.get("extra"), dict):
        extra.update(body["extra"])
    extra.update(
        {
            k: v
            for k, v in body.items()
            if k not in _RECORD_FIELDS and k not in _RESERVED_RECORD_KEYS
        }
    )
    if extra or not partial:
        cleaned["extra"] = extra
    return cleaned


def clean_task_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """Validates a task body; other keys are ignored, as the task has no free fields but
    its due date (`due_at`, an ISO 8601 instant, or null: none)."""
    cleaned = {
        key: _optional_str(body, key) if key == "external_ref" else _optional_str(body, key) or ""
        for key in _TASK_FIELDS
    }
    due_at = _optional_str(body, "due_at")
    cleaned["due_at"] = parse_timestamp(due_at, name="due_at") if due_at else None
    return cleaned


def _require_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be true or false")
    return value


def _require_number(value: Any, name: str, *, minimum: float = 0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{name} must be a number")
    if value < minimum:
        raise InvalidInput(f"{name} must be at least {minimum}")
    return float(value)


def parse_message(content: bytes) -> dict[str, Any]:
    """Extracts Message-ID, Subject, headers, the text body (else the HTML's source) and
    the HTML part (None without one) from raw message bytes."""
    message = BytesParser(policy=policy.default).parsebytes(content)
    headers: dict[str, str] = {}
    for name, value in message.items():
        # Repeated headers (Received, ...) are kept, joined, rather than lost.
        headers[name] = f"{headers[name]}, {value}" if name in headers else str(value)
    body_part = (
        message.get_body(preferencelist=("plain", "html"))
        if isinstance(message, EmailMessage)
        else None
    )
    try:
        body = body_part.get_content() if body_part is not None else message.get_payload()
    except (LookupError, KeyError):
        body = content.decode("utf-8", "replace")
    if not isinstance(body, str):
        body = str(body)
    # SMTP carries CRLF line ends; stored text uses plain newlines.
    body = body.replace("\r\n", "\n")
    message_id = message.get("Message-ID")
    subject = message.get("Subject")
    return {
        "message_id": str(message_id).strip() if message_id is not None else None,
        "subject": str(subject) if subject is not None else None,
        "headers": headers,
        "body": body,
        "html": _html_part(message),
    }


def _html_part(message: Any) -> str | None:
    """The text/html part's text (CRLF as newlines), or None when the message has none."""
    if not isinstance(message, EmailMessage):
        return None
    part = message.get_body(preferencelist=("html",))
    if part is None:
        return None
    try:
        html = part.get_content()
    except (LookupError, KeyError):
        return None
    return str(html).replace("\r\n", "\n")


class SandboxStore:
    """Thread-safe state of the fake CRM and mail sink.

    One connection and one lock: every read and write is serialised, which is
    what makes check-then-insert safe for the uniqueness and idempotency rules
    (those rules can be switched off at runtime to plant duplicates, so they
    cannot be database constraints).
    """

    # A vendor emulator's own faultable calls, beside ACTIONS.
    extra_fault_actions: tuple[str, ...] = ()

    def __init__(self, db_path: str | None = None) -> None:
        self.db_path = db_path
        self._lock = threading.RLock()
        # Random faults (POST /_sandbox/chaos); in memory only, off after reset.
        self._chaos: dict[str, Any] | None = None
        self._chaos_rng = random.Random()
        self._conn = sqlite3.connect(
            db_path or ":memory:", check_same_thread=False, isolation_level=None
        )
        self._conn.row_factory = sqlite3.Row
        if db_path:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
        with self._lock:
            self._conn.executescript(_SCHEMA)
            self._columns_add()

    def _columns_add(self) -> None:
        """Adds the columns a file made by an older sandbox lacks (call with the lock)."""
        for table, column, kind in _ADDED_COLUMNS:
            present = {row["name"] for row in self._conn.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                self._conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # -- control -------------------------------------------------------------

    def reset(self) -> None:
        self.clear_chaos()
        with self._transaction() as db:
            for table in ("records", "tasks", "messages", "idempotency_keys", "faults"):
                db.execute(f"DELETE FROM {table}")
            db.execute("DELETE FROM capabilities")
            db.execute("DELETE FROM calls")
            # Ids start again at rec_000001 after a reset.
            db.execute("DELETE FROM sqlite_sequence")

    def capabilities(self) -> dict[str, Any]:
        with self._lock:
            rows = self._conn.execute("SELECT name, value FROM capabilities").fetchall()
        current = dict(DEFAULT_CAPABILITIES)
        current.update({row["name"]: json.loads(row["value"]) for row in rows})
        return current

    def set_capabilities(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(changes) - set(DEFAULT_CAPABILITIES)
        if unknown:
            raise InvalidInput(f"unknown capabilities: {', '.join(sorted(unknown))}")
        cleaned: dict[str, Any] = {}
        for name, value in changes.items():
            if name == "idempotency_key_ttl_seconds":
                cleaned[name] = _require_number(value, name)
            else:
                cleaned[name] = _require_bool(value, name)
        with self._transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO capabilities (name, value) VALUES (?, ?)",
                [(name, json.dumps(value)) for name, value in cleaned.items()],
            )
        return self.capabilities()

    def add_fault(
        self, *, action: Any, mode: Any, times: Any = 1, seconds: Any = 1
    ) -> list[dict[str, Any]]:
        actions = (*ACTIONS, *self.extra_fault_actions)
        if action not in actions:
            raise InvalidInput(f"action must be one of {', '.join(actions)}")
        if mode not in FAULT_MODES:
            raise InvalidInput(f"mode must be one of {', '.join(FAULT_MODES)}")
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise InvalidInput("times must be a positive integer")
        seconds = _require_number(seconds, "seconds")
        with self._transaction() as db:
            db.execute(
                "INSERT INTO faults (action, mode, seconds, remaining) VALUES (?, ?, ?, ?)",
                (action, mode, seconds, times),
            )
        return self.faults()

    def faults(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT action, mode, seconds, remaining FROM faults ORDER BY seq"
            ).fetchall()
        return [
            {
                "action": r["action"],
                "mode": r["mode"],
                "times": r["remaining"],
                "seconds": r["seconds"],
            }
            for r in rows
        ]

    def clear_faults(self) -> None:
        with self._transaction() as db:
            db.execute("DELETE FROM faults")

    def set_chaos(
        self, *, rate: Any, modes: Any, actions: Any = ACTIONS, seed: Any = None
    ) -> dict[str, Any]:
        """Random faults: each call of `actions` misbehaves with probability `rate`,
        in a mode drawn from `modes`. Queued faults still come first."""
        rate = _require_number(rate, "rate")
        if not 0 <= rate <= 1:
            raise InvalidInput("rate must be between 0 and 1")
        if not isinstance(modes, list) or not modes or set(modes) - set(FAULT_MODES):
            raise InvalidInput(f"modes must be a non-empty list of {', '.join(FAULT_MODES)}")
        if not isinstance(actions, list | tuple) or set(actions) - set(ACTIONS):
            raise InvalidInput(f"actions must be a list of {', '.join(ACTIONS)}")
        with self._lock:
            self._chaos = {"rate": rate, "modes": list(modes), "actions": list(actions)}
            self._chaos_rng = random.Random(seed)
        return self.chaos()

    def chaos(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._chaos) if self._chaos else {"rate": 0}

    def clear_chaos(self) -> None:
        with self._lock:
            self._chaos = None

    def _chaos_fault(self, action: str) -> Fault | None:
        chaos = self._chaos
        if not chaos or action not in chaos["actions"]:
            return None
        if self._chaos_rng.random() >= chaos["rate"]:
            return None
        return Fault(action=action, mode=self._chaos_rng.choice(chaos["modes"]), seconds=0.2)

    def take_fault(self, action: str) -> Fault | None:
        """Consumes one use of the oldest pending fault for `action`, if any; else,
        when chaos is on, maybe a random one."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT seq, mode, seconds, remaining FROM faults WHERE action = ? "
                "ORDER BY seq LIMIT 1",
                (action,),
            ).fetchone()
            if row is None:
                return self._chaos_fault(action)
            if row["remaining"] > 1:
                db.execute(
                    "UPDATE faults SET remaining = remaining - 1 WHERE seq = ?", (row["seq"],)
                )
            else:
                db.execute("DELETE FROM faults WHERE seq = ?", (row["seq"],))
        return Fault(action=action, mode=row["mode"], seconds=row["seconds"])

    def count_call(self, name: str) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO calls (name, n) VALUES (?, 1) "
                "ON CONFLICT (name) DO UPDATE SET n = n + 1",
                (name,),
            )

    # -- records -------------------------------------------------------------

    def create_record(
        self, fields: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Creates a record from `clean_record_fields` output.

        Returns (record, replayed); replayed is True when an idempotency key
        answered with the record it created earlier.
        """
        with self._transaction() as db:
            caps = self.capabilities()
            replayed = self._replay(db, caps, "create_record", idempotency_key, self._record_row)
            if replayed is not None:
                return self._record_dict(replayed), True
            ref = fields.get("external_ref")
            if caps["unique_external_ref"] and ref is not None:
                self._refuse_duplicate_record_ref(db, ref)
            stamp = now_iso()
            seq = _inserted(
                db.execute(
                    "INSERT INTO records (external_ref, name, email, message, extra, created_at, "
                    "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        ref,
                        fields.get("name") or "",
                        fields.get("email") or "",
                        fields.get("message") or "",
                        json.dumps(fields.get("extra") or {}),
                        stamp,
                        stamp,
                    ),
                )
            )
            self._remember(db, caps, "create_record", idempotency_key, seq)
            return self._record_dict(_written(self._record_row(db, seq))), False

    def find_records(self, external_ref: str) -> list[dict[str, Any]]:
        with self._lock:
            if not self.capabilities()["lookup"]:
                raise LookupDisabled()
            rows = self._conn.execute(
                "SELECT * FROM records WHERE external_ref = ? AND merged_into IS NULL ORDER BY seq",
                (external_ref,),
            ).fetchall()
        return [self._record_dict(row) for row in rows]

    def list_records(
        self,
        *,
        since: str | None = None,
        until: str | None = None,
        cursor: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of live records with since <= created_at < until, by (created_at, id).

        Keyset pagination on the (created_at, seq) index: every page costs the
        same however deep into a million records it is.
        """
        if limit < 1:
            raise InvalidInput("limit must be at least 1")
        limit = min(limit, MAX_PAGE_SIZE)
        clauses = ["merged_into IS NULL"]
        params: list[Any] = []
        if since is not None:
            clauses.append("created_at >= ?")
            params.append(parse_timestamp(since, name="since"))
        if until is not None:
            clauses.append("created_at < ?")
            params.append(parse_timestamp(until, name="until"))
        if cursor:
            after_created, after_seq = _decode_cursor(cursor)
            # Spelt so that SQLite can start the index range at the cursor.
            clauses.append("created_at >= ? AND (created_at > ? OR seq > ?)")
            params += [after_created, after_created, after_seq]
        sql = (
            f"SELECT * FROM records INDEXED BY records_live_created WHERE {' AND '.join(clauses)} "
            "ORDER BY created_at, seq LIMIT ?"
        )
        with self._lock:
            rows = self._conn.execute(sql, [*params, limit + 1]).fetchall()
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            next_cursor = _encode_cursor(rows[-1]["created_at"], rows[-1]["seq"])
        return [self._record_dict(row) for row in rows], next_cursor

    def get_record(self, record_id_: str) -> dict[str, Any]:
        with self._lock:
            return self._record_dict(self._existing_record(self._conn, record_id_))

    def update_record(self, record_id_: str, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Applies a partial update (`clean_record_fields(..., partial=True)`).

        Keys in `extra` set to null are removed from it.
        """
        with self._transaction() as db:
            row = self._existing_record(db, record_id_)
            ref = changes.get("external_ref", row["external_ref"])
            if (
                "external_ref" in changes
                and ref is not None
                and ref != row["external_ref"]
                and self.capabilities()["unique_external_ref"]
            ):
                self._refuse_duplicate_record_ref(db, ref)
            extra = json.loads(row["extra"])
            for key, value in changes.get("extra", {}).items():
                if value is None:
                    extra.pop(key, None)
                else:
                    extra[key] = value
            db.execute(
                "UPDATE records SET external_ref = ?, name = ?, email = ?, message = ?, "
                "extra = ?, updated_at = ? WHERE seq = ?",
                (
                    ref,
                    changes.get("name", row["name"]) or "",
                    changes.get("email", row["email"]) or "",
                    changes.get("message", row["message"]) or "",
                    json.dumps(extra),
                    now_iso(),
                    row["seq"],
                ),
            )
            return self._record_dict(_written(self._record_row(db, row["seq"])))

    def delete_record(self, record_id_: str) -> None:
        with self._transaction() as db:
            row = self._existing_record(db, record_id_)
            db.execute("DELETE FROM tasks WHERE record_seq = ?", (row["seq"],))
            db.execute("DELETE FROM records WHERE seq = ?", (row["seq"],))

    def merge_records(
        self, survivor_id: str, duplicate_id: Any, *, idempotency_key: str | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Merges `duplicate_id` into `survivor_id`; returns (survivor, replayed)."""
        if not isinstance(duplicate_id, str) or not duplicate_id:
            raise InvalidInput("duplicate_id must be a record id")
        if duplicate_id == survivor_id:
            raise InvalidInput("a record cannot be merged into itself")
        with self._transaction() as db:
            caps = self.capabilities()
            replayed = self._replay(db, caps, "merge", idempotency_key, self._record_row)
            if replayed is not None:
                return self._record_dict(replayed), True
            survivor = self._existing_record(db, survivor_id)
            duplicate = self._existing_record(db, duplicate_id)
            if duplicate["merged_into"] == survivor["seq"]:
                return self._record_dict(survivor), False
            if duplicate["merged_into"] is not None:
                raise Conflict(
                    "duplicate is already merged into another record",
                    code="already_merged",
                    merged_into=record_id(duplicate["merged_into"]),
                )
            if survivor["merged_into"] is not None:
                raise Conflict(
                    "survivor is itself merged into another record",
                    code="survivor_merged",
                    merged_into=record_id(survivor["merged_into"]),
                )
            stamp = now_iso()
            db.execute(
                # Records merged into the duplicate earlier follow it to the survivor.
                "UPDATE records SET merged_into = ?, updated_at = ? "
                "WHERE seq = ? OR merged_into = ?",
                (survivor["seq"], stamp, duplicate["seq"], duplicate["seq"]),
            )
            db.execute(
                "UPDATE tasks SET record_seq = ? WHERE record_seq = ?",
                (survivor["seq"], duplicate["seq"]),
            )
            db.execute("UPDATE records SET updated_at = ? WHERE seq = ?", (stamp, survivor["seq"]))
            self._remember(db, caps, "merge", idempotency_key, survivor["seq"])
            return self._record_dict(_written(self._record_row(db, survivor["seq"]))), False

    # -- tasks ---------------------------------------------------------------

    def create_task(
        self, record_id_: str, fields: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Creates a task on a live record; returns (task, replayed)."""
        with self._transaction() as db:
            caps = self.capabilities()
            replayed = self._replay(db, caps, "create_task", idempotency_key, self._task_row)
            if replayed is not None:
                return self._task_dict(replayed), True
            record = self._live_record(db, record_id_)
            ref = fields.get("external_ref")
            if caps["unique_external_ref"] and ref is not None:
                existing = db.execute(
                    "SELECT seq FROM tasks WHERE record_seq = ? AND external_ref = ? "
                    "ORDER BY seq LIMIT 1",
                    (record["seq"], ref),
                ).fetchone()
                if existing is not None:
                    raise Conflict(
                        "external_ref already exists",
                        code="duplicate_external_ref",
                        existing_id=task_id(existing["seq"]),
                    )
            seq = _inserted(
                db.execute(
                    "INSERT INTO tasks (record_seq, external_ref, title, assignee, created_at, "
                    "due_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        record["seq"],
                        ref,
                        fields.get("title") or "",
                        fields.get("assignee") or "",
                        now_iso(),
                        fields.get("due_at"),
                    ),
                )
            )
            self._remember(db, caps, "create_task", idempotency_key, seq)
            return self._task_dict(_written(self._task_row(db, seq))), False

    def require_live_record(self, record_id_: str) -> None:
        """Raises unless tasks can be created on the record (checked before faults apply)."""
        with self._lock:
            self._live_record(self._conn, record_id_)

    def list_tasks(
        self, record_id_: str, *, external_ref: str | None = None
    ) -> list[dict[str, Any]]:
        """A record's tasks; with `external_ref`, a lookup (refused when lookup is off)."""
        with self._lock:
            if external_ref is not None and not self.capabilities()["lookup"]:
                raise LookupDisabled()
            record = self._existing_record(self._conn, record_id_)
            sql = "SELECT * FROM tasks WHERE record_seq = ?"
            params: list[Any] = [record["seq"]]
            if external_ref is not None:
                sql += " AND external_ref = ?"
                params.append(external_ref)
            rows = self._conn.execute(sql + " ORDER BY seq", params).fetchall()
        return [self._task_dict(row) for row in rows]

    # -- messages ------------------------------------------------------------

    def store_message(
        self, *, mail_from: str, rcpt_to: list[str], content: bytes
    ) -> dict[str, Any]:
        parsed = parse_message(content)
        with self._transaction() as db:
            seq = _inserted(
                db.execute(
                    "INSERT INTO messages (mail_from, rcpt_to, message_id, subject, headers, "
                    "body, received_at, html) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        mail_from,
                        json.dumps(rcpt_to),
                        parsed["message_id"],
                        parsed["subject"],
                        json.dumps(parsed["headers"]),
                        parsed["body"],
                        now_iso(),
                        parsed["html"],
                    ),
                )
            )
            row = db.execute("SELECT * FROM messages WHERE seq = ?", (seq,)).fetchone()
        return self._message_dict(row)

    def messages(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM messages ORDER BY seq").fetchall()
        return [self._message_dict(row) for row in rows]

    # -- inspection and bulk -------------------------------------------------

    def stats(self, *, detail: bool = True) -> dict[str, Any]:
        """Counts of live records, their tasks, messages and calls.

        The by_ maps grow with the data; `detail=False` leaves them out for
        benchmarks with a million records.
        """
        with self._lock:
            db = self._conn
            live_tasks = (
                "FROM tasks JOIN records ON records.seq = tasks.record_seq "
                "WHERE records.merged_into IS NULL"
            )
            result: dict[str, Any] = {
                "records": db.execute(
                    "SELECT count(*) FROM records WHERE merged_into IS NULL"
                ).fetchone()[0],
                "tasks": db.execute(f"SELECT count(*) {live_tasks}").fetchone()[0],
                "messages": db.execute("SELECT count(*) FROM messages").fetchone()[0],
            }
            if detail:
                result["records_by_external_ref"] = dict(
                    db.execute(
                        "SELECT external_ref, count(*) FROM records WHERE merged_into IS NULL "
                        "AND external_ref IS NOT NULL GROUP BY external_ref ORDER BY external_ref"
                    ).fetchall()
                )
                result["tasks_by_external_ref"] = dict(
                    db.execute(
                        f"SELECT tasks.external_ref, count(*) {live_tasks} "
                        "AND tasks.external_ref IS NOT NULL GROUP BY tasks.external_ref "
                        "ORDER BY tasks.external_ref"
                    ).fetchall()
                )
                result["messages_by_recipient"] = dict(
                    db.execute(
                        "SELECT rcpt.value, count(*) FROM messages, json_each(messages.rcpt_to) "
                        "AS rcpt GROUP BY rcpt.value ORDER BY rcpt.value"
                    ).fetchall()
                )
                result["messages_by_message_id"] = dict(
                    db.execute(
                        "SELECT message_id, count(*) FROM messages WHERE message_id IS NOT NULL "
                        "GROUP BY message_id ORDER BY message_id"
                    ).fetchall()
                )
            calls = dict.fromkeys(CALL_NAMES, 0)
            calls.update(dict(db.execute("SELECT name, n FROM calls").fetchall()))
            result["calls"] = calls
        return result

    def seed(self, *, count: Any, prefix: Any = "bench-", created_at: Any = None) -> int:
        """Bulk-creates `count` records with external_ref prefix0, prefix1, ...

        A recursive CTE generates the rows inside SQLite, so a million records
        take seconds. Seeding is for benchmarks: it does not check uniqueness.
        """
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_SEED:
            raise InvalidInput(f"count must be an integer from 0 to {MAX_SEED}")
        if not isinstance(prefix, str):
            raise InvalidInput("prefix must be a string")
        if created_at is not None and not isinstance(created_at, str):
            raise InvalidInput("created_at must be an ISO 8601 string")
        stamp = parse_timestamp(created_at, name="created_at") if created_at else now_iso()
        if count == 0:
            return 0
        with self._transaction() as db:
            db.execute(
                "WITH RECURSIVE n(i) AS "
                "(SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count) "
                "INSERT INTO records "
                "(external_ref, name, email, message, extra, created_at, updated_at) "
                "SELECT :prefix || i, 'Seeded ' || i, :prefix || i || '@example.invalid', "
                "'', '{}', :stamp, :stamp FROM n",
                {"count": count, "prefix": prefix, "stamp": stamp},
            )
        return count

    # -- helpers (call with the lock held) -----------------------------------

    def _replay(
        self,
        db: sqlite3.Connection,
        caps: Mapping[str, Any],
        action: str,
        key: str | None,
        load: Callable[[sqlite3.Connection, int], sqlite3.Row | None],
    ) -> sqlite3.Row | None:
        if not caps["idempotency_keys"] or not key:
            return None
        row = db.execute(
            "SELECT target_seq, seen_at FROM idempotency_keys WHERE action = ? AND key = ?",
            (action, key),
        ).fetchone()
        if row is None or row["seen_at"] <= time.time() - caps["idempotency_key_ttl_seconds"]:
            return None
        # A key whose record was deleted since is as good as forgotten.
        return load(db, row["target_seq"])

    def _remember(
        self,
        db: sqlite3.Connection,
        caps: Mapping[str, Any],
        action: str,
        key: str | None,
        target_seq: int,
    ) -> None:
        if caps["idempotency_keys"] and key:
            db.execute(
                "INSERT OR REPLACE INTO idempotency_keys (action, key, target_seq, seen_at) "
                "VALUES (?, ?, ?, ?)",
                (action, key, target_seq, time.time()),
            )

    def _refuse_duplicate_record_ref(self, db: sqlite3.Connection, ref: str) -> None:
        existing = db.execute(
            "SELECT seq FROM records WHERE external_ref = ? AND merged_into IS NULL "
            "ORDER BY seq LIMIT 1",
            (ref,),
        ).fetchone()
        if existing is not None:
            raise Conflict(
                "external_ref already exists",
                code="duplicate_external_ref",
                existing_id=record_id(existing["seq"]),
            )

    @staticmethod
    def _record_row(db: sqlite3.Connection, seq: int) -> sqlite3.Row | None:
        row: sqlite3.Row | None = db.execute(
            "SELECT * FROM records WHERE seq = ?", (seq,)
        ).fetchone()
        return row

    @staticmethod
    def _task_row(db: sqlite3.Connection, seq: int) -> sqlite3.Row | None:
        row: sqlite3.Row | None = db.execute("SELECT * FROM tasks WHERE seq = ?", (seq,)).fetchone()
        return row

    def _existing_record(self, db: sqlite3.Connection, record_id_: str) -> sqlite3.Row:
        seq = _parse_id(record_id_, "rec")
        row = self._record_row(db, seq) if seq is not None else None
        if row is None:
            raise NotFound(f"record {record_id_} not found")
        return row

    def _live_record(self, db: sqlite3.Connection, record_id_: str) -> sqlite3.Row:
        row = self._existing_record(db, record_id_)
        if row["merged_into"] is not None:
            raise Conflict(
                "record is merged into another record",
                code="record_merged",
                merged_into=record_id(row["merged_into"]),
            )
        return row

    @staticmethod
    def _record_dict(row: sqlite3.Row) -> dict[str, Any]:
        return {
            "id": record_id(row["seq"]),
            "external_ref": row["external_ref"],
            "name": row["name"],
            "email": row["email"],
            "message": row["message"],
            "extra": json.loads(row["extra"]),
            "created_at": row["created_at"],
            "updated_at": row["updated_at"],
            "merged_into": record_id(row["merged_into"]) if row["merged_into"] else None,
        }

    @staticmethod
    def _task_dict(row: sqlite3.Row) -> dict[str, Any]:
        return {
            "id": task_id(row["seq"]),
            "record_id": record_id(row["record_seq"]),
            "external_ref": row["external_ref"],
            "title": row["title"],
            "assignee": row["assignee"],
            "due_at": row["due_at"],
            "created_at": row["created_at"],
        }

    @staticmethod
    def _message_dict(row: sqlite3.Row) -> dict[str, Any]:
        return {
            "id": f"msg_{row['seq']:06d}",
            "mail_from": row["mail_from"],
            "rcpt_to": json.loads(row["rcpt_to"]),
            "message_id": row["message_id"],
            "subject": row["subject"],
            "headers": json.loads(row["headers"]),
            "body": row["body"],
            "html": row["html"],
            "received_at": row["received_at"],
        }
