"""HubSpot: the adapter (adapter.py) and a local emulator of HubSpot's CRM API (emulator.py).

The emulator is a real HTTP server on loopback built from the sandbox's parts
(integrations/emulator_kit.py): the same fault queue, chaos, call counts and
``/_sandbox/`` controls, and HubSpot's own paths, bodies and quirks. Each
emulated behaviour names its source in a comment in emulator.py; CRM-FACTS.md
("HubSpot CRM") is the summary.

Running it
==========

In process (tests)::

    from integrations.hubspot.emulator import HubSpotEmulator

    with HubSpotEmulator() as hubspot:          # port 0: a free port
        hubspot.http_url                        # http://127.0.0.1:PORT
        hubspot.hubspot.set_config({"search_lag_seconds": 5})

Every HubSpot path needs ``Authorization: Bearer <token>`` (any token, or the
one set with the ``token`` knob); otherwise 401 ``INVALID_AUTHENTICATION``.

HubSpot API (what the adapter calls)
====================================

Object types: ``contacts``, ``deals``, ``tickets``, ``tasks``. Ids are numbers
(strings in JSON), one counter for all types, from 1001. An object is::

    {"id": "1002", "properties": {..., "hs_object_id", "createdate",
     "hs_lastmodifieddate"}, "createdAt": "...Z", "updatedAt": "...Z",
     "archived": false[, "associations": {"contacts": {"results": [{"id", "type"}]}}]}

Errors have HubSpot's shape ``{"status": "error", "message", "correlationId",
"category"}`` (plus ``errors`` where noted).

``POST /crm/v3/objects/{type}`` ``{"properties": {...}, "associations": [{"to": {"id"},
"types": [{"associationCategory": "HUBSPOT_DEFINED", "associationTypeId"}]}]}``
    201 with the object. Unknown properties: 400 ``VALIDATION_ERROR``. Required:
    deals ``dealname``; tickets ``subject``, ``hs_pipeline_stage``; tasks
    ``hs_timestamp``. Association type ids are checked: deal→contact 3,
    ticket→contact 16, task→contact 204, task→deal 216, task→ticket 230.
    Contacts are unique by email (case-insensitive): a second one answers 409
    ``CONFLICT`` "Contact already exists. Existing ID: N" (the id only in the
    text). A value of a unique property (the reference property when
    ``reference_unique``, and ``unique_properties``) held by a live object of
    the type answers 409 ``CONFLICT`` "A deal with onefold_ref X already
    exists. Existing ID: N" with ``errors: [{"message", "in": "<property>"}]``.
    Runs under the fault queue: ``create_contact`` for contacts,
    ``create_record`` for deals and tickets, ``create_task`` for tasks.

``GET /crm/v3/objects/{type}/{id}[?idProperty=P][&properties=a,b][&associations=contacts]``
    200 the object, read from the objects themselves (no lag). By id, a merged-away
    id answers with the surviving object. With ``idProperty`` the value is
    looked up in P, which must be unique for the type (``email`` for contacts),
    else 400 ``VALIDATION_ERROR`` "... non-unique ...". Missing: 404
    ``OBJECT_NOT_FOUND`` "resource not found".

``PATCH /crm/v3/objects/{type}/{id}`` ``{"properties"}``: 200; uniqueness as on create.
``DELETE /crm/v3/objects/{type}/{id}``: 204, archived (what staff do behind Onefold's back).

``GET /crm/v3/objects/{type}?limit=N&after=C[&properties=]``
    Live objects by id, ``limit`` at most 100: ``{"results", "paging": {"next":
    {"after"}}}``, ``paging`` absent on the last page.

``POST /crm/v3/objects/{type}/search`` ``{"filterGroups": [{"filters": [{"propertyName",
"operator": "EQ", "value"}]}], "limit"}``
    ``{"total", "results"}``; an object shows only ``search_lag_seconds`` after
    its last write (HubSpot's search lags writes). The adapter never uses it;
    tests use it to show the lag.

``POST /crm/v3/objects/{type}/merge`` ``{"primaryObjectId", "objectIdToMerge"}``
    200 the primary; the merged object's associations move to it and its id is
    added to ``hs_merged_object_ids``. Merging an object already merged: 400.

``GET /crm/v3/properties/{type}/{name}``
    200 ``{"name", "type": "string", "hasUniqueValue", ...}``; 404 when the
    property does not exist on that type. The reference property exists on
    deals, tickets and tasks unless listed in ``reference_missing_on``.

Controls (tests and drills)
===========================

The sandbox's: ``POST /_sandbox/reset``, ``/_sandbox/faults`` (actions
``create_record``, ``create_task``, ``create_contact``), ``/_sandbox/chaos``,
``GET /_sandbox/stats``: ``records`` are live deals and tickets,
``records_by_external_ref`` and ``tasks_by_external_ref`` count them by the
reference property; plus ``contacts`` and ``contacts_by_email``; ``calls``
adds ``create_contact``, ``search``, ``get_property``.

``GET|POST /_sandbox/config``: ``search_lag_seconds`` (0), ``reference_property``
(``onefold_ref``), ``reference_unique`` (true; false: the property exists
without hasUniqueValue and nothing refuses a repeat), ``reference_missing_on``
([]), ``unique_properties`` ({type: [names]}: clashes that are not ours),
``rate_limit_policy`` (``TEN_SECONDLY_ROLLING`` or ``DAILY``: how an injected
``http_429`` answers), ``retry_after_header`` (false), ``token`` (null).
Reset puts them back.

Faults in HubSpot's words: ``http_429`` answers ``{"status": "error", "message":
"You have reached your ... limit.", "errorType": "RATE_LIMIT", "policyName",
"correlationId", "requestId"}`` with ``X-HubSpot-RateLimit-*`` headers;
``http_503``, ``fail_before_commit``, ``http_400``, ``http_500_after_commit``
answer HubSpot-shaped bodies; ``drop_response_after_commit`` and ``slow`` are
the sandbox's.

Not emulated (unverified or unused): batch upsert, the v4 associations API,
owners and pipelines (any value is stored), HubSpot's real rate counting.
"""
