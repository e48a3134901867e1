"""Salesforce: Onefold's adapter (`adapter.py`) and a local emulator of the REST API.

The emulator is a real HTTP server on loopback, built from the sandbox's server,
fault queue and controls (`integrations/emulator_kit.py`). Each behaviour below
is documented with its source in `store.py` ([UPSERT], [ERRORS], [FACTS],
[DUPRULE], [ASSIGN], [QUERY], [IDS]).

Running it
==========

In process (tests)::

    from integrations.salesforce.emulator import SalesforceEmulator

    with SalesforceEmulator() as sf:          # port 0: a free port
        sf.http_url                            # the instance URL

Credentials it accepts by default: client id ``onefold-emulator``, secret
``emulator-secret`` (change them with ``POST /_sandbox/config``).

API (what the adapter calls)
============================

Every ``/services/data/vXX.X/...`` call needs ``Authorization: Bearer <token>``;
without a live token it answers 401 ``[{"message": "Session expired or invalid",
"errorCode": "INVALID_SESSION_ID"}]``. Errors are JSON arrays of ``{"message",
"errorCode", "fields"?}``. Every API answer carries ``Sforce-Limit-Info:
api-usage=N/M``. Objects: ``Lead`` (ids ``00Q...``), ``Contact`` (``003...``),
``Task`` (``00T...``); ids are 18 characters, case-safe suffix included, and a
15-character id names the same row.

``POST /services/oauth2/token``
    Form ``grant_type=client_credentials``, ``client_id``, ``client_secret``:
    200 ``{"access_token", "instance_url", "id", "token_type": "Bearer",
    "issued_at", "signature", "scope"}`` (no ``expires_in``, as Salesforce).
    Wrong credentials: 400 ``{"error": "invalid_client", ...}``.

``GET .../sobjects/{Lead|Contact|Task}/describe``
    200 ``{"name", "keyPrefix", "fields": [{"name", "externalId", "unique",
    "idLookup", ...}]}``; the reference field's flags are the org settings below.

``GET .../sobjects/{object}/{field}/{value}``
    By external id: 200 the record (with ``attributes``), 404 ``NOT_FOUND``, or
    300 with the list of the matching records' URLs when several hold the value.
    A field that is not the reference field, or not marked External ID: 404.

``PATCH .../sobjects/{object}/{field}/{value}`` (upsert)
    No match: creates, 201 ``{"id", "success": true, "errors": [], "created":
    true}``. One match: updates it, 200 ``{..., "created": false}`` (API 46.0 and
    later; 204 without a body before). Several: 300 as above, nothing written.
    Not atomic, like Salesforce: the match is read, then, after
    ``upsert_race_seconds``, the row inserted. With the field Unique the loser of
    a race gets 400 ``DUPLICATE_VALUE`` "duplicate value found: <field>
    duplicates value on record with id: <id>"; without it both inserts stand
    (later upserts of that value answer 300). Unknown fields: 400
    ``INVALID_FIELD``; Lead needs ``LastName`` and ``Company``, Contact
    ``LastName`` (400 ``REQUIRED_FIELD_MISSING``); a Task's ``WhoId`` must name a
    Lead or Contact (400 ``INVALID_CROSS_REFERENCE_KEY``).

``POST .../sobjects/{object}``
    Plain create: 201 ``{"id", "success": true, "errors": []}``; the unique and
    duplicate rules apply as on upsert.

``GET|PATCH|DELETE .../sobjects/{object}/{id}``
    200 the record / 204 / 204; 404 ``NOT_FOUND``.

``GET .../query?q=SOQL`` and ``GET .../query/{locator}-{offset}``
    The SOQL the adapter sends: ``SELECT f, ... FROM object [WHERE field op
    literal [AND ...]] [ORDER BY f, ...]`` (dateTime literals unquoted). 200
    ``{"totalSize", "done", "records", "nextRecordsUrl"?}``; pages of
    ``Sforce-Query-Options: batchSize=N`` records (200 to 2,000, default 2,000).
    Anything else: 400 ``MALFORMED_QUERY``.

Quirks emulated
---------------

* Lead assignment: ``Sforce-Auto-Assign`` absent or TRUE runs the org's
  assignment rule on a Lead's create *and* update (the owner becomes a queue,
  ``00G...``); FALSE does not. Stats count the runs per reference
  (``assignments_by_external_ref``).
* Duplicate rule (``duplicate_rule``: ``off``, ``alert``, ``block``): on create
  of a Lead or Contact whose Email (any case) another record of that object
  holds: 400 ``[{"duplicateResut": {"allowSave", "duplicateRule",
  "matchResults": [{"matchRecords": [{"record": {"Id"}}]}]}, "errorCode":
  "DUPLICATES_DETECTED", "message"}]`` (``duplicateResut`` sic). An alerting
  rule lets the create through with ``Sforce-Duplicate-Rule-Header:
  allowSave=true``; a blocking one never does. The rule runs on create only.
* Rate limit: 403 ``REQUEST_LIMIT_EXCEEDED`` "TotalRequests Limit exceeded.",
  no ``Retry-After``.

Simplified: no Recycle Bin (DELETE removes the row) and a deleted Lead's Tasks
stay (whether Salesforce deletes a record's activities with it is *unverified*
here; the drill accepts either); Email matching is exact apart from case; the
duplicate rule runs on create, not on edit; queries understand only the SOQL
above; field values are not type-checked.

Control and inspection (tests and drills only)
==============================================

The sandbox's own: ``POST /_sandbox/reset`` (also ends every token and puts the
org settings back), ``/_sandbox/faults``, ``/_sandbox/chaos``, ``GET
/_sandbox/stats``. Faults apply to upserts and creates: ``create_record`` for
Lead and Contact, ``create_task`` for Task, in Salesforce's words:
``fail_before_commit`` and ``http_500_after_commit`` are 500
``UNKNOWN_EXCEPTION``; ``http_429`` is Salesforce's rate limit, 403
``REQUEST_LIMIT_EXCEEDED``; ``http_503`` is 503 ``SERVER_UNAVAILABLE`` with
``Retry-After``; ``http_400`` is 400 ``FIELD_CUSTOM_VALIDATION_EXCEPTION``;
``drop_response_after_commit`` and ``slow`` as in the sandbox. Faults are taken
before the body is read.

``GET /_sandbox/stats``
    The sandbox's keys: ``records`` (Leads and Contacts), ``tasks``,
    ``messages`` (always 0: no mail here), ``records_by_external_ref`` and
    ``tasks_by_external_ref`` (by the reference field), ``messages_by_recipient``,
    ``messages_by_message_id``, ``calls`` (``create_record``, ``create_task``,
    ``lookup_record``, ``lookup_task``, ``update_record``, ``delete_record``,
    ``list_records``, plus ``token`` and ``describe``), and
    ``assignments_by_external_ref``.

``GET|POST /_sandbox/config``
    The org's settings; POST any of ``client_id``, ``client_secret``,
    ``reference_field`` (default ``Onefold_Ref__c``), ``reference_external_id``
    and ``reference_unique`` (the field's flags on Lead and Contact),
    ``task_reference_external_id`` and ``task_reference_unique`` (on Task), all
    true by default; ``duplicate_rule``; ``upsert_race_seconds`` (0);
    ``api_usage_limit``. Unknown names or wrong types: 400.

``POST /_sandbox/seed``
    ``{"sobject": "Lead", "records": [{field: value}, ...]}`` or
    ``{"sobject", "count", "prefix"}``: 200 ``{"created": [ids]}``. Rows are
    stored as given, past the unique field and the duplicate rule (records from
    before the field was Unique, or an import): how tests make a reference
    match several records.

``POST /_sandbox/expire_tokens``
    200 ``{"expired": n}``: every session ends; the next API call answers 401.
"""
