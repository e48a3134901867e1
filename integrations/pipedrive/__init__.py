"""Pipedrive: the adapter (adapter.py) and a local emulator of its API (emulator.py).

Pipedrive recognises no repeat: no idempotency key, no unique field, no upsert,
and the only way to find a lead by Onefold's reference is its search, whose
freshness is undocumented (CRM-FACTS.md, "Pipedrive"). So the adapter claims
`lookup` with `lookup_proves_absence=False` and a settling delay, and an unclear
create is looked up after that delay: found, adopted; not found, a case. Never a
blind second create.

Running the emulator
====================

In process (tests)::

    from integrations.pipedrive.emulator import PipedriveEmulator, DEFAULT_API_TOKEN

    with PipedriveEmulator() as pipedrive:        # port 0: a free port
        httpx.get(f"{pipedrive.http_url}/v1/leadFields",
                  headers={"x-api-token": DEFAULT_API_TOKEN})

State is in memory; ``/_sandbox/reset`` empties it and restores the defaults.

Conventions
===========

JSON in and out. Every Pipedrive path needs the API token, in the ``x-api-token``
header or the ``api_token`` query parameter
(pipedrive.readme.io/docs/core-api-concepts-authentication); the emulator's is
``DEFAULT_API_TOKEN`` unless ``/_sandbox/config`` changes it. Without it: 401
``{"success": false, "error": "unauthorized access", "errorCode": 401, ...}``.
Successes are ``{"success": true, "data": ..., "additional_data"?: ...}``;
refusals ``{"success": false, "error", "error_info", "data": null,
"additional_data": null}`` (client-nodejs v1 models/lead-not-found-response.ts).
Timestamps are ISO 8601 UTC with a ``Z``.

Vendor API
==========

``POST /api/v2/persons`` ``{"name", "emails": [{"value", "primary", "label"}], "phones"?}``
    200 with the person (``id`` an integer). No uniqueness: the same email twice
    is two persons, as in Pipedrive (CRM-FACTS.md: concurrent webhooks made 2-3
    copies of a contact).

``GET /api/v2/persons/search?term=&fields=email&exact_match=true``
    ``{"data": {"items": [{"result_score", "item": {"id", "type": "person",
    "name", "emails": [...]}}]}, "additional_data": {"next_cursor": null}}``.
    Lags writes by ``search_lag_seconds``.

``GET /api/v2/persons/<id>``
    200 person, 404.

``POST /v1/leads`` ``{"title", "person_id" | "organization_id", <custom key>: value, ...}``
    201 with the lead (``id`` a UUID, ``source_name`` ``API``). 400 without a
    title, without a person or organization, or naming a person that does not
    exist. Custom field values sit at the top level under their 40-hex keys;
    a key that names no lead field is dropped without a word (an assumption:
    Pipedrive documents nothing either way), and an unset field is absent from
    the lead. Faultable as ``create_record``.

``GET /v1/leads?start=&limit=&sort=add_time ASC``
    A page of leads (archived ones excluded), ``additional_data: {"start",
    "limit", "more_items_in_collection"}``; limit 100 by default, 500 at most.

``GET|PATCH|DELETE /v1/leads/<id>``
    200 lead / updated lead (``null`` unsets a property) / ``{"id"}``; 404
    ``"Lead not found"``.

``GET /api/v2/leads/search?term=&fields=custom_fields&exact_match=true``
    Leads whose searchable custom field (types address, varchar, text,
    varchar_auto, double, monetary, phone) matches ``term``, not case
    sensitive, as the index saw them ``search_lag_seconds`` ago: a lead
    created (or its field changed) within the lag is not found (or found by
    its old value). Items as for persons, ``item.custom_fields`` the values.

``GET /v1/leadFields``
    The lead's own fields and the configured custom ones: ``key``, ``name``,
    ``field_type``, ``active_flag``, ``searchable_flag`` (client-nodejs v1
    models/field.ts).

``POST /api/v2/activities`` ``{"subject", "type", "lead_id", "note", "owner_id"?, ...}``
    200 with the activity (``id`` an integer); 404 when ``lead_id`` names no
    lead. Faultable as ``create_task``.

``GET /api/v2/activities?lead_id=&limit=&cursor=``
    The lead's activities by id, ``additional_data.next_cursor``. A filtered
    list, read from the store: no lag.

``GET /api/v2/activities/<id>``
    200 activity, 404.

Quirks and fault modes
======================

Fault modes are the sandbox's (integrations/sandbox/__init__.py), on
``create_record`` (POST /v1/leads) and ``create_task`` (POST /api/v2/activities),
answered in Pipedrive's words: ``http_429`` is 429 ``"Request over limit"`` with
``x-ratelimit-limit``, ``x-ratelimit-remaining: 0`` and ``x-ratelimit-reset:
<seconds>`` and no Retry-After (pipedrive.readme.io/docs/core-api-concepts-rate-limiting);
``http_503`` a 503 with Retry-After; ``fail_before_commit`` and
``http_500_after_commit`` a 500; ``drop_response_after_commit`` closes the
connection after storing. Person creation takes no faults.

Controls
========

The sandbox's ``/_sandbox/reset``, ``/_sandbox/faults``, ``/_sandbox/chaos`` and
``/_sandbox/stats`` (records: live leads; tasks: activities of live leads;
``records_by_external_ref`` by the value of the reference field,
``tasks_by_external_ref`` by the "Onefold reference: KEY" line of the
activity's note; messages always 0; ``calls`` adds ``create_person`` and
``lookup_person``), and:

``GET|POST /_sandbox/config``
    ``{"search_lag_seconds": 1.0, "api_token": "...", "lead_fields": [{"key",
    "name", "field_type"}], "reference_field": "<key stats count by>"}``.
    POST changes any of them (400 for unknown keys or bad values);
    ``lead_fields`` replaces the custom lead fields, by default the reference
    field (``REFERENCE_FIELD_KEY``, varchar) and a message field
    (``MESSAGE_FIELD_KEY``, text); ``[]``: both are gone; ``field_type:
    "enum"``: the field exists but search cannot find it.
    ``PipedriveEmulator.adapter_env()`` gives the PIPEDRIVE_* variables that
    point the adapter at a fresh emulator.
    A lag applies to writes made after it is set.
"""
