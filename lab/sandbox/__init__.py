"""The sandbox destination: a fake CRM over HTTP and a mail sink over SMTP.

A real network service shipped with Onefold for the quick start, the tests and
the failure drills. Adapters talk to it exactly as to a real CRM and mail
relay; tests and drills also use its control endpoints to switch capabilities,
inject faults and count what arrived.

Running it
==========

``manage.py sandbox [--host 127.0.0.1] [--http-port 8765] [--smtp-port 8025]``
``[--db PATH] [--verbose]``

Once both services listen it prints, flushed, exactly::

    Sandbox CRM listening on http://HOST:PORT
    Sandbox SMTP listening on HOST:PORT

and runs until SIGTERM or SIGINT, then exits 0 (1, with a CommandError, when
a port is taken). Port 0 picks a free port (the
printed lines give the real ones). The command does not touch Django's
database. State is kept in memory, or in the SQLite file ``--db PATH`` (kept
across restarts); never in the app's database. ``--verbose`` logs one line per
HTTP request.

In-process (tests)::

    from lab.sandbox import SandboxServer

    with SandboxServer(http_port=0, smtp_port=0) as sandbox:
        httpx.post(f"{sandbox.http_url}/crm/records", json={...})
        smtplib.SMTP(sandbox.host, sandbox.smtp_port)

``SandboxServer(host="127.0.0.1", http_port=8765, smtp_port=8025, db_path=None, *,
verbose=False)``: ``start()`` starts both services in background threads and
sets ``http_port`` / ``smtp_port`` to the bound ports; ``stop()``;
``http_url``; ``store`` (the `SandboxStore`, while running).

Conventions
===========

JSON in and out, HTTP/1.1 with Content-Length. An unknown path answers 404
``{"detail": ...}``, a wrong method 405, invalid JSON or a wrong field type 400.
Timestamps are ISO 8601 UTC with microseconds and a ``Z``:
``2026-11-29T10:15:00.123456Z``. Query timestamps may use any ISO 8601 offset;
naive ones are UTC.

CRM API
=======

Record (an enquiry)::

    {"id": "rec_000001", "external_ref": "op-1" | null, "name": "", "email": "",
     "message": "", "extra": {other posted keys}, "created_at": "...",
     "updated_at": "...", "merged_into": null | "rec_..."}

A record is *live* unless it was merged into another (deleted records are
gone). Listings, lookups, uniqueness and stats only see live records.

``POST /crm/records`` ``{"external_ref", "name", "email", "message", ...}``
    201 with the record. Keys other than the four (and ``id``, ``created_at``,
    ``updated_at``, ``merged_into``) are kept in ``extra``.
    With capability ``idempotency_keys`` on, a request whose ``Idempotency-Key``
    was used by a successful create within ``idempotency_key_ttl_seconds``
    answers 200 with that record as it is now and ``Idempotent-Replayed: true``,
    creating nothing. The payload is not compared. Older keys are forgotten, as
    are keys whose record was deleted. With the capability off the header is
    ignored.
    With ``unique_external_ref`` on, an ``external_ref`` held by a live record
    answers 409 ``{"detail": "external_ref already exists", "code":
    "duplicate_external_ref", "existing_id": "rec_..."}``. A null
    ``external_ref`` never conflicts. With it off, duplicates are stored.

``GET /crm/records?external_ref=X``
    200 ``{"results": [records]}`` (live, oldest first). 404 ``{"detail":
    "lookup not supported"}`` when ``lookup`` is off.

``GET /crm/records[?since=ISO][&until=ISO][&limit=N][&cursor=C]``
    A page of live records with ``since <= created_at < until``, ordered by
    ``(created_at, id)`` (ids compare by number); ``limit`` 500 by default,
    at most 5000. 200 ``{"results": [...], "next_cursor": "..." | null}``;
    repeat with ``cursor`` (and the same since/until) until it is null. Keyset
    pagination: constant cost per page, even with a million records. Always
    available, whatever ``lookup`` says (it is an export, for reconciliation).

``GET /crm/records/<id>``
    200 record (merged ones too, with ``merged_into``) or 404.

``PATCH /crm/records/<id>`` ``{"name"?, "email"?, "message"?, "external_ref"?, other keys?}``
    200 updated record, new ``updated_at``. Other keys update ``extra``; null
    removes them. A new ``external_ref`` held by another live record: 409 as
    on create (when ``unique_external_ref`` is on).

``DELETE /crm/records/<id>``
    204; the record and its tasks are gone. PATCH and DELETE are how tests
    play staff changing the CRM behind Onefold's back.

``POST /crm/records/<id>/tasks`` ``{"external_ref", "title", "assignee", "due_at"?}``
    201 ``{"id": "task_000001", "record_id", "external_ref", "title",
    "assignee", "due_at", "created_at"}`` (``due_at`` an ISO 8601 instant, stored
    in the store's UTC form, or null). 404 when the record does not exist, 409
    ``"code": "record_merged"`` when it was merged away. The capabilities apply
    as to records: ``Idempotency-Key`` (its own key space), ``external_ref``
    unique *per record* (409 with ``existing_id`` of the task).

``GET /crm/records/<id>/tasks[?external_ref=X]``
    200 ``{"results": [tasks]}``: with ``external_ref`` a lookup (404 when
    ``lookup`` is off), without it every task of the record.

``POST /crm/records/<id>/merge`` ``{"duplicate_id"}``
    200 with the surviving record. The duplicate gets ``merged_into=<id>`` and
    leaves live listings, lookups and stats; its tasks move to the survivor.
    404 if either is missing, 400 if the ids are equal, 200 again if the
    duplicate is already merged into this survivor, 409 (``already_merged`` /
    ``survivor_merged``) if merged elsewhere. Honours ``Idempotency-Key``
    (action ``merge``).

Control and inspection (tests and drills only)
==============================================

``POST /_sandbox/reset``
    200. Empties records, tasks, messages, idempotency keys, faults and call
    counters; capabilities back to defaults; ids start again at 1.

``GET|POST /_sandbox/capabilities``
    POST any of ``{"idempotency_keys": bool, "unique_external_ref": bool,
    "lookup": bool, "idempotency_key_ttl_seconds": number}``; both answer 200
    with all of them. Defaults: ``unique_external_ref`` and ``lookup`` true,
    ``idempotency_keys`` false, TTL 86400. Wrong names or types: 400.

``POST /_sandbox/faults`` ``{"action", "mode", "times": 1, "seconds": 1}``
    200 ``{"results": [pending faults]}``. The next ``times`` calls of
    ``action`` (``create_record``, ``create_task``, ``send_email``) misbehave as
    ``mode`` says; faults for one action queue in the order posted. A call
    takes a fault only once its request is otherwise valid (body parses, the
    record of a task exists). ``GET`` lists pending faults (``times`` is what
    remains), ``DELETE`` clears them.

    What each mode does, over HTTP (``create_record``, ``create_task``) and
    over SMTP (``send_email``, once per message: the refusals that store nothing
    answer RCPT, before the body is sent; the others act at the end of DATA):

    ``fail_before_commit``
        HTTP 500 ``injected failure before commit``; SMTP ``451 4.3.0 injected
        failure before commit``. Nothing is stored.
    ``drop_response_after_commit``
        The call is processed and committed (an idempotency key is remembered,
        a message stored), then the connection closes without a byte of
        answer: httpx raises ``RemoteProtocolError``, smtplib
        ``SMTPServerDisconnected``.
    ``http_500_after_commit``
        Processed and committed, then HTTP 500 ``injected failure after
        commit``; SMTP stores, then ``451 4.3.0 injected failure after commit``.
    ``http_502_after_commit``
        Processed and committed, then HTTP 502 in a gateway's words, whatever the
        vendor emulated (a proxy in front of it lost the answer); SMTP as above.
    ``http_429`` / ``http_503``
        HTTP 429 / 503 with ``Retry-After: <seconds>`` (rounded up); SMTP
        ``421 4.7.0 try again later``. Nothing is stored.
    ``http_400``
        HTTP 400 ``injected validation error``; SMTP ``550 5.1.1 mailbox
        unavailable``. Nothing is stored.
    ``slow``
        Waits ``seconds``, then processes normally (SMTP: stores, 250).

    "Processed" means the normal path: an after-commit fault spoils whatever
    answer that gave (a 201, an idempotent replay, or a 409).

``POST /_sandbox/chaos`` ``{"rate": 0.2, "modes": [...], "actions": [...], "seed": 1}``
    Random faults for load and soak tests: once the queued faults of an action
    are used up, each of its calls misbehaves with probability ``rate`` in a
    mode drawn from ``modes`` (``actions`` defaults to all three; ``seed`` makes
    the draw repeatable; ``slow`` waits 0.2 s). ``GET`` shows it, ``DELETE`` and
    ``/_sandbox/reset`` turn it off. Kept in memory only.

``GET /_sandbox/stats[?detail=0]``
    ``{"records", "tasks", "messages", "records_by_external_ref",
    "tasks_by_external_ref", "messages_by_recipient", "messages_by_message_id",
    "calls"}``: counts of live records, their tasks and stored messages;
    ``calls`` counts requests received per kind (``create_record``,
    ``create_task``, ``send_email``, ``lookup_record``, ``lookup_task``,
    ``merge_record``, ``update_record``, ``delete_record``, ``list_records``),
    faulted ones included. ``detail=0`` leaves out the four by_ maps.

``GET /_sandbox/messages``
    ``{"results": [{"id", "mail_from", "rcpt_to": [...], "message_id",
    "subject", "headers": {name: value}, "body", "html", "received_at"}]}``:
    every message stored, oldest first. Repeated headers are joined with ", ";
    ``body`` is the text/plain part (else the text/html part's source), ``html``
    the text/html part, or null when the message has none.

``POST /_sandbox/seed`` ``{"count": N, "prefix": "bench-", "created_at": ISO?}``
    200 ``{"created": N}``: N records with external_ref ``<prefix>0`` ..
    ``<prefix>N-1``, all stamped ``created_at`` (default now), generated inside
    SQLite (a million in seconds). For benchmarks: uniqueness is not checked.

Mail sink
=========

The sink speaks ESMTP and offers ``8BITMIME`` and ``SMTPUTF8`` (RFC 6531), as
aiosmtpd's controller does by default, so a non-ASCII local part
(``jörg@example.com``) is accepted when the client asks for SMTPUTF8 on MAIL
FROM. ``mail_from`` and ``rcpt_to`` of a stored message are the envelope as
sent: an internationalised domain appears in its ASCII (IDNA) form,
``idn@xn--exmple-cua.com``.

A sink that lacks SMTPUTF8, as many relays do, runs in process only::

    from lab.sandbox.smtp import SinkController

    sink = SinkController(SandboxStore(), hostname="127.0.0.1", port=0, smtputf8=False)
    sink.start()  # sink.port is the bound port; sink.stop()

Its EHLO does not offer SMTPUTF8, MAIL FROM with ``SMTPUTF8`` is answered
``501``, and a command with non-ASCII bytes ``500`` (strict ASCII).

Concurrency
===========

Every state change happens under one lock, so the uniqueness and idempotency
rules hold under concurrent requests (twenty simultaneous creates of one
``external_ref`` give one 201 and nineteen 409s). Requests are served by
threads; ``slow`` faults sleep outside the lock.
"""

from lab.sandbox.server import SandboxServer
from lab.sandbox.store import SandboxStore

__all__ = ["SandboxServer", "SandboxStore"]
